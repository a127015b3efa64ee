"""The pure parts of a canary or shadow: the rules' verdicts, the plan's steps, and the status."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import publish, rollout, status

EXAMPLE = yaml.safe_load((Path(__file__).resolve().parent.parent / "examples" / "wine-pmml.yaml").read_text())
T0 = 1_800_000_000.0  # the operator's clock in these tests
STARTED = "2027-01-15T08:00:00Z"  # = T0


def spec(strategy="Canary", version="2", **canary) -> s.ModelServingSpec:
    raw = copy.deepcopy(EXAMPLE["spec"])
    raw["model"].update(name="wine-linear", version=version)
    raw["rollout"] = {"strategy": strategy, "canary": {"percent": 10, "minRecords": 100, "promoteAfter": "60s", **canary}}
    return s.ModelServingSpec.model_validate(raw)


RULES = s.AnalysisSpec(minRecords=100, maxErrorRate=0.05, maxLatencyRatio=2.0)
CURRENT = rollout.Figures(records=5000, errors=0, mean_ms=0.02)


@pytest.mark.parametrize("candidate, elapsed, verdict, why", [
    (rollout.Figures(50, 0, 0.02), 600, "wait", "50 of minRecords 100"),
    (rollout.Figures(200, 0, 0.03), 10, "wait", "promoting after 60s"),
    (rollout.Figures(200, 0, 0.03), 61, "promote", "200 records, 0.00% failed, 1.50x"),
    (rollout.Figures(200, 20, 0.02), 600, "rollback", "20 of 220 records failed"),
    # Fails fast: 6 errors are over 5% of minRecords whatever the next records do.
    (rollout.Figures(10, 6, 0.02), 1, "rollback", "6 of 16 records failed"),
    (rollout.Figures(10, 4, 0.02), 1, "wait", "14 of minRecords"),
    (rollout.Figures(500, 0, 0.05), 600, "rollback", "2.50x the serving model's"),
])
def test_the_rules_decide(candidate, elapsed, verdict, why):
    got, reason = rollout.judge(RULES, CURRENT, candidate, elapsed, promote_after=60)
    assert got == verdict and why in reason, reason


@pytest.mark.parametrize("candidate, verdict, why", [
    (rollout.Figures(200, 0, 0.02, prediction_drift=0.31), "rollback", "PSI 0.310, more than maxDrift 0.2"),
    (rollout.Figures(200, 0, 0.02, prediction_drift=0.05), "promote", "prediction drift PSI 0.050"),
    # Not judged before minRecords, nor without a baseline.
    (rollout.Figures(50, 0, 0.02, prediction_drift=3.0), "wait", "50 of minRecords 100"),
    (rollout.Figures(200, 0, 0.02, prediction_drift=None), "promote", "200 records"),
])
def test_max_drift_rolls_back_a_candidate_whose_predictions_drifted(candidate, verdict, why):
    rules = RULES.model_copy(update={"max_drift": 0.2})
    got, reason = rollout.judge(rules, CURRENT, candidate, 600, promote_after=60)
    assert got == verdict and why in reason, reason
    # Unset, drift is not judged.
    assert rollout.judge(RULES, CURRENT, rollout.Figures(200, 0, 0.02, 5.0), 600, promote_after=60)[0] == "promote"


def test_a_shadow_is_never_promoted_by_the_rules():
    got, reason = rollout.judge(RULES, CURRENT, rollout.Figures(10_000, 0, 0.02), 10**6, promote_after=None)
    assert got == "wait" and "strategy Immediate" in reason


SERVING = {"name": "wine-tree", "version": "1", "records": 5000, "errors": 0, "meanMs": 0.02}


def run(report):
    """A version the job reports, as the operator reads it."""
    return None if report is None else status.Running.model_validate(report)


# The pure functions on statuses as the API server holds them (JSON), the job's figures as it sends them.
def plan(sp, previous, current, candidate, rejection, now):
    return rollout.plan(sp, status.parse(previous), run(current), run(candidate), rejection, now)


def manual(sp, previous, requests, now):
    return rollout.manual(sp, status.parse(previous), requests, now)


def compute(name, namespace, observed, previous, now):
    return status.wire(status.compute(name, namespace, observed, status.parse(previous), now=now))


def cand(records=0, errors=0, mean=None, version="2"):
    return {"name": "wine-linear", "version": version, "records": records, "errors": errors, "meanMs": mean}


def analyzing(sp, published=None, started=STARTED):
    published = published or publish.rollout_id(rollout.candidate_descriptor(sp))
    return {"model": {"published": published, "rollout": {
        "strategy": sp.rollout.strategy, "phase": "Analyzing", "startedAt": started,
        "candidate": {"name": "wine-linear", "version": "2"}, "message": ""}}}


def test_the_first_model_rolls_out_immediately_whatever_the_strategy():
    p = plan(spec(), {}, current=None, candidate=None, rejection=None, now=T0)
    assert p.publish is not None and p.publish.candidate is None and not p.withdraw


def test_a_change_publishes_a_candidate_with_its_share_then_waits_for_the_job():
    sp = spec()
    p = plan(sp, {"model": {"published": "older"}}, SERVING, None, None, T0)
    assert p.publish.candidate.strategy == "Canary" and p.publish.candidate.basis_points == 1000
    assert p.token == publish.rollout_id(p.publish) != publish.rollout_id(publish.descriptor(sp))
    again = plan(sp, analyzing(sp), SERVING, None, None, T0 + 5)
    assert again.token is None and "install" in again.reason


def test_a_passing_canary_is_promoted_and_its_key_cleared():
    sp = spec()
    p = plan(sp, analyzing(sp), SERVING, cand(300, 0, 0.021), None, T0 + 61)
    assert p.verdict == "promote" and p.publish.candidate is None and p.withdraw
    assert p.rollout_id == publish.rollout_id(publish.descriptor(sp))
    # Recorded as published: nothing more is sent while the job takes it over.
    promoted = {"model": {"published": p.rollout_id, "rollout": {**analyzing(sp)["model"]["rollout"], "phase": "Promoting"}}}
    assert plan(sp, promoted, SERVING, None, None, T0 + 62).token is None


def test_a_failing_canary_is_withdrawn_once_and_not_retried():
    sp = spec()
    p = plan(sp, analyzing(sp), SERVING, cand(100, 30, 0.02), None, T0 + 5)
    assert p.verdict == "rollback" and p.withdraw and p.publish is None and p.token.startswith("withdraw:")
    rolled = analyzing(sp)
    rolled["model"]["rollout"]["phase"] = "RolledBack"
    assert plan(sp, rolled, SERVING, None, None, T0 + 600).token is None
    # A changed spec is a new trial.
    assert plan(spec(version="3"), rolled, SERVING, None, None, T0 + 600).publish is not None


def test_a_candidate_the_job_rejected_is_rolled_back():
    sp = spec()
    p = plan(sp, analyzing(sp), SERVING, None, "cannot fetch model: 404", T0 + 5)
    assert p.verdict == "rollback" and "404" in p.reason


def test_going_back_to_the_serving_model_ends_the_trial():
    sp = spec(version="1")
    sp.model.name = "wine-tree"
    p = plan(sp, analyzing(spec()), SERVING, cand(10), None, T0 + 5)
    assert p.withdraw and p.publish is None


def test_immediate_promotes_a_shadow_and_clears_its_key():
    shadow = spec("Shadow")
    p = plan(spec("Immediate"), analyzing(shadow), SERVING, cand(10_000), None, T0 + 3600)
    assert p.publish is not None and p.publish.candidate is None and p.withdraw


# --- status -------------------------------------------------------------------------------------

def observed(sp, plan, candidate=None, serving=SERVING, prev=None):
    """What the reconciler hands to status.compute after carrying `plan` out."""
    job = status.JobReport(reachable=True, ready=True, serving={"wine": serving},
                           candidates={"wine": candidate} if candidate else {})
    sent = plan is not None and plan.publish is not None
    published = plan.rollout_id if sent else ((prev or {}).get("model") or {}).get("published")
    return status.Observed(generation=3, spec=sp, driver=status.DriverState(exists=True, ready=True), job=job,
                           published=published, published_now=sent, plan=plan)


def model_ready(st):
    return next(c for c in st["conditions"] if c["type"] == "ModelReady")


def test_status_follows_a_canary_from_publication_to_promotion():
    sp = spec()
    publish_step = plan(sp, {"model": {"published": "older"}}, SERVING, None, None, T0)
    st = compute("wine", "ml", observed(sp, publish_step), {}, now=STARTED)
    trial = st["model"]["rollout"]
    assert (trial["phase"], trial["strategy"], trial["percent"]) == ("Analyzing", "Canary", 10.0)
    assert model_ready(st)["reason"] == "CanaryAnalysis" and "10% of records" in model_ready(st)["message"]

    waiting = plan(sp, st, SERVING, cand(40, 0, 0.02), None, T0 + 10)
    st = compute("wine", "ml", observed(sp, waiting, cand(40, 0, 0.02), prev=st), st, now="2027-01-15T08:00:10Z")
    trial = st["model"]["rollout"]
    assert trial["candidate"]["records"] == 40 and trial["current"]["records"] == 5000
    assert "40 of minRecords 100" in trial["message"]

    promote = plan(sp, st, SERVING, cand(400, 0, 0.02), None, T0 + 61)
    st = compute("wine", "ml", observed(sp, promote, cand(400, 0, 0.02), prev=st), st,
                        now="2027-01-15T08:01:01Z")
    assert st["model"]["rollout"]["phase"] == "Promoting" and model_ready(st)["reason"] == "RollingOut"

    now_serving = {**cand(400), "since": T0 + 62}
    st = compute("wine", "ml", observed(sp, rollout.Plan(), serving=now_serving, prev=st), st, now="2027-01-15T08:01:03Z")
    assert st["model"]["rollout"]["phase"] == "Promoted"
    assert model_ready(st)["status"] == "True"
    assert [(e["version"], e["outcome"]) for e in st["model"]["history"]][-1] == ("2", "Serving")


def test_status_says_why_a_canary_was_rolled_back():
    sp = spec()
    prev = compute("wine", "ml", observed(sp, plan(sp, {"model": {"published": "x"}}, SERVING, None,
                                                                   None, T0)), {}, now=STARTED)
    fail = plan(sp, prev, SERVING, cand(100, 30, 0.02), None, T0 + 5)
    st = compute("wine", "ml", observed(sp, fail, cand(100, 30, 0.02), prev=prev), prev, now="2027-01-15T08:00:05Z")
    ready = model_ready(st)
    assert ready["status"] == "False" and ready["reason"] == "RolledBack" and "30 of 130 records failed" in ready["message"]
    assert st["model"]["rollout"]["phase"] == "RolledBack"
    outcomes = {(e["name"], e["outcome"]) for e in st["model"]["history"]}
    assert outcomes == {("wine-tree", "Serving"), ("wine-linear", "RolledBack")}
    # It stays rolled back on later observations.
    later = compute("wine", "ml", observed(sp, plan(sp, st, SERVING, None, None, T0 + 60), prev=st), st,
                           now="2027-01-15T08:01:00Z")
    assert model_ready(later)["reason"] == "RolledBack"


def test_a_trial_judged_on_its_first_figures_ends_with_them():
    # The rollout poll may judge a candidate on the first observation with enough records: no
    # status with its figures was written while it ran (seen on CI, a drift rollback without
    # predictionDrift in status).
    sp = spec(maxDrift=0.2)
    prev = compute("wine", "ml", observed(sp, plan(sp, {"model": {"published": "x"}}, SERVING, None,
                                                                   None, T0)), {}, now=STARTED)
    drifted = {**cand(200, 0, 0.02), "predictionDrift": 0.9}
    verdict = plan(sp, prev, SERVING, drifted, None, T0 + 5)
    st = compute("wine", "ml", observed(sp, verdict, drifted, prev=prev), prev, now="2027-01-15T08:00:05Z")
    trial = st["model"]["rollout"]
    assert trial["phase"] == "RolledBack" and "maxDrift" in trial["message"], trial
    assert (trial["candidate"]["records"], trial["candidate"]["predictionDrift"]) == (200, 0.9), trial


def test_status_shows_a_shadows_agreement():
    sp = spec("Shadow")
    prev = compute("wine", "ml", observed(sp, plan(sp, {"model": {"published": "x"}}, SERVING, None,
                                                                   None, T0)), {}, now=STARTED)
    c = {**cand(2000, 0, 0.03), "agreement": 0.81, "meanAbsDiff": 0.2}
    st = compute("wine", "ml", observed(sp, plan(sp, prev, SERVING, c, None, T0 + 30), c, prev=prev), prev,
                        now="2027-01-15T08:00:30Z")
    trial = st["model"]["rollout"]
    assert trial["agreement"] == 0.81 and trial["meanAbsDiff"] == 0.2 and trial["phase"] == "Analyzing"
    assert model_ready(st)["reason"] == "ShadowAnalysis" and "every record" in model_ready(st)["message"]
