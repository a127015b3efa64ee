"""A real kopf operator against the emulated Kubernetes API (kmock + kmock_compat), the real broker,
and a stand-in for the job's HTTP endpoint (the real job is exercised by the runtime tests)."""

from __future__ import annotations

import asyncio
import logging
import statistics
import time

import pytest
import pytest_asyncio
from aiohttp import web

from scorestream.demo.broker import create_topics
from scorestream.operator import spec as s
from scorestream.operator.settings import OperatorConfig

from admission import admit
from operator_harness import (MS, NS, Operator, api, apply, condition, driver_pod, obj, resource,  # noqa: F401 - fixtures
                              topics, until)

pytestmark = pytest.mark.broker


class FakeJob:
    """The job's /readyz and /stats, as the runtime serves them, with state the test sets."""

    def __init__(self):
        self.ready, self.executors, self.lag = True, 2, 0
        self.serving = {"wine": {"name": "wine-tree", "version": "1", "since": 1.7e9}}
        self.rejected = []
        self.target, self.live, self.asked = 2, True, []

    async def readyz(self, _):
        return web.json_response({"ready": self.ready, "reason": "" if self.ready else "restoring models"},
                                 status=200 if self.ready else 503)

    async def models(self, _):
        return web.json_response({"serving": self.serving, "rejected": self.rejected})

    async def stats(self, _):
        return web.json_response({"dataTypes": self.serving,
                                  "totals": {"lag": self.lag, "executors": self.executors,
                                             "executorTarget": self.target, "liveScaling": self.live}})

    async def scale(self, request):
        total = (await request.json())["total"]
        self.asked.append(total)
        self.target = total
        return web.json_response({"live": True, "running": self.executors, "target": total, "accepted": True},
                                 status=202)


@pytest_asyncio.fixture
async def job():
    fake = FakeJob()
    app = web.Application()
    app.router.add_get("/readyz", fake.readyz)
    app.router.add_get("/stats", fake.stats)
    app.router.add_get("/models", fake.models)
    app.router.add_post("/executors", fake.scale)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    yield fake
    await runner.cleanup()


@pytest_asyncio.fixture
async def operator(api, job, broker):
    op = Operator(api, OperatorConfig(allNamespaces=True, observeInterval=0.5, endpointTemplate=job.url))
    await op.start()
    yield op
    if op.running:
        await op.stop()


CHILDREN = [("v1/configmaps", "wine-job"), ("v1/serviceaccounts", "wine-driver"), ("v1/services", "wine-driver"),
            ("rbac.authorization.k8s.io/v1/roles", "wine-driver"),
            ("rbac.authorization.k8s.io/v1/rolebindings", "wine-driver"), ("apps/v1/statefulsets", "wine-driver")]


async def test_create_makes_children_topics_and_status(api, operator, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 3})
    driver_pod(api)
    await apply(api, resource(topics, broker))
    for key, name in CHILDREN:
        await until(lambda: obj(api, key, name), what=f"{key} {name}")
    await until(lambda: condition(api, "wine", "Ready").get("status") == "True", what="Ready")
    status = obj(api, MS, "wine")["status"]
    assert status["phase"] == "Running" and status["observedGeneration"] == 1
    assert condition(api, "wine", "ModelReady")["status"] == "True"
    assert status["model"]["current"] == {"name": "wine-tree", "version": "1", "since": "2023-11-14T22:13:20Z"}
    assert status["consumerGroups"]["data"] == "scorestream.ml.wine"
    assert status["replicas"] == 2 and status["lag"] == 0
    from confluent_kafka.admin import AdminClient
    meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5).topics
    assert len(meta[topics["outputTopic"]].partitions) == 3 and topics["deadLetterTopic"] in meta


async def test_missing_data_topic_is_reported_not_guessed(api, operator, broker, topics):
    await apply(api, resource(topics, broker))
    cond = await until(lambda: condition(api, "wine", "Ready").get("reason") == "DataTopicMissing"
                       and condition(api, "wine", "Ready"), what="DataTopicMissing")
    assert topics["dataTopic"] in cond["message"]
    sts = await until(lambda: obj(api, "apps/v1/statefulsets", "wine-driver"))
    assert sts["spec"]["replicas"] == 0
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})  # retried: the driver starts
    await until(lambda: obj(api, "apps/v1/statefulsets", "wine-driver")["spec"]["replicas"] == 1, what="driver")


