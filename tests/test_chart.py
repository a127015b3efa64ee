"""The Helm chart, checked offline: lint, every mode rendered and valid against the Kubernetes
schemas, bad values refused by values.schema.json, and its RBAC audited against what the operator
really requests (recorded from a real operator run against the emulated API)."""

from __future__ import annotations

import asyncio
import base64
import subprocess
from pathlib import Path

import kubernetes_validate
import openapi_schema_validator
import pytest
import yaml

import helm as helm_tool
from scorestream.operator import crd as crd_module
from scorestream.operator import desired
from scorestream.operator.settings import OperatorConfig

from operator_harness import MS, NS, Operator, api, apply, obj, resource, topics, until  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "scorestream"
K8S_VERSION = "1.32"  # the oldest Kubernetes the CRD's CEL rules and the chart target (pinned)

MODES = {
    "default": [],
    "namespaced": ["--set", "watch.namespaces={ml,analytics}"],
    "cluster-wide": ["--set", "watch.allNamespaces=true"],
    "ha": ["--set", "replicaCount=3"],
    "ha-cluster-wide": ["--set", "replicaCount=2", "--set", "watch.allNamespaces=true",
                        "--set", "metrics.serviceMonitor.enabled=true"],
}


@pytest.fixture(scope="session")
def helm() -> Path:
    try:
        return helm_tool.ensure()
    except helm_tool.HelmUnavailable as e:
        pytest.fail(f"helm is part of the test setup (`make setup` fetches it): {e}")


def run_helm(helm, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=60)


