"""spark.trigger realTime: the job's promises in Spark's real-time mode (runtime/realtime.py).

A hot swap lands at a batch's first offset, to a TensorFlow model too (scored in the JVM, each
record as it comes); the statistics match what was written, per model; SIGTERM mid-stream, then a restart, writes every record exactly
once; kill -9 redoes at most the batch in flight; the warm-up writes and counts nothing, and a
stop ends it; a partition without a task slot stops the job. On Spark's standalone cluster (the
scorer's table crossing to executors of their own, a swap, a refused live rescale):
test_exactly_once_real_time.py. A resource's ``trigger: realTime`` rendered into the job's
configuration: test_desired.py; the operator's rollouts, which confirm a swap by the job's /models
in either trigger mode: test_rollout.py.
"""

from __future__ import annotations

import re
import time

import pytest

from scorestream.config import WARM_UP_BATCHES
from scorestream.tools.demo import feed, models

from harness.fixtures import TEST_WARM_UP_BATCHES
from harness.streaming import Stream, takeovers, wait_until
from test_delivery import _group_gone, all_positions, expected_positions

pytestmark = [pytest.mark.spark, pytest.mark.broker]

REAL_TIME = {"spark": {"trigger": "realTime", "triggerInterval": "5s"}}


def test_swap_statistics_and_sigterm_in_real_time_mode(serving, demo_models):
    s = serving(**REAL_TIME)
    s.publish(demo_models["tree"])
    job = s.start().wait_ready()
    stream = Stream(s, total=10**9, chunk=50, pause=0.05)  # ~1,000 records/s, through every step
    stream.start()
    wait_until(lambda: job.get("/stats")["totals"]["recordsIn"] >= 2000, what="2000 records under the tree")
    s.publish(demo_models["linear"])
    wait_until(lambda: job.get("/models")["serving"]["wine"]["name"] == "linear", what="linear serving")
    wait_until(lambda: job.get("/stats")["dataTypes"]["wine"]["invocations"] >= 2000, what="2000 under linear")
    s.publish(demo_models["keras"])
    wait_until(lambda: job.get("/models")["serving"]["wine"]["name"] == "keras", what="the TensorFlow model serving")
    wait_until(lambda: job.get("/stats")["dataTypes"]["wine"]["invocations"] >= 2000, what="2000 under keras")
    stats = job.get("/stats")
    assert stats["totals"]["liveScaling"] is False
    tree_counted = {p["name"]: p for p in stats["dataTypes"]["wine"]["previous"]}["tree"]["invocations"]

    # SIGTERM mid-stream: the query stops in a batch that writes nothing; the restart reads it again.
    stopped_at = time.monotonic()
    assert job.stop() == 0
    took = time.monotonic() - stopped_at
    again = s.start().wait_ready()
    wait_until(lambda: again.get("/stats")["totals"]["recordsIn"] >= 1000, what="records after the restart")
    sent = stream.stop()
    assert stream.error is None
    seen = all_positions(s, sent, timeout=120)
    assert again.stop() == 0
    assert set(seen) == expected_positions(s, sent), "every record, none lost"
    assert sum(c - 1 for c in seen.values()) == 0, "a graceful stop leaves nothing to redo"

    out = s.outputs(expect=sent)
    assert [name for name, _ in takeovers(out)] == ["tree", "linear", "keras"]  # fails if a batch had two versions
    assert tree_counted == sum(o["model"]["name"] == "tree" for o in out), "statistics per model, exact"
    print(f"real-time: {sent} records over batches {min(o['batchId'] for o in out)}-{max(o['batchId'] for o in out)}, "
          f"SIGTERM to exit {took:.1f}s (batches of 5s)")


def test_a_stop_ends_the_warm_up_writing_nothing_and_kill_9_redoes_at_most_a_batch(serving):
    """spark.warmUpBatches (runtime/warm_up.py), the default's: before its query reads, the job
    runs its own plan over generated records, not ready; a SIGTERM then ends it there, nothing
    written. The restart warms up, then serves every record, the generated ones counting for
    nothing. Then kill -9 mid-stream: the restart redoes at most the batch in flight."""
    s = serving(spark={**REAL_TIME["spark"], "warmUpBatches": WARM_UP_BATCHES})
    s.publish(models.descriptor("tree", "1", "pmml", models.tree_pmml()))
    records = feed.wine_records(feed.wine_rows()[:3000])
    records[10] = (b"bad", b"{broken")
    n = s.produce(records)
    job = s.start()
    wait_until(lambda: job.readiness().get("reason", "").startswith("warming up"), timeout=180, what="the warm-up",
               every=0.1)
    asked = time.monotonic()
    assert job.stop() == 0
    took = time.monotonic() - asked
    ran = re.search(r"warm-up: (\d+) of (\d+) batches", job.log_path.read_text())
    assert ran and int(ran[1]) < int(ran[2]) == WARM_UP_BATCHES, "the stop ended the warm-up"
    assert s.read("out") == [] and s.read("dlq") == []

    job = s.start().wait_ready()
    stats = job.wait_records(n)
    ran = re.search(r"warm-up: (\d+) of \d+ batches", job.log_path.read_text())
    assert ran and int(ran[1]) >= WARM_UP_BATCHES  # the query is stopped once it has run them all
    totals = stats["totals"]
    assert (totals["recordsIn"], totals["recordsOut"], totals["recordsDeadLettered"]) == (n, n - 1, 1)
    assert stats["dataTypes"]["wine"]["invocations"] == n - 1
    print(f"real-time warm-up: SIGTERM during it to exit {took:.1f}s")

    stream = Stream(s, total=10**9, chunk=50, pause=0.05, start=n)
    stream.start()
    wait_until(lambda: job.get("/stats")["totals"]["batches"] >= totals["batches"] + 2, what="two batches of the stream")
    pgid = job.proc.pid
    job.kill()
    assert _group_gone(pgid), "a process of the killed job survived"
    again = s.start(spark={"warmUpBatches": TEST_WARM_UP_BATCHES}).wait_ready()
    wait_until(lambda: again.get("/stats")["totals"]["recordsIn"] >= 1000, what="records after the restart")
    sent = n + stream.stop()
    seen = all_positions(s, sent, timeout=120)
    assert again.stop() == 0
    missing = expected_positions(s, sent) - set(seen)
    assert not missing, f"{len(missing)} input offsets missing, e.g. {sorted(missing)[:5]}"
    duplicates = sum(c - 1 for c in seen.values())
    per_batch: dict[int, set] = {}
    for o in s.outputs(expect=sent - 1):
        per_batch.setdefault(o["batchId"], set()).add((o["source"]["partition"], o["source"]["offset"]))
    largest = max(len(v) for v in per_batch.values())
    assert duplicates <= largest, (duplicates, {b: len(v) for b, v in per_batch.items()})
    print(f"real-time kill -9: {sent} records, {duplicates} duplicates (the largest batch: {largest} records)")


def test_a_real_time_job_with_fewer_task_slots_than_partitions_refuses_to_start(serving):
    # Spark would run it and never read the partitions left over (seen: local[1], 2 partitions:
    # half the records read, the other half's lag growing, the job ready all along).
    s = serving(spark={"master": "local[1]", "trigger": "realTime", "triggerInterval": "5s"})
    s.publish(models.descriptor("tree", "1", "pmml", models.tree_pmml()))
    job = s.start()
    assert job.proc.wait(180) == 1
    assert "needs a task slot per data-topic partition: 2 partitions, 1 slots" in job.tail()
