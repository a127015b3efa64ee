"""What users run, against the tests' real control plane (tests/harness/cluster.py): `helm install`,
`upgrade` and `uninstall` of the chart in both watch modes; `kubectl apply` of every example; the
real API server's admission refusing every invalid resource the offline admission test generates;
`kubectl get`, `explain`, `wait`, `scale` and `delete` on a ModelServing that an operator (a
process with the chart's ServiceAccount token) runs, with the job's stand-in behind it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from scorestream.tools.local.broker import create_topics
from scorestream.operator import crd

from harness.operator import (CLUSTER, MS, ApiError, Operator, apply, condition, driver_pod, events, obj, helm_install, operator_config, resource, tool, until)
from test_crd import INVALID_CASES, invalid_case

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "scorestream"
# What a release may leave behind, by kind: (path of the collection across namespaces, kind)
RELEASE_KINDS = [
    "/apis/apps/v1/deployments", "/api/v1/serviceaccounts", "/api/v1/configmaps", "/api/v1/services",
    "/apis/rbac.authorization.k8s.io/v1/roles", "/apis/rbac.authorization.k8s.io/v1/rolebindings",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "/api/v1/pods",
]


def left_by(kube, release: str) -> list[str]:
    found = []
    for path in RELEASE_KINDS:
        items = kube.request("GET", f"{path}?labelSelector=app.kubernetes.io/instance={release}")["items"]
        found += [f"{path.rsplit('/', 1)[-1]}/{i['metadata']['name']}" for i in items
                  if not i["metadata"].get("deletionTimestamp")]
    return found


def operator_ready(api, release: str, replicas: int, timeout: float = 60.0) -> dict:
    """The release's operator Deployment, once it reports `replicas` ready. helm's --wait saw it ready;
    once (one full run in four, another test file beside it) the status read just after said
    otherwise, so it is read until it agrees, and a failure shows the pod's and the node's
    conditions."""
    selector = f"?labelSelector=app.kubernetes.io/instance={release}"
    deadline = time.monotonic() + timeout
    while True:
        (deployment,) = api.request("GET", api.path("apps/v1/deployments") + selector)["items"]
        if deployment["status"].get("readyReplicas") == replicas:
            return deployment
        if time.monotonic() > deadline:
            pods = api.request("GET", api.path("v1/pods") + selector)["items"]
            nodes = api.request("GET", "/api/v1/nodes")["items"]
            raise AssertionError(
                f"deployment status {deployment['status']}; pods "
                f"{[(p['metadata']['name'], p['spec'].get('nodeName'), p['status'].get('conditions')) for p in pods]}; "
                f"nodes {[(n['metadata']['name'], [c for c in n['status'].get('conditions', []) if c['type'] == 'Ready']) for n in nodes]}")
        time.sleep(1)


def kubectl(api, *args: str, check: bool = True):
    return tool("kubectl", api.cluster, *args, check=check)


@pytest.mark.parametrize("mode", ["namespaced", "cluster-wide"])
def test_helm_install_upgrade_and_uninstall_leave_nothing_but_the_crd(api, tmp_path, mode):
    release = f"{mode[:2]}-{api.ns}"
    watched = f"{api.ns}-w"
    flags = (["--set", f"watch.namespaces={{{api.ns},{watched}}}", "--set", "watch.createNamespaces=true"]
             if mode == "namespaced" else ["--set", "watch.allNamespaces=true"])
    api.extra.append(watched)
    tool("helm", api.cluster, "install", release, str(CHART), "-n", api.ns, "--wait", "--timeout", "5m", *flags)
    operator_ready(api, release, 1)  # its pod is scheduled onto a kwok node and runs
    roles = {(r["metadata"]["namespace"]) for r in api.request(
        "GET", f"/apis/rbac.authorization.k8s.io/v1/roles?labelSelector=app.kubernetes.io/instance={release}")["items"]}
    # The operator's own: not the roles that view, edit and admin aggregate for a namespace's users
    # (rbac.aggregateToViewEdit), which grant nothing until a namespace's RoleBinding does.
    cluster_roles = api.request(
        "GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles?labelSelector=app.kubernetes.io/instance={release}"
        ",!rbac.authorization.k8s.io/aggregate-to-edit")["items"]
    if mode == "namespaced":
        assert roles >= {api.ns, watched} and obj(api, "v1/namespaces", watched, namespace=CLUSTER)
        assert not any("modelservings" in json.dumps(r.get("rules")) for r in cluster_roles), \
            "namespaced mode grants nothing on ModelServings cluster-wide"
    else:
        assert any("modelservings" in json.dumps(r.get("rules")) for r in cluster_roles)

    tool("helm", api.cluster, "upgrade", release, str(CHART), "-n", api.ns, "--reuse-values",
         "--set", "replicaCount=2", "--wait", "--timeout", "5m")
    history = json.loads(tool("helm", api.cluster, "history", release, "-n", api.ns, "-o", "json").stdout)
    assert [h["status"] for h in history] == ["superseded", "deployed"]
    assert operator_ready(api, release, 2)["spec"]["replicas"] == 2

    tool("helm", api.cluster, "uninstall", release, "-n", api.ns, "--wait", "--timeout", "5m")
    assert left_by(api.cluster, release) == []
    assert api.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd.generate()['metadata']['name']}")
    if mode == "namespaced":  # kept, with whatever ModelServings it holds (helm.sh/resource-policy: keep)
        assert obj(api, "v1/namespaces", watched, namespace=CLUSTER)


def test_kubectl_apply_of_every_example_then_get_and_explain(api):
    api.namespace("ml")  # the examples' namespace
    api.extra.append("ml")
    applied = kubectl(api, "apply", "-f", str(REPO / "examples")).stdout
    assert "secret/kafka-client created" in applied
    assert "modelserving.scorestream.dev/wine created" in applied
    assert "modelserving.scorestream.dev/wine configured" in applied  # the canary, then the plain PMML
    assert "modelserving.scorestream.dev/wine-tf created" in applied
    assert "modelserving.scorestream.dev/wine-private created" in applied  # with pod templates
    assert "modelserving.scorestream.dev/wine-realtime created" in applied  # spark.trigger realTime
    assert obj(api, MS, "wine", namespace="ml")["spec"]["model"]["name"] == "wine-tree"

    columns = [c["name"].upper() for c in crd.generate()["spec"]["versions"][0]["additionalPrinterColumns"]]
    table = kubectl(api, "get", "modelservings", "-n", "ml").stdout.splitlines()
    assert table[0].split() == ["NAME", *columns]
    assert sorted(line.split()[0] for line in table[1:]) == ["wine", "wine-private", "wine-realtime", "wine-tf"]
    assert kubectl(api, "get", "ms", "-n", "ml", "-o", "name").stdout.split() == [
        "modelserving.scorestream.dev/wine", "modelserving.scorestream.dev/wine-private",
        "modelserving.scorestream.dev/wine-realtime", "modelserving.scorestream.dev/wine-tf"]
    # Not in `all`: `kubectl delete all --all` must leave the serving jobs alone.
    assert "modelserving" not in kubectl(api, "get", "all", "-n", "ml", "-o", "name").stdout

    explained = kubectl(api, "explain", "modelserving.spec.model").stdout
    described = crd.generate()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["model"]
    assert " ".join(described["description"].split())[:60] in " ".join(explained.split())
    for field in ("name", "version", "format", "uri"):
        assert f"\n    {field}\t" in explained or f"\n  {field}\t" in explained, explained


@pytest.fixture(scope="module")
def existing(kube, installed):
    """A namespace with the example resource in it, for the update cases (dry runs change nothing)."""
    ns = "admission"
    kube.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    body = yaml.safe_load((REPO / "examples" / "wine-pmml.yaml").read_text())
    body["metadata"]["namespace"] = ns
    created = kube.request("POST", f"/apis/{body['apiVersion']}/namespaces/{ns}/{crd.generate()['spec']['names']['plural']}", body)
    yield kube, ns, created
    kube.request("DELETE", f"/api/v1/namespaces/{ns}", ok_missing=True)


def test_the_api_server_refuses_every_invalid_resource_naming_the_field(existing):
    """The offline admission test's 250 cases, each sent to the real API server (dry run)."""
    kube, ns, created = existing
    plural = crd.generate()["spec"]["names"]["plural"]
    refused_all: list[str] = []  # counted here: a case filtered out by Hypothesis is no case

    @INVALID_CASES
    @given(st.data())
    def case(data):
        body, old, kind, word = invalid_case(data)
        body["metadata"]["namespace"] = ns
        collection = f"/apis/{body['apiVersion']}/namespaces/{ns}/{plural}"
        try:
            if old is None:
                kube.request("POST", f"{collection}?dryRun=All", body)
            else:  # an update of the existing resource, as `kubectl apply` of an edited file
                body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
                kube.request("PUT", f"{collection}/{created['metadata']['name']}?dryRun=All", body)
        except ApiError as refused:
            assert refused.status in (400, 422), refused
            assert word in str(refused), f"{kind}: {refused}"
            refused_all.append(str(refused))
            return
        raise AssertionError(f"the API server admitted a {kind} case: {body['metadata']} {body['spec']}")

    case()
    assert len(refused_all) == 250


