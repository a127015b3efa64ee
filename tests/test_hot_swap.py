"""Models replace each other mid-stream without a restart, one version per batch (a restart's restore:
test_delivery.py)."""

from __future__ import annotations

import pytest

from scorestream.tools.demo import feed

from harness.streaming import Stream, takeovers, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def test_swap_mid_stream_never_mixes_versions_in_a_batch(serving, demo_models):
    s = serving()
    s.publish(demo_models["tree"])
    job = s.start().wait_ready()
    # Warm up first: the first batch is much slower than the rest (the JIT, the first plan).
    s.produce(feed.wine_records(feed.wine_rows()[:100], start=100000))
    job.wait_records(100)
    stream = Stream(s, total=10**9, pause=0.25)  # ~400 records/s until every model has scored
    stream.start()
    wait_until(lambda: job.get("/stats")["totals"]["recordsIn"] >= 1600, what="1500 records under the tree")
    s.publish(demo_models["linear"])
    wait_until(lambda: job.get("/models")["serving"]["wine"]["name"] == "linear", what="linear serving")
    wait_until(lambda: job.get("/stats")["totals"]["recordsIn"] >= 3600, what="3500 records")
    s.publish(demo_models["keras"])
    wait_until(lambda: job.get("/models")["serving"]["wine"]["name"] == "keras", what="keras serving")
    # Served is not yet scored: the next batch's tasks load it in their JVM.
    try:
        wait_until(lambda: job.get("/stats")["dataTypes"]["wine"]["invocations"] > 0, timeout=180, what="keras scoring")
    except TimeoutError:
        raise AssertionError(f"keras serves but scored nothing in 180 s; stream sent {stream.sent}, "
                             f"error {stream.error!r}, alive {stream.is_alive()}; job log:\n{job.tail(60)}") from None
    # Back from TensorFlow to PMML, both in the JVM scorer.
    wait_until(lambda: job.get("/stats")["dataTypes"]["wine"]["invocations"] >= 1000, what="1000 records under keras")
    s.publish(demo_models["shallow"])
    wait_until(lambda: job.get("/models")["serving"]["wine"]["name"] == "shallow", what="shallow serving")
    wait_until(lambda: job.get("/stats")["dataTypes"]["wine"]["invocations"] > 0, what="shallow scoring")
    sent = stream.stop()
    assert stream.error is None
    stats = job.wait_records(sent + 100)

    out = [o for o in s.outputs(expect=sent + 100) if int(o["key"].split("-")[1]) < 100000]
    assert len(out) == sent and len({o["key"] for o in out}) == sent, "every record scored exactly once"
    # Each model takes over at a batch boundary and never comes back.
    assert [name for name, _ in takeovers(out)] == ["tree", "linear", "keras", "shallow"]
    assert stats["totals"]["modelSwitches"] == 3
    info = stats["dataTypes"]["wine"]
    assert info["name"] == "shallow" and info["invocations"] > 0
    assert {p["name"] for p in info["previous"]} == {"tree", "linear", "keras"}
    assert job.stop() == 0
