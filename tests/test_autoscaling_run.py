"""The autoscaler on a real job: the operator (against the emulated API) scales a serving job on
a local Spark standalone cluster on its lag — up when a burst arrives, down after the cooldown —
and not a record is lost."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from scorestream.config import JobConfig
from scorestream.demo import feed, models
from scorestream.demo.broker import free_port
from scorestream.demo.process import JobProcess
from scorestream.operator.settings import OperatorConfig

from operator_harness import MS, Operator, api, apply, driver_pod, obj, resource, until  # noqa: F401
from standalone import cluster, standalone_conf  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def autoscaling(api):
    return ((obj(api, MS, "wine") or {}).get("status") or {}).get("autoscaling") or {}


@pytest.mark.timeout(600)
async def test_a_burst_scales_the_job_up_and_the_quiet_after_it_down(api, broker, serving, cluster, tmp_path, capsys):
    s = serving(partitions=2)
    s.publish(models.descriptor("tree", "1", "pmml", models.tree_pmml(feed.wine_rows())))
    topics = {"dataTopic": s.topics["data"], "outputTopic": s.topics["out"], "deadLetterTopic": s.topics["dlq"],
              "modelsTopic": s.topics["models"]}
    port = free_port()
    op = Operator(api, OperatorConfig(allNamespaces=True, observeInterval=1, endpointTemplate=f"http://127.0.0.1:{port}"))
    await op.start()
    job = None
    try:
        body = resource(topics, broker, model=None, replicas=1, autoscaling={
            "minReplicas": 1, "maxReplicas": 2, "targetLagSeconds": 2, "stabilizationWindow": "5s",
            "scaleDownCooldown": "15s", "maxStep": 1})
        body["spec"].pop("model")
        body["spec"]["input"] = {"format": "json"}
        body["spec"]["spark"]["triggerInterval"] = "500ms"
        await apply(api, body)
        await until(lambda: obj(api, "v1/configmaps", "wine-job"), what="the job's ConfigMap")
        raw = json.loads(obj(api, "v1/configmaps", "wine-job")["data"]["job.json"])
        raw["spark"].update(master=cluster.master, conf=standalone_conf(1))
        raw["kafka"]["maxOffsetsPerTrigger"] = 4000  # the burst arrives over several batches
        raw.update(http={"host": "127.0.0.1", "port": port}, checkpointLocation=str(tmp_path / "checkpoint"),
                   workDir=str(tmp_path / "work"))
        job = JobProcess(JobConfig.model_validate(raw), tmp_path, "job.log").start()
        await asyncio.to_thread(job.wait_ready, 240)
        driver_pod(api)
        await until(lambda: job.get("/executors")["running"] == 1, timeout=60, what="one executor")
        rows = feed.wine_rows()
        n = s.produce(feed.wine_records(rows[:500]))  # the processing rate gets measured
        await asyncio.to_thread(job.wait_records, n)

        burst = 40_000
        t0 = time.monotonic()
        # In a thread: the emulated API the operator talks to runs on this event loop.
        n += await asyncio.to_thread(s.produce, feed.wine_records([rows[i % len(rows)] for i in range(burst)], start=n))
        await until(lambda: job.get("/executors")["running"] == 2, timeout=120, what="a second executor")
        scaled_up = time.monotonic() - t0
        reason = autoscaling(api).get("reason", "")
        await asyncio.to_thread(job.wait_records, n, 240)
        drained = time.monotonic() - t0
        await until(lambda: job.get("/executors")["running"] == 1, timeout=120, what="back to one executor")
        scaled_down = time.monotonic() - t0
        st = obj(api, MS, "wine")["status"]
        await until(lambda: autoscaling(api).get("replicas") == 1, timeout=30, what="status.autoscaling.replicas 1")
        st = obj(api, MS, "wine")["status"]
        assert st["scaling"]["mode"] == "Live"
        assert any(o.raw.get("reason") == "Autoscaled" for k, o in list(api.objects.items()) if k[0].plural == "events")

        out = s.outputs(expect=n)
        keys = [o["key"] for o in out]
        assert len(set(keys)) == n, f"{n - len(set(keys))} records lost"
        assert len(keys) == n, f"{len(keys) - n} records written twice"
        with capsys.disabled():
            print(f"\nautoscaling run (standalone, burst of {burst}, targetLagSeconds 2): second executor running "
                  f"{scaled_up:.1f} s after the burst, lag drained after {drained:.1f} s, back to one executor "
                  f"after {scaled_down:.1f} s; none lost or repeated\n  decision: {reason}")
        assert job.stop() == 0
    finally:
        if job is not None:
            job.kill()
        await op.stop()