@pytest.mark.broker
async def test_kubectl_wait_scale_and_delete_on_a_running_resource(api, job, broker, topics, tmp_path):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 4})
    op = Operator(api, operator_config(api, observeInterval=0.5, endpointTemplate=job.url))
    await op.start()

    async def run(*args: str, check: bool = True):
        # In a thread: this loop serves the job's stand-in, which the operator reads meanwhile.
        return await asyncio.to_thread(kubectl, api, *args, check=check)

    try:
        body = resource(topics, broker)
        body["metadata"]["namespace"] = api.ns
        manifest = tmp_path / "wine.yaml"
        manifest.write_text(yaml.safe_dump(body))
        assert "modelserving.scorestream.dev/wine created" in (await run("apply", "-f", str(manifest))).stdout
        pod = await driver_pod(api)  # made by the StatefulSet controller, run by kwok
        assert pod["spec"]["nodeName"] == "kwok-node-0"
        for condition in ("Ready", "ModelReady"):
            waited = await run("wait", f"--for=condition={condition}", "modelserving/wine", "-n", api.ns, "--timeout=60s")
            assert "condition met" in waited.stdout

        await run("scale", "modelserving/wine", "--replicas=3", "-n", api.ns)
        await until(lambda: 3 in job.asked, timeout=30, what="the job asked for 3 executors")
        job.executors = 3  # the job's scheduler got them
        await until(lambda: (obj(api, MS, "wine").get("status") or {}).get("replicas") == 3, timeout=30,
                    what="status.replicas 3")
        shown = await run("get", "modelserving/wine", "-n", api.ns, "-o", "jsonpath={.spec.replicas} {.status.replicas}")
        assert shown.stdout == "3 3"

        await run("delete", "modelserving/wine", "-n", api.ns, "--wait", "--timeout=60s")
        # The real garbage collector takes the children (owner references), the pod with its StatefulSet.
        selector = "scorestream.dev/modelserving=wine"
        await until(lambda: kubectl(api, "get", "statefulsets,services,configmaps,serviceaccounts,roles,rolebindings,pods",
                                    "-n", api.ns, "-l", selector, "-o", "name").stdout.strip() == "",
                    timeout=60, what="the children collected")
    finally:
        await op.stop()


