"""Spark on Kubernetes for real: the job's own SparkSession (scorestream.runtime.job.spark_session),
from the configuration the operator rendered, with `--master k8s://` the tests' API server and the
token of the driver's ServiceAccount, asks that server for its executors.

kwok runs no container, so no executor ever registers with the driver: what is checked is what
Kubernetes sees — the executor pods, their labels and owner (the driver pod, so they go with it),
that the driver's Role allows exactly what Spark does (the audit log: nothing refused, nothing
else asked), and that stopping the session deletes them."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import time

import pytest

from scorestream import naming
from scorestream.config import JobConfig
from scorestream.tools.local.broker import create_topics
from scorestream.operator import desired

from harness.operator import Operator, apply, driver_pod, obj, operator_config, resource, until

pytestmark = [pytest.mark.broker, pytest.mark.spark]

# Runs in a process of its own (a JVM per SparkSession): the session from the job's configuration,
# kept until the test closes stdin.
DRIVER = """
import json, sys
from scorestream.config import JobConfig
from scorestream.runtime.job import spark_session
spark = spark_session(JobConfig.model_validate_json(sys.argv[1]))
print("started", flush=True)
sys.stdin.read()
spark.stop()
print("stopped", flush=True)
"""


# spec.executor.podTemplate (#17): what Spark must carry onto every executor pod it creates.
EXECUTOR_TEMPLATE = {
    "metadata": {"labels": {"team": "fraud"}, "annotations": {"example.com/owner": "fraud-team"}},
    "spec": {"nodeSelector": {"type": "kwok"},
             "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "streaming", "effect": "NoSchedule"}],
             "containers": [{"name": "executor", "env": [{"name": "TZ", "value": "UTC"}]}]},
}


async def operated_driver(api, job, broker, topics) -> tuple[dict, dict, JobConfig]:
    """The operator applies a resource with the executor template (two executors): the driver pod,
    the job's ConfigMap data and its configuration."""
    create_topics(broker.bootstrap, {topics["dataTopic"]: 2})
    op = Operator(api, operator_config(api, observeInterval=0.5, endpointTemplate=job.url))
    await op.start()
    try:
        await apply(api, resource(topics, broker, replicas=2, executor={"podTemplate": EXECUTOR_TEMPLATE}))
        pod = await driver_pod(api)
        data = obj(api, "v1/configmaps", "wine-job")["data"]
        return pod, data, JobConfig.model_validate_json(data["job.json"])
    finally:
        await op.stop()


async def start_driver(api, tmp_path, config: JobConfig, data: dict) -> subprocess.Popen:
    """The job's SparkSession from the configuration the operator rendered (`config`, and the
    executor template of its ConfigMap `data`), as the driver pod would start it, but here: client
    mode against the tests' API server with the driver ServiceAccount's token. Started when this
    returns; it stops when its stdin is closed."""
    names = naming.Names("wine", api.ns)
    token = tmp_path / "token"
    token.write_text(api.cluster.token(api.ns, names.service_account))
    template = tmp_path / desired.EXECUTOR_TEMPLATE_KEY
    template.write_text(data[desired.EXECUTOR_TEMPLATE_KEY])
    conf = {
        **config.spark.conf,
        # Client mode from outside the cluster: the driver reaches the API server with the
        # ServiceAccount's token (in the pod, Spark reads the mounted one), and is on loopback.
        "spark.kubernetes.authenticate.caCertFile": str(api.cluster.dir / "ca.crt"),
        "spark.kubernetes.authenticate.oauthTokenFile": str(token),
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.port": "0", "spark.driver.blockManager.port": "0",
        "spark.kubernetes.executor.podTemplateFile": str(template),
        # No executor registers under kwok: do not wait for them before the session is up.
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "1s",
    }
    config = config.model_copy(update={"spark": config.spark.model_copy(update={
        "master": f"k8s://{api.cluster.server}", "conf": conf})})
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, config.model_dump_json(by_alias=True)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(tmp_path / "driver.log", "wb"),
                              text=True, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    line = await asyncio.wait_for(asyncio.to_thread(driver.stdout.readline), 180)
    if line != "started\n":
        driver.kill()
        raise AssertionError((tmp_path / "driver.log").read_text()[-3000:])
    return driver


