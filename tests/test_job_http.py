"""The job's HTTP answers as one contract (scorestream.api.job_http): the runtime serves them, the
operator parses them, and an answer outside the contract is an observation error with its reason."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from scorestream.api import job_http as h
from scorestream.api.scoring import BatchCounts
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import observer, status
from scorestream.operator.conditions import Reason
from scorestream.runtime.executors import ExecutorControl
from scorestream.runtime.http import StatusServer
from scorestream.runtime.models import LoadedModel, ModelRegistry
from scorestream.runtime.stats import ServingStats

from harness.fake_job import served

EXAMPLE = yaml.safe_load((Path(__file__).resolve().parent.parent / "examples" / "wine-pmml.yaml").read_text())


def loaded(name, version, data_type="wine"):
    return LoadedModel(name, version, "", data_type, "pmml", ("alcohol",), f"{name}-{version}.pmml", "d" * 64)


@pytest.fixture
def server():
    registry = ModelRegistry()
    registry.install(loaded("tree", "1"))
    registry.install(loaded("tree", "1", data_type="beer"))
    registry.install_candidate(loaded("linear", "2"), "Shadow", 0)
    stats = ServingStats(registry)
    counts = {"in": 3, "out": 3, "dead": 0, "nanos": 3000, "le": [0] * 13,
              "routes": {"tree:1": {"n": 3, "err": 0, "sum": 3000, "min": 900, "max": 1200}},
              "shadows": {"linear:2": {"n": 3, "err": 0, "agree": 2, "diff": 0.5, "sum": 600}}, "workers": ["driver"]}
    stats.add_batch(BatchCounts.model_validate(counts), [registry.snapshot()], 0.1)
    registry.reject("broken:3", "wine", "not a PMML document")
    control = ExecutorControl(None, "local[2]", threading.Lock())  # local mode: nothing of Spark is touched
    srv = StatusServer("127.0.0.1", 0, stats, lambda: h.Readiness(ready=False, reason="restoring models"),
                       lambda: control, token=TOKEN).start()
    yield f"http://127.0.0.1:{srv.port}"
    srv.stop()


TOKEN = "the-operators-token"


def call(url, body=None, token=TOKEN):
    """GET, or POST `body` with the control token (as the operator does)."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}"} if data and token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, method="POST" if data else "GET",
                                                           headers=headers)) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_runtime_answers_as_the_contract_says(server):
    code, ready = call(f"{server}/readyz")
    assert code == 503 and h.Readiness.model_validate(ready) == h.Readiness(ready=False, reason="restoring models")

    code, raw = call(f"{server}/stats")
    stats = h.Stats.model_validate(raw)
    assert code == 200 and stats.totals.recordsIn == 3 and stats.totals.liveScaling is None
    wine = stats.dataTypes["wine"]
    assert (wine.invocations, wine.duration.minMs, wine.candidate.strategy) == (3, 0.0009, "Shadow")
    assert wine.candidate.comparison.agreement == round(2 / 3, 6)
    # The wire as before the models: an absent candidate or comparison is left out, not null.
    assert "candidate" not in raw["dataTypes"]["beer"] and raw["totals"]["lag"] is None

    code, raw = call(f"{server}/models")
    models = h.Models.model_validate(raw)
    assert code == 200 and models.candidates["wine"].strategy == "Shadow"
    assert [(r.model, r.reason) for r in models.rejected] == [("broken:3", "not a PMML document")]

    code, raw = call(f"{server}/executors")
    assert code == 200 and h.Executors.model_validate(raw).running == 1

    code, raw = call(f"{server}/executors", {"total": 2})
    answer = h.ScaleAnswer.model_validate(raw)
    assert code == 409 and not answer.accepted and "local mode" in answer.reason


@pytest.mark.parametrize("body", [{"total": -1}, {"total": True}, {"total": 1.5}, {"totals": 2}, {},
                                  {"total": h.MAX_EXECUTORS + 1}, {"total": 1_000_000}])
def test_a_bad_scale_request_is_refused_with_the_reason(server, body):
    code, raw = call(f"{server}/executors", body)
    assert code == 400 and "total" in h.Failure.model_validate(raw).error


async def test_the_operator_reads_the_fake_job_as_it_reads_the_runtime(job):  # noqa: F811
    report = await observer.job_report(job.url)
    assert report.reachable and report.error is None and report.ready
    assert report.serving["wine"] == status.Running(name="wine-tree", version="1", since=1.7e9, records=0, errors=0)
    assert (report.executors, report.executor_target, report.live_scaling, report.lag) == (2, 2, True, 0)
    answer = await observer.scale_executors(job.url, 3, job.token)
    assert answer.accepted and answer.target == 3 and job.asked == [3]
    with pytest.raises(observer.JobAnswerError, match="HTTP 401"):
        await observer.scale_executors(job.url, 4, "a guess")
    assert job.asked == [3] and job.refused == 1


@pytest.mark.parametrize("token", [None, "a guess"])
def test_a_scale_request_without_the_token_is_refused(server, token):
    code, raw = call(f"{server}/executors", {"total": 1}, token=token)
    assert code == 401 and "token" in h.Failure.model_validate(raw).error


@pytest.fixture
async def misanswering():
    """A job whose answers the test sets, as raw JSON."""
    answers = {"/readyz": (200, {"ready": True, "reason": "serving"})}

    async def answer(request):
        code, body = answers[request.path]
        return web.json_response(body, status=code)

    app = web.Application()
    for path in ("/readyz", "/stats", "/models"):
        app.router.add_get(path, answer)
    async with served(app) as url:
        yield answers, url


async def test_an_answer_outside_the_contract_is_an_observation_error_with_its_reason(misanswering, job):  # noqa: F811
    answers, url = misanswering
    stats = json.loads((await job.stats(None)).body)
    answers["/models"] = (200, json.loads((await job.models(None)).body))
    answers["/stats"] = (200, stats)
    assert (await observer.job_report(url)).reachable

    stats["totals"]["executorGoal"] = stats["totals"].pop("executorTarget")  # renamed on the job's side
    report = await observer.job_report(url)
    assert not report.reachable and report.serving == {} and report.executor_target is None
    assert report.error == ("GET /stats answered outside the contract: totals.executorTarget: Field required; "
                            "totals.executorGoal: Extra inputs are not permitted")

    answers["/stats"] = (500, {"error": "boom"})
    report = await observer.job_report(url)
    assert report.error == "GET /stats answered HTTP 500: boom"


def test_status_names_an_answer_outside_the_contract():
    spec = s.ModelServingSpec.model_validate(EXAMPLE["spec"])
    observed = status.Observed(generation=1, spec=spec, driver=status.DriverState(exists=True, ready=True),
                               job=status.JobReport(error="GET /stats answered outside the contract: totals.lag: ..."))
    new = status.compute("wine", "ml", observed, None)
    degraded = next(c for c in new.conditions if c.type == "Degraded")
    assert new.phase == "Degraded" and degraded.reason == Reason.JOB_ANSWER_INVALID
    assert "totals.lag" in degraded.message
