"""Nothing is lost: kill -9 mid-stream and restart from the checkpoint; SIGTERM ends after a batch;
a restart restores the latest good model before it scores."""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from scorestream.tools.demo import feed, models

from harness.streaming import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def source_positions(s) -> Counter:
    """(partition, offset) of every input that reached the output or the dead-letter topic."""
    import json

    seen: Counter = Counter()
    for m in s.read("out"):
        src = json.loads(m.value())["source"]
        seen[(src["partition"], src["offset"])] += 1
    for m in s.read("dlq", idle=1.0):
        h = {k: v.decode() for k, v in m.headers() or []}
        seen[(int(h["scorestream.source.partition"]), int(h["scorestream.source.offset"]))] += 1
    return seen


def all_positions(s, n: int, timeout: float) -> Counter:
    """Wait until every one of the n inputs is accounted for, or the timeout; return what was seen."""
    deadline = time.monotonic() + timeout
    seen = source_positions(s)
    while len(seen) < n and time.monotonic() < deadline:
        time.sleep(1)
        seen = source_positions(s)
    return seen


def expected_positions(s, n: int) -> set:
    # The test producer sends record i to partition i % partitions, in order.
    return {(i % s.partitions, i // s.partitions) for i in range(n)}


def _group_gone(pgid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)  # the killed processes are reaped by init shortly after
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def test_kill_9_mid_stream_then_restart_loses_nothing(serving):
    s = serving(kafka={"maxOffsetsPerTrigger": 500})
    s.publish(models.descriptor("tree", "1", "pmml", models.tree_pmml()))
    rows = feed.wine_rows()
    records = feed.wine_records([rows[i % len(rows)] for i in range(8000)])
    records[1234] = (b"bad", b"{broken")  # dead letters count as delivered too
    n = s.produce(records)
    job = s.start().wait_ready()
    # Kill while batches are flowing: somewhere past the first few batches, before the end.
    deadline = time.monotonic() + 180
    while job.get("/stats")["totals"]["recordsIn"] < 1500 and time.monotonic() < deadline:
        time.sleep(0.1)
    pgid = job.proc.pid
    job.kill()
    assert _group_gone(pgid), "a process of the killed job survived (JVM or Python worker)"

    again = s.start().wait_ready()
    seen = all_positions(s, n, timeout=240)
    assert again.stop() == 0
    missing = expected_positions(s, n) - set(seen)
    assert not missing, f"{len(missing)} input offsets missing from output and DLQ, e.g. {sorted(missing)[:5]}"
    duplicates = sum(c - 1 for c in seen.values())
    # At most the batch in flight at the kill is redone: maxOffsetsPerTrigger records.
    assert duplicates <= 500, duplicates
    print(f"kill -9: {n} records, {duplicates} duplicates (bound 500)")


def test_sigterm_finishes_the_batch_and_a_restart_restores_the_latest_good_model_first(serving, demo_models):
    """SIGTERM ends after the batch in flight and commits it: the restart redoes nothing. Both
    starts restore the newest model the topic holds that loads (a corrupt newest message is
    skipped) before the first record is scored."""
    s = serving(kafka={"maxOffsetsPerTrigger": 200})
    s.publish(demo_models["tree"])
    s.publish(demo_models["linear"])
    # The newest message for the dataType is corrupt: the restore must fall back to `linear`.
    feed.publish_raw(s.broker.bootstrap, s.topics["models"], s.key("wine"), b"{not a descriptor")
    job = s.start().wait_ready()
    served = job.get("/models")
    assert served["serving"]["wine"]["name"] == "linear"
    assert any("not valid JSON" in r["reason"] for r in served["rejected"])
    rows = feed.wine_rows()
    n = s.produce(feed.wine_records(rows))
    # Stopped mid-stream: past the first batch, likely with one in flight.
    wait_until(lambda: job.get("/stats")["totals"]["recordsIn"] >= 200, timeout=180, what="a first batch")
    assert job.stop() == 0
    first_run = s.outputs()
    assert 0 < len(first_run) < n

    s.publish(demo_models["keras"])
    again = s.start().wait_ready()  # same checkpoint: resumes after what the first run committed
    assert again.get("/models")["serving"]["wine"]["name"] == "keras"
    m = s.produce(feed.wine_records(rows[:200], start=n))
    seen = all_positions(s, n + m, timeout=180)
    assert again.stop() == 0
    assert set(seen) == expected_positions(s, n + m)
    assert sum(c - 1 for c in seen.values()) == 0, "a graceful stop leaves nothing to redo"
    out = s.outputs(expect=n + m)
    assert {o["model"]["name"] for o in first_run} == {"linear"}
    scored_first = {o["key"] for o in first_run}
    later = [o for o in out if o["key"] not in scored_first]
    assert later and {o["model"]["name"] for o in later} == {"keras"}, "restored before the first record was scored"
    log = again.log_path.read_text(errors="replace")
    assert "INFO scorestream.runtime: batch" in log
    assert "[Stage " not in log, "Spark's console progress bar is drawn into the job's log"
    assert "replaced a previously registered function" not in log, "a warning every batch"