RUNTIME = "registry.example.com/scorestream/scorestream-runtime:0.1.0"


@pytest.mark.broker
async def test_pod_templates_the_default_image_and_the_allow_list_on_the_real_api_server(api, job, broker, topics):
    """#17 and #15 through the operator: a resource naming no image runs the operator's default,
    with its driver template in the StatefulSet and on the pod kwok runs (a sidecar, labels, an
    annotation, a pull secret, a nodeSelector and a toleration), the image the template names for
    the main container overridden; a resource naming an image outside allowedImages gets nothing
    created, Degraded=True ImageNotAllowed and an Event, and runs once its image is allowed."""
    create_topics(broker.bootstrap, {topics["dataTopic"]: 2})
    op = Operator(api, operator_config(api, observeInterval=0.5, endpointTemplate=job.url, runtimeImage=RUNTIME,
                                       allowedImages=["registry.example.com/scorestream/*"]))
    await op.start()
    try:
        template = {
            "metadata": {"labels": {"team": "fraud"}, "annotations": {"example.com/owner": "fraud-team"}},
            "spec": {
                "imagePullSecrets": [{"name": "registry-example-com"}],
                "nodeSelector": {"type": "kwok"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "streaming", "effect": "NoSchedule"}],
                "containers": [
                    {"name": "driver", "image": "docker.io/evil/miner:1", "env": [{"name": "TZ", "value": "UTC"}]},
                    {"name": "log-shipper", "image": "registry.example.com/scorestream/log-shipper:1"},
                ],
            },
        }
        body = resource(topics, broker, driver={"podTemplate": template})
        del body["spec"]["spark"]["image"]
        await apply(api, body)
        pod = await driver_pod(api)
        sts = obj(api, "apps/v1/statefulsets", "wine-driver")
        for where in (sts["spec"]["template"], pod):
            assert where["metadata"]["labels"]["team"] == "fraud"
            assert where["metadata"]["labels"]["scorestream.dev/modelserving"] == "wine"
            assert where["metadata"]["annotations"]["example.com/owner"] == "fraud-team"
            spec = where["spec"]
            assert spec["imagePullSecrets"] == [{"name": "registry-example-com"}]
            assert spec["nodeSelector"] == {"type": "kwok"} and template["spec"]["tolerations"][0] in spec["tolerations"]
            assert [(c["name"], c["image"]) for c in spec["containers"]] == [
                ("driver", RUNTIME), ("log-shipper", "registry.example.com/scorestream/log-shipper:1")]
            assert {"name": "TZ", "value": "UTC"} in spec["containers"][0]["env"]
            assert spec["serviceAccountName"] == "wine-driver"
        assert pod["spec"]["nodeName"] == "kwok-node-0"
        conf = json.loads(obj(api, "v1/configmaps", "wine-job")["data"]["job.json"])["spark"]["conf"]
        assert conf["spark.kubernetes.container.image"] == RUNTIME
        assert (obj(api, MS, "wine")["spec"]["spark"].get("image")) is None  # the spec is the user's, untouched
        # The rendered template is what the server keeps: the observer's drift checks find nothing to repair.
        await asyncio.sleep(2)
        assert not [e for e in events(api, "DriftRepaired") if e["involvedObject"]["name"] == "wine"]

        bad = resource(topics, broker, name="wine-bad")
        bad["spec"]["spark"]["image"] = "docker.io/evil/miner:1"
        await apply(api, bad)
        degraded = await until(lambda: (c := condition(api, "wine-bad", "Degraded")).get("reason") == "ImageNotAllowed"
                               and c, timeout=30, what="wine-bad Degraded: ImageNotAllowed")
        assert degraded["status"] == "True" and "docker.io/evil/miner:1" in degraded["message"]
        assert condition(api, "wine-bad", "Ready")["status"] == "False"
        await until(lambda: any(e["involvedObject"]["name"] == "wine-bad" and e["type"] == "Warning"
                                for e in events(api, "ImageNotAllowed")), timeout=30, what="the ImageNotAllowed Event")
        assert obj(api, "apps/v1/statefulsets", "wine-bad-driver") is None
        assert obj(api, "v1/configmaps", "wine-bad-job") is None

        bad["spec"]["spark"]["image"] = "registry.example.com/scorestream/scorestream-runtime:0.2.0"
        await apply(api, bad)
        await until(lambda: obj(api, "apps/v1/statefulsets", "wine-bad-driver"), timeout=30,
                    what="wine-bad's StatefulSet once its image is allowed")
    finally:
        await op.stop()


