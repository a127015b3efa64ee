"""The pure parts of a rollout: the message spec.model becomes, and what status says about it."""

from __future__ import annotations

import base64
import copy
from pathlib import Path

import pytest
import yaml

from scorestream.api import descriptor as descriptors
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import publish, status

EXAMPLE = yaml.safe_load((Path(__file__).resolve().parent.parent / "examples" / "wine-pmml.yaml").read_text())
NOW = "2026-11-22T12:00:00Z"


def spec(**model) -> s.ModelServingSpec:
    raw = copy.deepcopy(EXAMPLE["spec"])
    raw["model"].update(model)
    return s.ModelServingSpec.model_validate(raw)


def test_the_descriptor_round_trips_through_the_models_topic_encoding():
    d = publish.descriptor(spec(uri="file:///models/tree.pmml"))
    again = descriptors.decode(d.to_json_bytes(), {"content-type": b"application/json"})
    assert again == d and again.location == "file:///models/tree.pmml" and again.data_type == "wine"


@pytest.mark.parametrize("uri, data", [
    ("data:application/xml;base64," + base64.b64encode(b"<PMML/>").decode(), b"<PMML/>"),
    ("data:,%3CPMML%2F%3E", b"<PMML/>"),
])
def test_a_data_uri_travels_inline(uri, data):
    d = publish.descriptor(spec(uri=uri))
    assert d.data == data and d.location is None


def test_a_broken_data_uri_is_refused():
    with pytest.raises(ValueError, match="base64"):
        publish.descriptor(spec(uri="data:;base64,@@@"))


def test_the_rollout_id_changes_with_the_model_and_only_with_it():
    a, b = spec(version="1"), spec(version="2")
    assert publish.rollout_id(publish.descriptor(a)) == publish.rollout_id(publish.descriptor(spec(version="1")))
    assert publish.rollout_id(publish.descriptor(a)) != publish.rollout_id(publish.descriptor(b))


def observe(sp, serving=None, rejected=(), published_now=False):
    job = status.JobReport(reachable=True, ready=True, serving={"wine": serving} if serving else {},
                           rejected=list(rejected))
    return status.Observed(generation=2, spec=sp, driver=status.DriverState(exists=True, ready=True), job=job,
                           published="rid", published_now=published_now)


def compute(name, namespace, observed, previous, now):
    """status.compute on statuses as the API server holds them."""
    return status.wire(status.compute(name, namespace, observed, status.parse(previous), now=now))


def model_ready(st):
    return next(c for c in st["conditions"] if c["type"] == "ModelReady")


def test_model_ready_follows_the_job_not_the_publication():
    sp = spec(name="wine-linear", version="2")
    old = {"name": "wine-tree", "version": "1", "since": 1.7e9}
    first = compute("wine", "ml", observe(sp, old, published_now=True), None, now=NOW)
    assert model_ready(first)["reason"] == "RollingOut"
    assert [(h["version"], h["outcome"]) for h in first["model"]["history"]] == [("2", "Published"), ("1", "Serving")]
    then = compute("wine", "ml", observe(sp, {"name": "wine-linear", "version": "2", "since": 1.8e9}),
                          first, now=NOW)
    assert model_ready(then)["status"] == "True"
    assert [(h["version"], h["outcome"]) for h in then["model"]["history"]] == [("2", "Serving"), ("1", "Replaced")]


def test_a_rejected_model_is_rolled_back_and_stays_so():
    sp = spec(name="wine-linear", version="2")
    old = {"name": "wine-tree", "version": "1", "since": 1.7e9}
    first = compute("wine", "ml", observe(sp, old, published_now=True), None, now=NOW)
    later = 1795867200.0  # after NOW
    rejected = [{"model": "wine-linear:2", "dataType": "wine", "reason": "cannot fetch model: gone", "at": later}]
    st = compute("wine", "ml", observe(sp, old, rejected), first, now=NOW)
    cond = model_ready(st)
    assert cond["status"] == "False" and cond["reason"] == "RolledBack"
    assert "cannot fetch model: gone" in cond["message"] and "still serving wine-tree 1" in cond["message"]
    # The job's record of rejections may roll over; the status keeps the verdict.
    again = compute("wine", "ml", observe(sp, old), st, now=NOW)
    assert model_ready(again)["reason"] == "RolledBack"


def test_an_older_rejection_of_the_same_version_does_not_count():
    sp = spec(name="wine-linear", version="2")
    old = {"name": "wine-tree", "version": "1", "since": 1.7e9}
    first = compute("wine", "ml", observe(sp, old, published_now=True), None, now=NOW)
    stale = [{"model": "wine-linear:2", "dataType": "wine", "reason": "an earlier artifact", "at": 1.7e9}]
    assert model_ready(compute("wine", "ml", observe(sp, old, stale), first, now=NOW))["reason"] == "RollingOut"


def test_history_is_bounded():
    prev = None
    for v in range(1, 15):
        sp = spec(name="m", version=str(v))
        prev = compute("wine", "ml", observe(sp, {"name": "m", "version": str(v), "since": 1.7e9 + v},
                                                    published_now=True), prev, now=NOW)
    history = prev["model"]["history"]
    # Each entry keeps spec.model as published, for a rollback by request.
    assert history[-1].pop("model")["uri"] == spec(name="m", version="14").model.uri
    assert len(history) == 10 and history[-1] == {"name": "m", "version": "14", "outcome": "Serving",
                                                  "at": history[-1]["at"]}
    assert {h["outcome"] for h in history[:-1]} == {"Replaced"}
