"""The operator (a process with the chart's ServiceAccount token) against the real control plane
(tests/harness/cluster.py: API server, controllers, scheduler, kwok nodes), the real broker, and a
stand-in for the job's HTTP endpoint (the real job is exercised by the runtime tests)."""

from __future__ import annotations

import asyncio
import base64
import math
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from scorestream import naming
from scorestream.operator.reconciler import DEBOUNCE
from scorestream.operator.settings import OperatorConfig
from scorestream.tools.local.broker import create_topics

from harness.operator import (MS, ApiError, Operator, apply, condition, driver_pod, events, helm_install, obj,
                              operator_config, resource, tool, until)

pytestmark = pytest.mark.broker


CHILDREN = [("v1/configmaps", "wine-job"), ("v1/serviceaccounts", "wine-driver"), ("v1/services", "wine-driver"),
            ("rbac.authorization.k8s.io/v1/roles", "wine-driver"),
            ("rbac.authorization.k8s.io/v1/rolebindings", "wine-driver"), ("apps/v1/statefulsets", "wine-driver")]


async def test_create_makes_children_topics_and_status(api, operator, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 3})
    await apply(api, resource(topics, broker))
    for key, name in CHILDREN:
        await until(lambda: obj(api, key, name), what=f"{key} {name}")
    pod = await driver_pod(api)  # made by the StatefulSet controller, scheduled onto a kwok node
    assert pod["spec"]["nodeName"] == "kwok-node-0" and pod["spec"]["serviceAccountName"] == "wine-driver"
    await until(lambda: condition(api, "wine", "Ready").get("status") == "True", what="Ready")
    status = obj(api, MS, "wine")["status"]
    assert status["phase"] == "Running" and status["observedGeneration"] == 1
    assert condition(api, "wine", "ModelReady")["status"] == "True"
    assert status["model"]["current"] == {"name": "wine-tree", "version": "1", "since": "2023-11-14T22:13:20Z"}
    assert status["consumerGroups"]["data"] == f"scorestream.{api.ns}.wine"
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
    await driver_pod(api)


async def test_replicas_change_live_without_restarting_the_driver(api, operator, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 4})
    await apply(api, resource(topics, broker))
    pod = await driver_pod(api)
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
    assert obj(api, "v1/pods", "wine-driver-0")["metadata"]["uid"] == pod["metadata"]["uid"]


async def test_replicas_beyond_the_partitions_are_capped_and_said_so(api, operator, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 2})
    job.target = 1
    await apply(api, resource(topics, broker, replicas=5))
    await driver_pod(api)
    await until(lambda: job.asked and job.asked[-1] == 2, what="the job asked for 2 executors")
    await until(lambda: (obj(api, MS, "wine").get("status") or {}).get("scaling", {}).get("capped"), what="capped")
    assert "2 partitions" in obj(api, MS, "wine")["status"]["scaling"]["message"]
    await until(lambda: events(api, "ReplicasCapped"), what="ReplicasCapped event")
    assert 5 not in job.asked


async def test_where_executors_cannot_change_live_the_driver_restarts(api, operator, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 2})
    job.live = False
    await apply(api, resource(topics, broker))
    first = await driver_pod(api)
    await until(lambda: condition(api, "wine", "Ready").get("status") == "True", what="Ready")
    await apply(api, resource(topics, broker, replicas=1))
    # The operator deletes the pod (a graceful restart); the StatefulSet controller makes it again.
    await until(lambda: (obj(api, "v1/pods", "wine-driver-0") or first)["metadata"]["uid"] != first["metadata"]["uid"],
                timeout=60, what="the driver pod made again")
    await until(lambda: obj(api, MS, "wine")["status"]["observedGeneration"] == 2, what="status of generation 2")
    assert obj(api, MS, "wine")["status"]["scaling"]["mode"] == "Restart" and not job.asked
    # Beyond the partitions: said once, not at every reconcile (the observer's, every 0.5 s).
    await apply(api, resource(topics, broker, replicas=3))
    await until(lambda: events(api, "ReplicasCapped"), what="ReplicasCapped event")
    await asyncio.sleep(3)
    assert len(events(api, "ReplicasCapped")) == 1, events(api, "ReplicasCapped")