@pytest.mark.broker
async def test_helm_uninstall_leaves_no_modelserving_stuck(api, broker, topics, tmp_path):
    """helm install, kubectl apply, helm uninstall, then kubectl delete of the ModelServings returns
    at once: no finalizer waits for an operator that is gone. A resource carrying the finalizer an
    earlier version put on has it removed by this operator."""
    release = f"un-{api.ns}"
    installation = helm_install(api.cluster, tmp_path, release, api.ns, "--set", f"watch.namespaces={{{api.ns}}}")
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    # The release's operator: a process with its ServiceAccount's token (kwok runs no container).
    op = Operator(api, operator_config(api, observeInterval=0.5), kubeconfig=installation.kubeconfig)
    await op.start()
    try:
        earlier = resource(topics, broker, name="earlier")
        earlier["metadata"]["finalizers"] = ["scorestream.dev/finalizer"]
        await apply(api, earlier)
        await apply(api, resource(topics, broker))
        await until(lambda: obj(api, "apps/v1/statefulsets", "wine-driver"), what="the driver's StatefulSet")
        await until(lambda: not obj(api, MS, "earlier")["metadata"].get("finalizers"), timeout=30,
                    what="the earlier version's finalizer removed")
        assert not obj(api, MS, "wine")["metadata"].get("finalizers")
    finally:
        await op.stop()  # helm uninstall takes the operator's pod: here its process
    tool("helm", api.cluster, "uninstall", release, "-n", api.ns, "--wait", "--timeout", "5m")
    started = time.monotonic()
    deleted = await asyncio.to_thread(kubectl, api, "delete", "ms", "wine", "earlier", "-n", api.ns, "--timeout=60s")
    took = time.monotonic() - started
    print(f"kubectl delete ms after helm uninstall: {took:.1f} s")
    assert 'modelserving.scorestream.dev "wine" deleted' in deleted.stdout
    assert took < 30
    assert obj(api, MS, "wine") is None and obj(api, MS, "earlier") is None


