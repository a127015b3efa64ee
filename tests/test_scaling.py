"""Live executor changes on a real Spark standalone cluster (loopback, two cores): the streaming
query keeps running, and no record is lost or written twice."""

from __future__ import annotations

import time

import pytest

from scorestream.tools.demo import feed, models

from harness.standalone import standalone_conf
from harness.streaming import Stream, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def standalone_job(s, cluster, executors=1):
    return s.start(spark={"master": cluster.master, "conf": standalone_conf(executors)})


@pytest.mark.timeout(600)
def test_live_scale_one_two_one_keeps_the_query_and_every_record(serving, cluster):
    s = serving(partitions=2)
    s.publish(models.descriptor("tree", "1", "pmml", models.tree_pmml(feed.wine_rows())))
    job = standalone_job(s, cluster).wait_ready(timeout=240)
    # The worker offers both cores at once; the job keeps the total it was asked for.
    wait_until(lambda: job.get("/executors")["running"] == 1, timeout=60, what="one executor")
    s.produce(feed.wine_records(feed.wine_rows()[:200], start=10**6))  # warm-up, not counted
    job.wait_records(200)
    query = job.get("/stats")["totals"]["queryId"]

    stream = Stream(s, total=10**9, chunk=100, pause=0.1)
    stream.start()
    time.sleep(3)
    t0 = time.monotonic()
    code, answer = job.post("/executors", {"total": 2})
    assert code == 202 and answer["live"], answer
    wait_until(lambda: job.get("/executors")["running"] == 2, timeout=60, what="a second executor")
    registered = time.monotonic() - t0
    wait_until(lambda: job.get("/stats")["totals"]["executorsUsedLastBatch"] == 2, timeout=60,
               what="a batch written by both executors")
    processing = time.monotonic() - t0
    time.sleep(3)
    t1 = time.monotonic()
    code, answer = job.post("/executors", {"total": 1})
    assert code == 202, answer
    wait_until(lambda: job.get("/executors")["running"] == 1, timeout=60, what="back to one executor")
    wait_until(lambda: job.get("/stats")["totals"]["executorsUsedLastBatch"] == 1, timeout=60,
               what="batches on one executor again")
    removed = time.monotonic() - t1
    time.sleep(3)
    sent = stream.stop()
    assert stream.error is None
    stats = job.wait_records(200 + sent)
    assert stats["totals"]["queryId"] == query, "the streaming query was not restarted"

    out = [o for o in s.outputs(expect=200 + sent) if int(o["key"].split("-")[1]) < 10**6]
    keys = [o["key"] for o in out]
    assert len(set(keys)) == sent, f"{sent - len(set(keys))} records lost"
    assert len(keys) == sent, f"{len(keys) - sent} records written twice"
    assert not s.read("dlq", idle=1.0)
    print(f"\nlive scale 1->2->1 (standalone, {sent} records, none lost or repeated): request -> executor "
          f"registered {registered:.1f} s, -> a batch on both executors {processing:.1f} s; "
          f"batches on one executor again {removed:.1f} s after asking for 1")
    assert job.stop() == 0