async def test_replicas_change_live_without_restarting_the_driver(api, operator, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 4})
    driver_pod(api)
    await apply(api, resource(topics, broker))
    await until(lambda: (obj(api, MS, "wine").get("status") or {}).get("replicas") == 2, what="replicas 2")
    before = obj(api, "apps/v1/statefulsets", "wine-driver")["spec"]["template"]["metadata"]["annotations"]
    await apply(api, resource(topics, broker, replicas=3))
    await until(lambda: job.asked == [3], what="the job asked for 3 executors")
    # The ConfigMap has the new total (for the next start); the driver keeps running.
    assert '"spark.executor.instances": "3"' in obj(api, "v1/configmaps", "wine-job")["data"]["job.json"]
    assert obj(api, "apps/v1/statefulsets", "wine-driver")["spec"]["template"]["metadata"]["annotations"] == before
    job.executors = 3
    await until(lambda: obj(api, MS, "wine")["status"]["replicas"] == 3, what="status.replicas 3")
    scaling = obj(api, MS, "wine")["status"]["scaling"]
    assert scaling["mode"] == "Live" and scaling["target"] == 3 and not scaling["capped"]


async def test_replicas_beyond_the_partitions_are_capped_and_said_so(api, operator, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 2})
    job.target = 1
    driver_pod(api)
    await apply(api, resource(topics, broker, replicas=5))
    await until(lambda: job.asked and job.asked[-1] == 2, what="the job asked for 2 executors")
    await until(lambda: (obj(api, MS, "wine").get("status") or {}).get("scaling", {}).get("capped"), what="capped")
    assert "2 partitions" in obj(api, MS, "wine")["status"]["scaling"]["message"]
    await until(lambda: next((o.raw for k, o in list(api.objects.items()) if k[0].plural == "events"
                              and o.raw.get("reason") == "ReplicasCapped"), None), what="ReplicasCapped event")
    assert 5 not in job.asked


async def test_where_executors_cannot_change_live_the_driver_restarts(api, operator, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 2})
    job.live = False
    driver_pod(api)
    await apply(api, resource(topics, broker))
    await until(lambda: condition(api, "wine", "Ready").get("status") == "True", what="Ready")
    await apply(api, resource(topics, broker, replicas=1))
    await until(lambda: obj(api, "v1/pods", "wine-driver-0") is None, what="the driver pod deleted (graceful restart)")
    await until(lambda: obj(api, MS, "wine")["status"]["observedGeneration"] == 2, what="status of generation 2")
    assert obj(api, MS, "wine")["status"]["scaling"]["mode"] == "Restart" and not job.asked