def render(helm, *flags) -> list[dict]:
    res = run_helm(helm, "template", "ss", str(CHART), "--namespace", "operators", "--include-crds", *flags)
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def by_kind(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def test_lint_is_clean(helm):
    res = run_helm(helm, "lint", "--strict", str(CHART))
    assert res.returncode == 0 and "0 chart(s) failed" in res.stdout, res.stdout + res.stderr


def test_the_chart_ships_the_generated_crd():
    assert (CHART / "crds" / "modelserving.yaml").read_text() == crd_module.render(), \
        "charts/scorestream/crds/modelserving.yaml differs from `scorestream crd`: copy crds/modelserving.yaml"


def _peering_schema(kind):
    crds = list(yaml.safe_load_all((CHART / "crds" / "kopf-peering.yaml").read_text()))
    crd = next(c for c in crds if c["spec"]["names"]["kind"] == kind)
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_renders_valid_objects(helm, mode):
    objs = render(helm, *MODES[mode])
    for o in objs:
        if o["apiVersion"].startswith("kopf.dev/"):
            openapi_schema_validator.validate(o, _peering_schema(o["kind"]))
        elif o["kind"] == "ServiceMonitor":  # the Prometheus Operator's kind: no schema here
            assert o["spec"]["endpoints"][0]["port"] == "metrics"
        else:
            kubernetes_validate.validate(o, K8S_VERSION, strict=True)
    deployment = by_kind(objs, "Deployment")[0]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] and container["securityContext"]["readOnlyRootFilesystem"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # The operator reads the same typed configuration the chart renders.
    config = OperatorConfig.model_validate(yaml.safe_load(by_kind(objs, "ConfigMap")[0]["data"]["operator.yaml"]))
    roles, cluster_roles = by_kind(objs, "Role"), by_kind(objs, "ClusterRole")
    if "cluster-wide" in mode:
        assert config.all_namespaces and not roles and len(cluster_roles) == 1
    else:
        assert not cluster_roles and not by_kind(objs, "ClusterRoleBinding")
        assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(config.namespaces)
        assert config.namespaces == (["ml", "analytics"] if mode == "namespaced" else ["operators"])
    peerings = [o for o in objs if o["kind"] in ("KopfPeering", "ClusterKopfPeering")]
    if mode.startswith("ha"):
        assert config.peering == "scorestream" and deployment["spec"]["replicas"] > 1
        assert peerings and all(p["metadata"]["name"] == "scorestream" for p in peerings)
    else:
        assert config.peering is None and not peerings


@pytest.mark.parametrize("flags, message", [
    (["--set", "replicaCount=0"], "at '/replicaCount': minimum"),
    (["--set", "watch.allNamespaces=true", "--set", "watch.namespaces={ml}"], "at '/watch/namespaces': maxItems"),
    (["--set", "metrics.port=8080"], "at '/metrics/port'"),
    (["--set", "image.pullPolicy=Sometimes"], "at '/image/pullPolicy'"),
    (["--set", "watch.namespaces={Not_A_Namespace}"], "at '/watch/namespaces/0'"),
    (["--set", "operator.observeInterval=0"], "at '/operator/observeInterval'"),
    (["--set", "replicas=2"], "additional properties 'replicas' not allowed"),  # a typo of replicaCount
    (["--set", "resources.requests.memory=lots"], "at '/resources/requests/memory'"),
])
def test_bad_values_are_refused_with_a_message(helm, flags, message):
    res = run_helm(helm, "template", "ss", str(CHART), *flags)
    assert res.returncode != 0, f"accepted: {flags}"
    assert "values don't meet the specifications of the schema" in res.stderr and message in res.stderr, res.stderr


# --- RBAC audit ---------------------------------------------------------------------------------

def allowed(rules, verb, group, resource) -> bool:
    return any(verb in r["verbs"] and group in r["apiGroups"] and resource in r["resources"] for r in rules)


def granted(rules):
    return {(v, g, res) for r in rules for v in r["verbs"] for g in r["apiGroups"] for res in r["resources"]}


@pytest.mark.broker
@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["ha", "ha-cluster-wide"])
async def test_rbac_allows_every_call_the_operator_makes_and_nothing_it_does_not(api, broker, topics, helm, mode):
    objs = render(helm, *MODES[mode])
    rules = (by_kind(objs, "ClusterRole") or by_kind(objs, "Role"))[0]["rules"]
    config = OperatorConfig.model_validate(yaml.safe_load(by_kind(objs, "ConfigMap")[0]["data"]["operator.yaml"]))
    if not config.all_namespaces:
        config = config.model_copy(update={"namespaces": [NS]})  # the release namespace here
        api.objects["kopf.dev/v1/kopfpeerings", NS, "scorestream"] = {
            "apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "scorestream", "namespace": NS}}
    else:
        api.objects["kopf.dev/v1/clusterkopfpeerings", None, "scorestream"] = {
            "apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": "scorestream"}}
    config = config.model_copy(update={"observe_interval": 0.5, "endpoint_template": "http://127.0.0.1:9"})
    # Everything the operator does in a resource's life: a Secret for Kafka, a model to publish,
    # an update, a child deleted by someone else, status, events, peering.
    api.objects["v1/secrets", NS, "kafka-client"] = {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kafka-client", "namespace": NS},
        "data": {"client.properties": base64.b64encode(b"client.id=scorestream-audit\n").decode()}}
    from scorestream.demo.broker import create_topics

    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    op = Operator(api, config, token=api.AUDIT_TOKEN)
    await op.start()
    try:
        body = resource(topics, broker, model={"name": "wine-tree", "version": "1", "format": "pmml",
                                               "uri": "file:///models/tree.pmml"})
        body["spec"]["kafka"]["secretRef"] = {"name": "kafka-client"}
        await apply(api, body)
        await until(lambda: obj(api, "apps/v1/statefulsets", "wine-driver"), what="the driver StatefulSet")
        body["spec"]["spark"]["triggerInterval"] = "2s"  # a job change: the driver's template changes
        await apply(api, body)
        await until(lambda: (obj(api, MS, "wine").get("status") or {}).get("observedGeneration") == 2, what="gen 2")
        await api.kube.request("DELETE", f"/api/v1/namespaces/{NS}/configmaps/wine-job")
        await until(lambda: obj(api, "v1/configmaps", "wine-job"), what="the ConfigMap restored")
        # Children edited by someone else are patched back, whatever their kind.
        for api_path, key, name in [("api/v1", "v1/serviceaccounts", "wine-driver"), ("api/v1", "v1/services", "wine-driver"),
                                    ("apis/rbac.authorization.k8s.io/v1", "rbac.authorization.k8s.io/v1/roles", "wine-driver"),
                                    ("apis/rbac.authorization.k8s.io/v1", "rbac.authorization.k8s.io/v1/rolebindings", "wine-driver")]:
            plural = key.rsplit("/", 1)[1]
            label = next(k for k in obj(api, key, name)["metadata"]["labels"] if k != "app.kubernetes.io/managed-by")
            await api.kube.request("PATCH", f"/{api_path}/namespaces/{NS}/{plural}/{name}",
                                   {"metadata": {"labels": {label: "tampered"}}}, content_type="application/merge-patch+json")
            await until(lambda: obj(api, key, name)["metadata"]["labels"][label] != "tampered", what=f"{plural} restored")
        await asyncio.sleep(1.5)  # a few observer timers
    finally:
        await op.stop()

    calls = {c for c in api.audit if c[1] != "apiextensions.k8s.io"}
    denied = sorted(c for c in calls if not allowed(rules, *c))
    assert not denied, f"the chart's RBAC denies calls the operator makes: {denied}"
    # Kubernetes lets a subject create a Role only with permissions it holds: the driver's Role's.
    needed_to_grant = granted(desired.DRIVER_RULES)
    unused = sorted(granted(rules) - calls - needed_to_grant)
    assert not unused, f"the chart grants what the operator never uses: {unused}"


# --- examples -----------------------------------------------------------------------------------

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_is_valid(path):
    from admission import admit

    from scorestream.operator.spec import KIND, ModelServingSpec

    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs, f"{path.name} is empty"
    for doc in docs:
        if doc["kind"] == KIND:
            assert admit(doc, None) == [], f"{path.name}: refused by the CRD's schema and rules"
            ModelServingSpec.model_validate(doc["spec"])
            # ... and the operator renders valid objects for it (as the API server has it: with a uid).
            stored = {**doc, "metadata": {**doc["metadata"], "uid": "0f6a6c0e-6a5e-4c40-9b53-0d1c7c1a0002"}}
            for child in desired.desired_objects(stored):
                kubernetes_validate.validate(child, K8S_VERSION, strict=True)
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_examples_cover_pmml_tensorflow_a_canary_and_a_secret():
    kinds = {(d["kind"], (d.get("spec") or {}).get("model", {}).get("format"),
              ((d.get("spec") or {}).get("rollout") or {}).get("strategy"))
             for p in EXAMPLES for d in yaml.safe_load_all(p.read_text()) if d}
    assert ("ModelServing", "pmml", None) in kinds and ("ModelServing", "tensorflow", None) in kinds
    assert ("ModelServing", "pmml", "Canary") in kinds and ("Secret", None, None) in kinds
