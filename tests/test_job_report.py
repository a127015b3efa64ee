"""The job's HTTP answers (scorestream.api.job_http) as the operator's status logic reads them:
each figure carried from its contract field to the typed report (status.Running), nothing read
by a key that a renamed field would leave empty."""

from __future__ import annotations

from scorestream.api import job_http as h
from scorestream.operator import observer
from scorestream.operator.status import Running

SINCE = 1.7e9


def figures(name: str, version: str, invocations: int, errors: int, mean: float | None) -> dict:
    return dict(name=name, version=version, description="", since=SINCE, invocations=invocations, errors=errors,
                duration=h.Duration(totalMs=(mean or 0.0) * invocations, minMs=mean, maxMs=mean, meanMs=mean))


def stats(candidate: h.CandidateFigures | None) -> h.Stats:
    serving = h.ServingFigures(**figures("wine-tree", "1", 900, 3, 0.25), format="pmml", previous=[],
                               candidate=candidate)
    totals = h.Totals(recordsIn=1000, recordsOut=1000, recordsDeadLettered=0, batches=10, lag=7, executors=2,
                      executorTarget=3, liveScaling=True, queryId=None, inputRate=120.0,
                      processingRatePerExecutor=80.0, batchSeconds=1.0, executorsUsedLastBatch=2, modelSwitches=1,
                      lastBatchAt=None)
    return h.Stats(dataTypes={"wine": serving}, totals=totals)


def report(candidate: h.CandidateFigures | None = None, rejected: list[h.Rejection] | None = None):
    return observer.job_report_from(h.Readiness(ready=True, reason="serving"), stats(candidate),
                                    h.Models(serving={}, candidates={}, rejected=rejected or []))


def test_the_serving_model_and_the_totals_reach_the_report():
    got = report()
    assert got.serving == {"wine": Running(name="wine-tree", version="1", since=SINCE, records=900, errors=3,
                                           mean_ms=0.25)}
    assert got.candidates == {}
    assert (got.reachable, got.ready, got.ready_reason, got.lag, got.executors, got.executor_target,
            got.live_scaling, got.input_rate, got.per_executor_rate) == (True, True, "serving", 7, 2, 3, True, 120.0, 80.0)


def test_a_shadow_candidate_carries_its_comparisons():
    shadow = h.CandidateFigures(**figures("wine-linear", "2", 400, 1, 0.5), format="pmml", strategy="Shadow",
                                percent=0.0, comparison=h.Comparison(records=400, errors=1, agreement=0.98,
                                                                     meanAbsDiff=0.03))
    assert report(shadow).candidates["wine"] == Running(
        name="wine-linear", version="2", since=SINCE, records=400, errors=1, mean_ms=0.5, strategy="Shadow",
        percent=0.0, agreement=0.98, mean_abs_diff=0.03)


def test_a_canary_candidate_has_no_comparisons():
    canary = h.CandidateFigures(**figures("wine-linear", "2", 40, 0, None), format="pmml", strategy="Canary",
                                percent=10.0)
    got = report(canary).candidates["wine"]
    assert (got.strategy, got.percent, got.mean_ms, got.agreement, got.mean_abs_diff) == ("Canary", 10.0, None, None, None)


def test_rejections_stay_typed_and_bounded():
    rejected = [h.Rejection(model="m" * 400, dataType=None, reason="r" * 2000, at=SINCE)]
    (got,) = report(rejected=rejected).rejected
    assert isinstance(got, h.Rejection) and (len(got.model), len(got.reason), got.dataType, got.at) == \
        (300, 1000, None, SINCE)