async def test_deleted_and_edited_children_are_restored(api, operator, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    await apply(api, resource(topics, broker))
    await until(lambda: obj(api, "apps/v1/statefulsets", "wine-driver"), what="driver")
    status, _ = await api.kube.request("DELETE", "/apis/apps/v1/namespaces/ml/statefulsets/wine-driver")
    assert status < 300
    await until(lambda: obj(api, "apps/v1/statefulsets", "wine-driver"), what="driver restored")
    status, _ = await api.kube.request("PATCH", "/apis/rbac.authorization.k8s.io/v1/namespaces/ml/roles/wine-driver",
                                         {"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]},
                                         content_type="application/merge-patch+json")
    assert status < 300
    await until(lambda: obj(api, "rbac.authorization.k8s.io/v1/roles", "wine-driver")["rules"][0]["resources"] == ["pods"],
                what="role restored")


async def test_crash_looping_driver_degrades_with_the_reason(api, operator, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    job.ready = False
    driver_pod(api, ready=False, waiting="CrashLoopBackOff", restarts=4)
    await apply(api, resource(topics, broker))
    cond = await until(lambda: condition(api, "wine", "Degraded").get("status") == "True"
                       and condition(api, "wine", "Degraded"), what="Degraded")
    assert cond["reason"] == "CrashLoopBackOff" and "bootstrap failed" in cond["message"]
    assert obj(api, MS, "wine")["status"]["phase"] == "Degraded"
    # ... and users see it in `kubectl describe` / `kubectl events`: a Warning on the resource.
    event = await until(lambda: next((o.raw for k, o in list(api.objects.items()) if k[0].plural == "events"
                                      and not o.deleted and o.raw.get("reason") == "CrashLoopBackOff"), None),
                        what="Warning event")
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "wine"
    assert "bootstrap failed" in event["message"]


async def test_delete_leaves_cleanup_to_owner_references(api, operator, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    await apply(api, resource(topics, broker))
    await until(lambda: obj(api, "apps/v1/statefulsets", "wine-driver"), what="driver")
    ms = obj(api, MS, "wine")
    # Only kopf's own finalizer (it keeps the timer's state); nothing outside Kubernetes is cleaned.
    assert ms["metadata"].get("finalizers", []) in ([], ["scorestream.dev/finalizer"])
    for key, name in CHILDREN:
        (ref,) = obj(api, key, name)["metadata"]["ownerReferences"]
        assert ref["uid"] == ms["metadata"]["uid"] and ref["blockOwnerDeletion"]
    status, _ = await api.kube.request("DELETE", f"/apis/{s.API_VERSION}/namespaces/{NS}/{s.PLURAL}/wine")
    assert status < 300
    await until(lambda: obj(api, MS, "wine") is None, what="deleted")


async def test_operator_restart_mid_reconcile_leaves_no_duplicates(api, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    first = Operator(api, OperatorConfig(allNamespaces=True, observeInterval=0.5, endpointTemplate=job.url))
    await first.start()
    await apply(api, resource(topics, broker))
    await until(lambda: obj(api, "v1/configmaps", "wine-job"), what="first child")
    await first.kill()  # mid-reconcile, not a graceful stop
    second = Operator(api, OperatorConfig(allNamespaces=True, observeInterval=0.5, endpointTemplate=job.url))
    await second.start()
    try:
        await until(lambda: condition(api, "wine", "Ready").get("status") == "True"
                    or obj(api, "apps/v1/statefulsets", "wine-driver"), what="reconciled")
        for key, name in CHILDREN:
            await until(lambda: obj(api, key, name), what=name)
            live = [k for k in api.objects if k[0].plural == key.split("/")[-1] and k[2] == name
                    and not api.objects[k].deleted]
            assert len(live) == 1
    finally:
        await second.stop()


async def test_invalid_spec_is_rejected_at_admission_and_by_the_operator(api, operator, broker, topics):
    bad = resource(topics, broker, replicas=-1)
    assert any("replicas" in e for e in admit(bad))
    # Where no schema runs (this emulator; a CRD installed without validation), the operator says why.
    status, _ = await api.kube.request("POST", f"/apis/{s.API_VERSION}/namespaces/{NS}/{s.PLURAL}", bad)
    assert status < 300
    cond = await until(lambda: condition(api, "wine", "Degraded").get("reason") == "InvalidSpec"
                       and condition(api, "wine", "Degraded"), what="InvalidSpec")
    assert "spec.replicas" in cond["message"]
    assert obj(api, MS, "wine")["status"]["phase"] == "Failed"
    assert obj(api, "apps/v1/statefulsets", "wine-driver") is None


@pytest.mark.timeout(400)
async def test_watches_only_the_namespaces_it_is_given(api, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    for ns in (NS, "other"):  # kopf serves the given namespaces that exist, and follows them
        api.objects["v1/namespaces", None, ns] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    op = Operator(api, OperatorConfig(namespaces=[NS], observeInterval=0.5, endpointTemplate=job.url))
    await op.start()
    try:
        await apply(api, resource(topics, broker, name="elsewhere", namespace="other"))
        await apply(api, resource(topics, broker))
        await until(lambda: (obj(api, MS, "wine").get("status") or {}).get("observedGeneration") == 1,
                    what="reconciled in ml")
        await asyncio.sleep(1.5)  # three observe intervals: the other namespace stays untouched
        assert obj(api, "v1/configmaps", "elsewhere-job", namespace="other") is None
        assert "status" not in obj(api, MS, "elsewhere", namespace="other")
    finally:
        await op.stop()


async def test_ha_one_replica_serves_and_a_standby_takes_over(api, job, broker, topics, caplog):
    """kopf peering: replicas of distinct priority; the highest serves, the other pauses, and
    resumes when the active one stops."""
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    api.objects["kopf.dev/v1/clusterkopfpeerings", None, "scorestream"] = {
        "apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": "scorestream"}}
    config = dict(allNamespaces=True, peering="scorestream", observeInterval=0.5, endpointTemplate=job.url)
    standby = Operator(api, OperatorConfig(priority=100, **config))
    active = Operator(api, OperatorConfig(priority=200, **config))
    caplog.set_level(logging.DEBUG, logger="kopf")
    await standby.start()
    await active.start()
    try:
        await until(lambda: "Pausing operations in favour of" in caplog.text, what="standby pauses")
        peers = obj(api, "kopf.dev/v1/clusterkopfpeerings", "scorestream", namespace=None)["status"]
        assert sorted(p["priority"] for p in peers.values()) == [100, 200]
        await apply(api, resource(topics, broker))
        await until(lambda: obj(api, "v1/configmaps", "wine-job"), what="reconciled")
        await active.stop()
        await until(lambda: "Resuming operations after the pause" in caplog.text, what="standby resumes")
        await apply(api, resource(topics, broker, replicas=4))
        await until(lambda: '"spark.executor.instances": "4"' in obj(api, "v1/configmaps", "wine-job")["data"]["job.json"],
                    what="the standby reconciles")
    finally:
        for op in (active, standby):
            if op.running:
                await op.stop()


async def test_reconcile_latency(api, operator, job, broker, topics, capsys):
    """100 successive changes all reach the driver's ConfigMap. Prints resource change -> ConfigMap
    patched, median and p99: a figure, not a check (kopf batches events for 0.1 s by default)."""
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    await apply(api, resource(topics, broker))
    await until(lambda: obj(api, "v1/configmaps", "wine-job"), what="config")
    latencies = []
    for i in range(100):
        body = resource(topics, broker, replicas=1 + i % 7)
        body["spec"]["spark"]["conf"] = {"spark.scorestream.change": str(i)}
        assert admit(body, obj(api, MS, "wine")) == []  # admission (cel-python) is not the operator's time
        t0 = time.perf_counter()
        await apply(api, body, admitted=True)
        await until(lambda: f'"spark.scorestream.change": "{i}"' in obj(api, "v1/configmaps", "wine-job")["data"]["job.json"],
                    what=f"change {i}")
        latencies.append(time.perf_counter() - t0)
    first, last = statistics.median(latencies[:25]), statistics.median(latencies[-25:])
    latencies.sort()
    with capsys.disabled():
        print(f"\nreconcile latency over {len(latencies)} changes: median {statistics.median(latencies) * 1000:.0f} ms,"
              f" p99 {latencies[98] * 1000:.0f} ms (median of the first 25: {first * 1000:.0f} ms,"
              f" of the last 25: {last * 1000:.0f} ms)")


def template_hash(api):
    return obj(api, "apps/v1/statefulsets", "wine-driver")["spec"]["template"]["metadata"]["annotations"][
        "scorestream.dev/config-hash"]


def event(api, reason):
    return next((o.raw for k, o in list(api.objects.items()) if k[0].plural == "events"
                 and o.raw.get("reason") == reason), None)


async def test_an_upgrade_that_never_gets_ready_runs_the_last_stable_spec_again(api, operator, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 2})
    body = resource(topics, broker, upgradeTimeout="2s")
    await apply(api, body)
    await until(lambda: obj(api, "apps/v1/statefulsets", "wine-driver"), what="driver")
    driver_pod(api)  # runs generation 1's configuration, ready
    await until(lambda: (obj(api, MS, "wine").get("status") or {}).get("lastStableSpec"), what="a stable spec")
    stable_hash = template_hash(api)

    body["spec"]["spark"]["triggerInterval"] = "5s"  # a job change: the driver rolls
    await apply(api, body)
    await until(lambda: template_hash(api) != stable_hash, what="the driver rolled")
    job.ready = False
    driver_pod(api, ready=False)  # the new driver never gets ready
    await until(lambda: (obj(api, MS, "wine")["status"].get("upgrade") or {}).get("phase") == "Failed",
                timeout=30, what="the upgrade failed")
    assert template_hash(api) == stable_hash, "the last stable configuration runs again"
    st = obj(api, MS, "wine")["status"]
    assert st["lastStableSpec"]["generation"] == 1 and st["lastStableSpec"]["spec"]["spark"]["triggerInterval"] == "1s"
    assert condition(api, "wine", "Degraded")["reason"] == "UpgradeFailed"
    assert obj(api, MS, "wine")["spec"]["spark"]["triggerInterval"] == "5s", "the operator never writes spec"
    await until(lambda: event(api, "UpgradeRolledBack"), what="UpgradeRolledBack event")

    # The next change is tried again, and this time the driver gets ready.
    body["spec"]["spark"]["triggerInterval"] = "2s"
    await apply(api, body)
    await until(lambda: template_hash(api) not in (stable_hash,), what="the driver rolled again")
    job.ready = True
    driver_pod(api)
    await until(lambda: (obj(api, MS, "wine")["status"].get("lastStableSpec") or {}).get("generation") == 3,
                what="generation 3 stable")
    assert "upgrade" not in obj(api, MS, "wine")["status"]
    await until(lambda: event(api, "Upgraded"), what="Upgraded event")