async def test_deleted_and_edited_children_are_restored(api, operator, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    await apply(api, resource(topics, broker))
    await until(lambda: obj(api, "apps/v1/statefulsets", "wine-driver"), what="driver")
    api.delete("apps/v1/statefulsets", "wine-driver")
    await until(lambda: obj(api, "apps/v1/statefulsets", "wine-driver"), what="driver restored")
    api.patch("rbac.authorization.k8s.io/v1/roles", "wine-driver",
              {"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]})
    await until(lambda: obj(api, "rbac.authorization.k8s.io/v1/roles", "wine-driver")["rules"][0]["resources"] == ["pods"],
                what="role restored")


async def test_crash_looping_driver_degrades_with_the_reason(api, operator, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    job.ready = False
    await apply(api, resource(topics, broker))
    await driver_pod(api, ready=False, waiting="CrashLoopBackOff", restarts=4)
    cond = await until(lambda: condition(api, "wine", "Degraded").get("status") == "True"
                       and condition(api, "wine", "Degraded"), what="Degraded")
    assert cond["reason"] == "CrashLoopBackOff" and "bootstrap failed" in cond["message"]
    assert obj(api, MS, "wine")["status"]["phase"] == "Degraded"
    # ... and users see it in `kubectl describe` / `kubectl events`: a Warning on the resource.
    event = (await until(lambda: events(api, "CrashLoopBackOff"), what="Warning event"))[0]
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "wine"
    assert "bootstrap failed" in event["message"]


async def test_delete_leaves_cleanup_to_the_garbage_collector(api, operator, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    await apply(api, resource(topics, broker))
    await until(lambda: obj(api, "apps/v1/statefulsets", "wine-driver"), what="driver")
    await driver_pod(api)
    ms = obj(api, MS, "wine")
    # No finalizer: nothing outside Kubernetes is cleaned, and a delete never waits for an operator.
    assert ms["metadata"].get("finalizers", []) == []
    for key, name in CHILDREN:
        (ref,) = obj(api, key, name)["metadata"]["ownerReferences"]
        assert ref["uid"] == ms["metadata"]["uid"] and ref["blockOwnerDeletion"]
    api.delete(MS, "wine")
    await until(lambda: obj(api, MS, "wine") is None, what="deleted")
    # Without a finalizer, the operator learns of the deletion from the DELETED event: the resource
    # is looked at no more (a reconcile in flight may still end). Looked at every 0.5 s, it would log more.
    await asyncio.sleep(2)
    looks = operator.log.count(f"reconciled {api.ns}/wine in")
    await asyncio.sleep(3)
    assert operator.log.count(f"reconciled {api.ns}/wine in") == looks, "the deleted resource is still looked at"
    # The real garbage collector takes every child, and the StatefulSet's pod with it.
    for key, name in [*CHILDREN, ("v1/pods", "wine-driver-0")]:
        await until(lambda: api.request("GET", api.path(key, name), ok_missing=True) is None, timeout=60,
                    what=f"{key} {name} collected")


def _requests(api, since: int) -> list[str]:
    """The operator's API requests in the test's namespace after the first `since` of its audit
    events (its watches aside: they are the event source, one per kind, not a request per resource)."""
    events = api.cluster.audit(api.installation.subject)[since:]
    return [f"{e['verb']} {e['objectRef'].get('resource')}/{e['objectRef'].get('name')}" for e in events
            if e.get("stage") == "ResponseComplete" and e.get("verb") != "watch"
            and e.get("objectRef", {}).get("namespace") == api.ns]


async def test_at_rest_no_api_request_a_burst_of_edits_is_one_reconcile_and_a_deleted_child_is_back_at_once(
        api, job, broker, topics):
    """The operator reads from its watches and writes only what differs: a Ready resource whose job
    answers the same costs the API server nothing, and no reconcile but the resync, its job polled
    all along and the resource woken once the job answers otherwise; ten edits in a burst make one
    or two reconciles; a child deleted by hand is made again from its DELETED event, not at the
    next look."""
    create_topics(broker.bootstrap, {topics["dataTopic"]: 2})
    # Its Kafka settings in a Secret, which the operator may read by name only (no watch).
    api.create("v1/secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kafka-client"},
                              "data": {"client.properties": base64.b64encode(b"client.id=at-rest\n").decode()}})
    body = resource(topics, broker)
    body["spec"]["kafka"]["secretRef"] = {"name": "kafka-client"}
    op = Operator(api, operator_config(api, observeInterval=5, endpointTemplate=job.url))
    await op.start()
    try:
        await apply(api, body)
        await until(lambda: condition(api, "wine", "Ready").get("status") == "True", what="Ready")
        await asyncio.sleep(3)  # the watch events of its own writes come back
        since = len(api.cluster.audit(api.installation.subject))
        looks, polled = op.log.count(f"reconciled {api.ns}/wine in"), job.polled
        await asyncio.sleep(30)
        assert job.polled - polled >= 5, "the job was polled all along"
        # At most one resync (reconciler.resync: 150 s), not a reconcile a poll.
        assert op.log.count(f"reconciled {api.ns}/wine in") - looks <= 1, "reconciled at rest"
        assert _requests(api, since) == [], "API requests at rest"

        job.ready = False  # the job answering otherwise wakes the resource within a poll
        await until(lambda: condition(api, "wine", "Ready").get("status") == "False", timeout=15,
                    what="not Ready once the job says so")
        job.ready = True
        await until(lambda: condition(api, "wine", "Ready").get("status") == "True", timeout=15, what="Ready again")

        looks = op.log.count(f"reconciled {api.ns}/wine in")
        started = time.monotonic()
        with ThreadPoolExecutor(10) as pool:  # as a script would send them, one connection each
            list(pool.map(lambda replicas: api.patch(MS, "wine", {"spec": {"replicas": replicas}}), [1, 3] * 5))
        took = time.monotonic() - started
        last = obj(api, MS, "wine")["metadata"]["generation"]
        await until(lambda: obj(api, MS, "wine")["status"].get("observedGeneration") == last, what="the last edit seen")
        await asyncio.sleep(1)
        burst = op.log.count(f"reconciled {api.ns}/wine in") - looks
        window = time.monotonic() - started
        # Edits within one debounce of the first make one reconcile, so a burst of up to twice the
        # debounce at most two; a loaded API server that spreads the burst wider, one more per debounce.
        beyond = max(0, math.ceil((took - 2 * DEBOUNCE) / DEBOUNCE))
        # On a loaded machine the edits' reconciles can outlast the look interval: its looks are
        # not the burst's.
        looked = math.floor(window / op.config.observe_interval)
        assert 1 <= burst <= 2 + beyond + looked, \
            f"{burst} reconciles for 10 edits in {took:.2f} s ({window:.1f} s counted, {looked} looks)"

        api.delete("v1/services", "wine-driver")
        deleted = time.monotonic()
        await until(lambda: obj(api, "v1/services", "wine-driver"), timeout=5, what="service restored")
        assert time.monotonic() - deleted < 2, "a deleted child waited for the next look"
    finally:
        await op.stop()


async def test_operator_restart_mid_reconcile_leaves_no_duplicates(api, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    config = operator_config(api, observeInterval=0.5, endpointTemplate=job.url)
    first = Operator(api, config)
    await first.start()
    await apply(api, resource(topics, broker))
    await until(lambda: obj(api, "v1/configmaps", "wine-job"), what="first child")
    await first.kill()  # mid-reconcile, not a graceful stop
    second = Operator(api, config)
    await second.start()
    try:
        await until(lambda: condition(api, "wine", "Ready").get("status") == "True", timeout=60, what="reconciled")
        for key, name in CHILDREN:
            child = await until(lambda: obj(api, key, name), what=name)
            assert len(child["metadata"]["ownerReferences"]) == 1
        assert len(api.request("GET", api.path("v1/pods"))["items"]) == 1, "one driver pod"
        pod = await driver_pod(api)
        await second.kill()
        await statefulset_as_an_older_operator_made_it(api)
        third = Operator(api, config)
        await third.start()
        # Made anew (podManagementPolicy cannot be updated), its pod adopted, not restarted.
        await until(lambda: (obj(api, "apps/v1/statefulsets", "wine-driver") or {}).get("spec", {}).get(
            "podManagementPolicy") == "Parallel", timeout=30, what="the StatefulSet made anew")
        await until(lambda: _controller(obj(api, "v1/pods", "wine-driver-0")) == obj(
            api, "apps/v1/statefulsets", "wine-driver")["metadata"]["uid"], timeout=30, what="the pod adopted")
        assert obj(api, "v1/pods", "wine-driver-0")["metadata"]["uid"] == pod["metadata"]["uid"]
        assert events(api, "ChildRecreated")
    finally:
        for op in (second, *([third] if "third" in locals() else [])):
            await op.stop()


async def statefulset_as_an_older_operator_made_it(api) -> None:
    """The driver's StatefulSet with `podManagementPolicy: OrderedReady`, as operator 0.1.0 rendered
    it; its pod left running."""
    sts = obj(api, "apps/v1/statefulsets", "wine-driver")
    api.request("DELETE", api.path("apps/v1/statefulsets", "wine-driver"), {"propagationPolicy": "Orphan"})
    await until(lambda: api.request("GET", api.path("apps/v1/statefulsets", "wine-driver"), ok_missing=True) is None,
                what="the StatefulSet deleted, its pod orphaned")
    meta = {k: sts["metadata"][k] for k in ("name", "labels", "ownerReferences")}
    api.create("apps/v1/statefulsets", {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
                                        "spec": {**sts["spec"], "podManagementPolicy": "OrderedReady"}})


def _controller(body: dict | None) -> str | None:
    return next((r["uid"] for r in (body or {}).get("metadata", {}).get("ownerReferences", []) if r.get("controller")),
                None)


async def test_invalid_spec_is_refused_by_the_api_server_naming_the_field(api, operator, broker, topics):
    with pytest.raises(ApiError) as refused:
        await apply(api, resource(topics, broker, replicas=-1))
    assert refused.value.status == 422 and "spec.replicas" in str(refused.value)
    assert obj(api, MS, "wine") is None


@pytest.mark.timeout(400)
async def test_watches_only_the_namespaces_it_is_given(api, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    other = api.namespace()
    api.extra.append(other)
    op = Operator(api, operator_config(allNamespaces=False, namespaces=[api.ns], observeInterval=0.5,
                                       endpointTemplate=job.url))
    await op.start()
    try:
        await apply(api, resource(topics, broker, name="elsewhere", namespace=other))
        await apply(api, resource(topics, broker))
        await until(lambda: (obj(api, MS, "wine").get("status") or {}).get("observedGeneration") == 1,
                    what="reconciled in its namespace")
        await asyncio.sleep(1.5)  # three observe intervals: the other namespace stays untouched
        assert obj(api, "v1/configmaps", "elsewhere-job", namespace=other) is None
        assert "status" not in obj(api, MS, "elsewhere", namespace=other)
    finally:
        await op.stop()


def lease(api) -> dict:
    return (obj(api, "coordination.k8s.io/v1/leases", naming.OPERATOR_LEASE) or {}).get("spec") or {}


async def test_ha_one_replica_leads_through_a_lease_and_a_follower_takes_over(api, job, broker, topics, tmp_path):
    """The chart's HA install (two replicas: leader election through a Lease in the release
    namespace), each replica with the release's ServiceAccount: one leads and reconciles, the other
    waits without reconciling; the leader killed (SIGKILL: it releases nothing), the follower takes
    the Lease over within its duration and reconciles a change; stopped gracefully, it releases it."""
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    release = f"ha-{api.ns}"
    ha = helm_install(api.cluster, tmp_path, release, api.ns, "--set", "replicaCount=2",
                      "--set", "watch.allNamespaces=true")
    raw = api.request("GET", f"/api/v1/namespaces/{api.ns}/configmaps?labelSelector=app.kubernetes.io/instance={release}")
    chart = OperatorConfig.model_validate(yaml.safe_load(raw["items"][0]["data"]["operator.yaml"]))
    assert chart.leader_election is not None and chart.operator_namespace == api.ns
    # The chart's election, with shorter times (client-go's 15/10/2 s would make this test slow).
    election = {"leaseName": chart.leader_election.lease_name, "leaseDuration": 4, "renewDeadline": 3,
                "retryPeriod": 0.5}
    config = operator_config(observeInterval=0.5, endpointTemplate=job.url, leaderElection=election,
                             operatorNamespace=api.ns)
    first = Operator(api, config, kubeconfig=ha.kubeconfig)
    await first.start()
    await until(lambda: "leading: holding Lease" in first.log, what="the first replica leads")
    second = Operator(api, config, kubeconfig=ha.kubeconfig)
    await second.start()
    try:
        await until(lambda: "following: Lease" in second.log, what="the second replica follows")
        leader_id = lease(api)["holderIdentity"]
        assert f"as {leader_id}" in first.log
        await apply(api, resource(topics, broker))
        await until(lambda: obj(api, "v1/configmaps", "wine-job"), what="reconciled by the leader")
        assert "created ConfigMap" in first.log and "created " not in second.log, "the follower reconciled"

        await first.kill()
        killed = time.monotonic()
        await until(lambda: "leading: holding Lease" in second.log, timeout=20, what="the follower takes over")
        took = time.monotonic() - killed
        print(f"\nthe follower led {took:.1f} s after the leader's SIGKILL (leaseDuration 4 s, retryPeriod 0.5 s)")
        assert took < 4 + 2 * 0.5 + 1.5
        assert lease(api)["holderIdentity"] not in ("", leader_id)
        assert lease(api)["leaseTransitions"] == 1
        await apply(api, resource(topics, broker, replicas=4))
        await until(lambda: '"spark.executor.instances": "4"' in obj(api, "v1/configmaps", "wine-job")["data"]["job.json"],
                    what="the new leader reconciles")
        await second.stop()
        assert lease(api)["holderIdentity"] == "", "a leader stopping gracefully releases its Lease"

        # A leader that finds the Lease another's (it was cut off, and a follower took over) stops
        # at once, so its pod restarts as a follower.
        third = Operator(api, config, kubeconfig=ha.kubeconfig)
        await third.start()
        await until(lambda: "leading: holding Lease" in third.log, what="the third replica leads")
        current = obj(api, "coordination.k8s.io/v1/leases", naming.OPERATOR_LEASE)
        api.request("PUT", api.path("coordination.k8s.io/v1/leases", naming.OPERATOR_LEASE),
                    {**current, "spec": {**current["spec"], "holderIdentity": "another-replica"}})
        await until(lambda: not third.running, timeout=10, what="the deposed leader exits")
        assert third.proc.returncode == 1 and "lost Lease" in third.log
    finally:
        for op in (first, second, *([third] if "third" in locals() else [])):
            await op.stop()
        tool("helm", api.cluster, "uninstall", release, "-n", api.ns, "--wait")


async def test_a_hundred_successive_changes_all_reach_the_driver_config(api, operator, job, broker, topics):
    """Each of 100 successive spec changes reaches the driver's ConfigMap (kopf batches events for
    0.1 s: none may be lost in a batch)."""
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    await apply(api, resource(topics, broker))
    await until(lambda: obj(api, "v1/configmaps", "wine-job"), what="config")
    for i in range(100):
        body = resource(topics, broker, replicas=1 + i % 7)
        body["spec"]["spark"]["conf"] = {"spark.scorestream.change": str(i)}
        await apply(api, body)
        await until(lambda: f'"spark.scorestream.change": "{i}"' in obj(api, "v1/configmaps", "wine-job")["data"]["job.json"],
                    what=f"change {i}")


def template_hash(api):
    return obj(api, "apps/v1/statefulsets", "wine-driver")["spec"]["template"]["metadata"]["annotations"][
        "scorestream.dev/config-hash"]


async def test_an_upgrade_that_never_gets_ready_runs_the_last_stable_spec_again(api, operator, job, broker, topics):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 2})
    body = resource(topics, broker, upgradeTimeout="2s")
    await apply(api, body)
    await driver_pod(api)  # runs generation 1's configuration, ready
    await until(lambda: (obj(api, MS, "wine").get("status") or {}).get("lastStableSpec"), what="a stable spec")
    stable_hash = template_hash(api)

    job.ready = False  # the next driver never gets ready
    body["spec"]["spark"]["triggerInterval"] = "5s"  # a job change: the driver rolls
    await apply(api, body)
    await until(lambda: template_hash(api) != stable_hash, what="the driver rolled")
    failing = await driver_pod(api, ready=False)  # its readiness probe fails, as its kubelet says
    await until(lambda: (obj(api, MS, "wine")["status"].get("upgrade") or {}).get("phase") == "Failed",
                timeout=60, what="the upgrade failed")
    assert template_hash(api) == stable_hash, "the last stable configuration runs again"
    # ... in a new pod: the StatefulSet replaces the pod that is not ready (not so under OrderedReady).
    assert (await driver_pod(api))["metadata"]["uid"] != failing["metadata"]["uid"]
    st = obj(api, MS, "wine")["status"]
    assert st["lastStableSpec"]["generation"] == 1 and st["lastStableSpec"]["spec"]["spark"]["triggerInterval"] == "1s"
    assert condition(api, "wine", "Degraded")["reason"] == "UpgradeFailed"
    assert obj(api, MS, "wine")["spec"]["spark"]["triggerInterval"] == "5s", "the operator never writes spec"
    await until(lambda: events(api, "UpgradeRolledBack"), what="UpgradeRolledBack event")

    # The next change is tried again, and this time the driver gets ready: with time to, since 2 s
    # can pass on a loaded machine before the test marks it ready (that a late-ready upgrade still
    # ends with "Upgraded" is test_desired_state's).
    body["spec"]["spark"]["triggerInterval"] = "2s"
    body["spec"]["upgradeTimeout"] = "120s"
    await apply(api, body)
    await until(lambda: template_hash(api) != stable_hash, what="the driver rolled again")
    job.ready = True
    await driver_pod(api)
    await until(lambda: (obj(api, MS, "wine")["status"].get("lastStableSpec") or {}).get("generation") == 3,
                timeout=60, what="generation 3 stable")
    assert "upgrade" not in obj(api, MS, "wine")["status"]
    await until(lambda: events(api, "Upgraded"), what="Upgraded event")