def test_chart_runs_under_pod_security_restricted_with_a_random_uid(api, tmp_path):
    """The operator's pod is admitted by the API server's PodSecurity admission in a namespace
    enforcing `restricted`, with a UID as OpenShift's restricted-v2 assigns one (random, high)."""
    import random

    namespace = f"{api.ns}-rs"
    api.extra.append(namespace)
    api.cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "restricted",
                                      "pod-security.kubernetes.io/enforce-version": "latest"}}})
    uid = random.randint(1_000_000_000, 2_000_000_000)
    release = f"rs-{api.ns}"
    tool("helm", api.cluster, "install", release, str(CHART), "-n", namespace, "--wait", "--timeout", "5m",
         "--set", f"podSecurityContext.runAsUser={uid}", "--set", f"podSecurityContext.fsGroup={uid}")
    try:
        selector = f"?labelSelector=app.kubernetes.io/instance={release}"
        (pod,) = api.cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods{selector}")["items"]
        assert pod["spec"]["securityContext"]["runAsUser"] == uid
        # The same pod with a root UID is refused there: the namespace really enforces `restricted`.
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
                 "spec": {**pod["spec"], "securityContext": {**pod["spec"]["securityContext"], "runAsUser": 0}}}
        with pytest.raises(ApiError) as refused:
            api.cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", probe)
        assert "violates PodSecurity" in str(refused.value)
    finally:
        tool("helm", api.cluster, "uninstall", release, "-n", namespace, "--wait", "--timeout", "5m")
