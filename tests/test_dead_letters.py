"""Bad records and bad models: each goes where it should, with a reason; serving goes on."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, TopicPartition

from harness.reference import assert_pmml_equal, pmml4s_outputs
from scorestream import naming
from scorestream.tools.demo import feed, models

pytestmark = [pytest.mark.spark, pytest.mark.broker]


@pytest.fixture(scope="module")
def tree_pmml() -> bytes:
    return models.tree_pmml()


def _headers(msg) -> dict[str, str]:
    return {k: v.decode() for k, v in (msg.headers() or [])}


def test_bad_records_and_models_are_dead_lettered_or_rejected_with_reasons(serving, tree_pmml):
    s = serving()
    s.publish(models.descriptor("tree", "1", "pmml", tree_pmml))
    job = s.start().wait_ready()

    rows = feed.wine_rows()[:40]
    good = feed.wine_records(rows)
    base = json.loads(feed.wine_json(rows[0]))
    wrong_type = dict(base, alcohol="high")
    missing = {k: v for k, v in base.items() if k != "alcohol"}
    bad = {
        b"malformed": (b'{"dataType": "wine", "alcohol": ', "decode", "JsonEOFException"),
        b"array": (b"[1, 2, 3]", "decode", "not a JSON object"),
        b"wrong-type": (json.dumps(wrong_type).encode(), "validate", "field 'alcohol' is not a number"),
        b"missing-field": (json.dumps(missing).encode(), "validate", "missing field 'alcohol'"),
        b"unknown-type": (feed.wine_json(rows[0], "beer"), "route", "dataType 'beer' is not served by this job"),
        b"no-type": (json.dumps({k: v for k, v in base.items() if k != "dataType"}).encode(), "decode",
                     "field 'dataType' is missing"),
        b"not-utf8": (b"\xff\xfe\x00garbage", "decode", ""),
    }
    n = s.produce(good[:20] + [(k, v) for k, (v, _, _) in bad.items()] + good[20:])
    job.wait_records(n)

    # A corrupt model message and a model whose inputs are not the records' fields: both rejected,
    # the serving model stays.
    feed.publish_raw(s.broker.bootstrap, s.topics["models"], s.key("wine"), b"\x08\x96\x01 this is not a model")
    colour = tree_pmml.replace(b'"alcohol"', b'"colour"')
    s.publish(models.descriptor("tree-colour", "2", "pmml", colour))
    serving_now = None
    for _ in range(60):
        state = job.get("/models")
        if len(state["rejected"]) >= 2:
            serving_now = state
            break
        import time

        time.sleep(0.5)
    assert serving_now is not None, job.get("/models")
    reasons = " | ".join(r["reason"] for r in serving_now["rejected"])
    assert "not a JSON descriptor nor a protobuf ModelDescriptor" in reasons or "invalid model descriptor" in reasons
    assert "model inputs not among the record fields: colour" in reasons
    assert serving_now["serving"]["wine"]["name"] == "tree" and serving_now["serving"]["wine"]["version"] == "1"

    # Records after the rejections are still scored by the good model.
    more = feed.wine_records(rows[:10], start=100)
    n += s.produce(more)
    stats = job.wait_records(n)

    out = s.outputs(expect=len(good) + len(more))
    assert len(out) == len(good) + len(more)
    assert {(o["model"]["name"], o["model"]["version"]) for o in out} == {("tree", "1")}

    dead = s.read("dlq", expect=len(bad))
    assert len(dead) == len(bad)
    for m in dead:
        value, stage, reason = bad[m.key()]
        h = _headers(m)
        assert m.value() == value, "a dead letter is the record unchanged"
        assert h["scorestream.stage"] == stage, (m.key(), h)
        assert reason in h["scorestream.reason"], (m.key(), h)
        assert h["scorestream.source.topic"] == s.topics["data"]
        assert int(h["scorestream.source.offset"]) >= 0

    # Serving statistics and metrics.
    info = stats["dataTypes"]["wine"]
    assert info["name"] == "tree" and info["invocations"] == len(good) + len(more)
    assert info["duration"]["minMs"] > 0 and info["duration"]["maxMs"] >= info["duration"]["minMs"]
    assert stats["totals"]["recordsDeadLettered"] == len(bad)
    metrics = job.get("/metrics")
    # Labelled with the resource the job serves (its JobConfig's namespace and name).
    assert f'scorestream_records_total{{name="wine",namespace="test",outcome="dead_lettered"}} {float(len(bad))}' \
        in metrics
    assert 'scorestream_model_info{data_type="wine",model="tree",name="wine",namespace="test",version="1"} 1.0' \
        in metrics
    assert "scorestream_scoring_latency_seconds_bucket" in metrics
    assert job.get("/healthz") == {"status": "ok"}

    assert job.stop() == 0
    # After a graceful stop the data group has committed every offset it read.
    c = Consumer({"bootstrap.servers": s.broker.bootstrap, "group.id": naming.data_group("test", "wine")})
    committed = c.committed([TopicPartition(s.topics["data"], p) for p in range(s.partitions)], timeout=10)
    c.close()
    assert sum(tp.offset for tp in committed) == n


def test_protobuf_records_of_the_report(serving, tree_pmml):
    s = serving(input={"format": "protobuf", "fields": None})
    s.publish(models.descriptor("tree", "1", "pmml", tree_pmml))
    job = s.start().wait_ready()
    rows = feed.wine_rows()[:50]
    records = [(f"p-{i}".encode(), feed.wine_proto(r, ts=i)) for i, r in enumerate(rows)]
    truncated = feed.wine_proto(rows[0])[:-3]
    n = s.produce(records + [(b"truncated", truncated), (b"beer", feed.wine_proto(rows[0], "beer"))])
    job.wait_records(n)
    out = sorted(s.outputs(expect=len(rows)), key=lambda o: int(o["key"].split("-")[1]))
    # PMML4S's own answers for the rows: protobuf decoding loses nothing.
    assert_pmml_equal(out, pmml4s_outputs(tree_pmml, rows), "protobuf")
    dead = {m.key(): _headers(m) for m in s.read("dlq", expect=2)}
    assert dead[b"truncated"]["scorestream.stage"] == "decode"
    assert dead[b"beer"]["scorestream.stage"] == "route"
    assert job.stop() == 0
