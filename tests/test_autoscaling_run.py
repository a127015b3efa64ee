"""The autoscaler on a real job: the operator (against the tests' real API server) scales a serving job on
a local Spark standalone cluster on its lag — up when a burst arrives, down after the cooldown —
live (the streaming query goes on; a batch is written by both executors) and not a record is lost
or written twice."""

from __future__ import annotations

import asyncio
import time

import pytest

from scorestream.tools.demo import feed, models

from harness.operator import MS, Operated, apply, events, obj, resource, until
from harness.standalone import standalone_conf
from harness.streaming import Stream

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def autoscaling(api):
    return ((obj(api, MS, "wine") or {}).get("status") or {}).get("autoscaling") or {}


def held(api, job) -> str:
    """What the operator last decided and what the job says it runs: where a wait timed out, which
    of the two held it."""
    return (f"status.autoscaling {autoscaling(api)}, the job's /executors {job.get('/executors')}, "
            f"totals {job.get('/stats')['totals']}")


@pytest.mark.timeout(600)
async def test_a_burst_scales_the_job_up_and_the_quiet_after_it_down(api, broker, serving, cluster, tmp_path):
    s = serving(partitions=2)
    # Addressed to the resource the operator runs (its namespace and name), not the fixture's job.
    feed.publish_model(broker.bootstrap, s.topics["models"],
                       models.descriptor("tree", "1", "pmml", models.tree_pmml(feed.wine_rows())), to=(api.ns, "wine"))
    async with Operated(api, observeInterval=1) as run:
        # The cooldown outlasts the second executor's way to its first task (the batch in flight
        # ends, the next is planned on both: 10-15 s here); with a shorter one, a burst drained
        # meanwhile let the job be scaled down before any batch ran on both.
        body = resource(s.resource_topics, broker, model=None, replicas=1, autoscaling={
            "minReplicas": 1, "maxReplicas": 2, "targetLagSeconds": 2, "stabilizationWindow": "5s",
            "scaleDownCooldown": "30s", "maxStep": 1})
        body["spec"].pop("model")
        body["spec"]["input"] = {"format": "json"}
        body["spec"]["spark"]["triggerInterval"] = "500ms"
        await apply(api, body)
        # The burst arrives over several batches.
        job = await run.start_job(tmp_path, cluster.master, standalone_conf(1), kafka={"maxOffsetsPerTrigger": 4000})
        await until(lambda: job.get("/executors")["running"] == 1, timeout=60, what="one executor")
        rows = feed.wine_rows()
        n = s.produce(feed.wine_records(rows[:500]))  # the processing rate gets measured
        await asyncio.to_thread(job.wait_records, n)
        query = job.get("/stats")["totals"]["queryId"]

        burst = 40_000
        t0 = time.monotonic()
        n += await asyncio.to_thread(s.produce, feed.wine_records([rows[i % len(rows)] for i in range(burst)], start=n))
        await until(lambda: job.get("/executors")["running"] == 2, timeout=120, what="a second executor")
        scaled_up = time.monotonic() - t0
        reason = autoscaling(api).get("reason", "")
        # Live: a batch is written by both executors. Records keep coming until one is (on a fast
        # machine the burst may be drained before the new executor's first task).
        stream = Stream(s, total=10**9, chunk=100, pause=0.1, start=n)
        stream.start()
        try:
            await until(lambda: job.get("/stats")["totals"]["executorsUsedLastBatch"] == 2, timeout=120,
                        what="a batch written by both executors")
        except AssertionError as e:
            raise AssertionError(f"{e}: {held(api, job)}") from None
        finally:
            n += stream.stop()
        assert stream.error is None
        both = time.monotonic() - t0
        await asyncio.to_thread(job.wait_records, n, 240)
        drained = time.monotonic() - t0
        try:
            await until(lambda: job.get("/executors")["running"] == 1, timeout=120, what="back to one executor")
        except AssertionError as e:
            raise AssertionError(f"{e}: {held(api, job)}") from None
        scaled_down = time.monotonic() - t0
        await until(lambda: autoscaling(api).get("replicas") == 1, timeout=30, what="status.autoscaling.replicas 1")
        assert job.get("/stats")["totals"]["queryId"] == query, "the streaming query was not restarted"
        st = obj(api, MS, "wine")["status"]
        assert st["scaling"]["mode"] == "Live"
        assert events(api, "Autoscaled")

        out = s.outputs(expect=n)
        keys = [o["key"] for o in out]
        assert len(set(keys)) == n, f"{n - len(set(keys))} records lost"
        assert len(keys) == n, f"{len(keys) - n} records written twice"
        print(f"\nautoscaling run (standalone, burst of {burst}, targetLagSeconds 2): second executor running "
              f"{scaled_up:.1f} s after the burst, a batch written by both after {both:.1f} s, lag drained after "
              f"{drained:.1f} s, back to one executor after {scaled_down:.1f} s; query id unchanged; none lost or "
              f"repeated\n  decision: {reason}")
        assert job.stop() == 0