def executor_pods(api) -> list[dict]:
    return [p for p in api.request("GET", api.path("v1/pods") + "?labelSelector=spark-role=executor")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def _rules_allow(rules: list[dict], verb: str, resource: str) -> bool:
    return any(resource in r["resources"] and verb in r["verbs"] and r["apiGroups"] == [""] for r in rules)


@pytest.mark.timeout(300)
async def test_the_driver_asks_the_api_server_for_its_executors_with_its_own_service_account(
        api, job, broker, topics, tmp_path):
    pod, data, config = await operated_driver(api, job, broker, topics)

    names = naming.Names("wine", api.ns)
    # The executor template as the driver pod has it (the ConfigMap mounted at CONFIG_DIR), here.
    assert config.spark.conf["spark.kubernetes.executor.podTemplateFile"] == desired.EXECUTOR_TEMPLATE_FILE
    started = time.monotonic()
    driver = await start_driver(api, tmp_path, config, data)
    try:
        executors = functools.partial(executor_pods, api)
        pods = await until(lambda: len(executors()) == 2 and executors(), timeout=60, what="two executor pods")
        seconds = time.monotonic() - started
        for p in pods:
            meta = p["metadata"]
            assert meta["name"].startswith("wine-exec-")
            assert meta["labels"]["scorestream.dev/modelserving"] == "wine"
            assert meta["labels"]["app.kubernetes.io/component"] == "executor"
            (owner,) = meta["ownerReferences"]
            assert (owner["kind"], owner["name"], owner["uid"]) == ("Pod", pod["metadata"]["name"], pod["metadata"]["uid"])
            assert p["spec"]["serviceAccountName"] in (None, "default", names.service_account)
            (main,) = [c for c in p["spec"]["containers"] if c["name"] == desired.EXECUTOR_CONTAINER]
            assert main["image"] == config.spark.conf["spark.kubernetes.container.image"]
            # The executor template's fields, carried by Spark onto the pod it made.
            assert meta["labels"]["team"] == "fraud" and meta["annotations"]["example.com/owner"] == "fraud-team"
            assert p["spec"]["nodeSelector"] == {"type": "kwok"}
            assert EXECUTOR_TEMPLATE["spec"]["tolerations"][0] in p["spec"]["tolerations"]
            assert {"name": "TZ", "value": "UTC"} in main["env"]
        await until(lambda: all((p.get("spec") or {}).get("nodeName") for p in executors()), timeout=30,
                    what="the executors scheduled onto a kwok node")
    finally:
        if driver.poll() is None:
            driver.stdin.close()
            try:
                driver.wait(60)
            except subprocess.TimeoutExpired:
                driver.kill()
    assert driver.returncode == 0, (tmp_path / "driver.log").read_text()[-3000:]
    await until(lambda: not executors(), timeout=60, what="the executor pods deleted when the session stopped")

    # What the driver's ServiceAccount did, from the API server's audit log: all of it allowed
    # by the Role the operator renders, nothing refused.
    subject = f"system:serviceaccount:{api.ns}:{names.service_account}"
    calls = {(e["verb"], e["objectRef"]["resource"], e["responseStatus"]["code"])
             for e in api.cluster.audit(subject) if "objectRef" in e}
    refused = sorted((v, r) for v, r, code in calls if code == 403)
    # Refused on purpose: Spark's stop() deletes the Services labelled with its application id,
    # which exist only with spark.kubernetes.executor.enableService (never set here). Granting it
    # would let a driver delete every Service of its namespace; Spark logs the refusal and stops.
    assert refused in ([], [("deletecollection", "services")]), f"the driver's Role lacks: {refused}"
    assert {("create", "pods")} <= {(v, r) for v, r, _ in calls}
    for verb, res, code in calls:
        assert code == 403 or _rules_allow(desired.DRIVER_RULES, verb, res), (verb, res)
    print(f"\nSpark on Kubernetes: 2 executor pods (from the executor pod template) requested by the driver's ServiceAccount "
          f"{seconds:.1f} s after the driver started; its calls: {sorted({(v, r) for v, r, _ in calls})}")


@pytest.mark.timeout(300)
async def test_driver_and_executor_pods_are_admitted_where_pod_security_restricted_is_enforced(
        api, job, broker, topics, tmp_path):
    """#30 MED 6: in a namespace enforcing Pod Security `restricted` (as SECURITY.md recommends),
    the API server admits the driver pod (made by the StatefulSet controller from the operator's
    template) and the executor pods as Spark builds them (the operator's executor template plus
    what Spark adds), with and without a tenant's executor template. Spark adds no securityContext
    of its own: before, every executor pod was refused."""
    api.request("PATCH", f"/api/v1/namespaces/{api.ns}", {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}},
        content_type="application/merge-patch+json")
    pod, data, config = await operated_driver(api, job, broker, topics)
    spec = pod["spec"]
    # The ServiceAccount's token is in the driver's main container only, projected.
    assert spec["automountServiceAccountToken"] is False
    (main,) = [c for c in spec["containers"] if c["name"] == desired.DRIVER_CONTAINER]
    assert {"name": "sa-token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "readOnly": True} in main["volumeMounts"]

    driver = await start_driver(api, tmp_path, config, data)
    try:
        pods = await until(lambda: len(executor_pods(api)) == 2 and executor_pods(api), timeout=90,
                           what="two executor pods admitted under Pod Security restricted")
        for p in pods:
            assert p["spec"]["securityContext"]["runAsNonRoot"] is True
            (main,) = [c for c in p["spec"]["containers"] if c["name"] == desired.EXECUTOR_CONTAINER]
            assert main["securityContext"] == desired.CONTAINER_SECURITY
            assert p["spec"].get("automountServiceAccountToken") is False
    finally:
        driver.stdin.close()
        try:
            driver.wait(60)
        except subprocess.TimeoutExpired:
            driver.kill()
    refused = [e for e in api.request("GET", api.path("v1/events"))["items"]
               if "violates PodSecurity" in (e.get("message") or "")]
    assert not refused, [e["message"] for e in refused]
