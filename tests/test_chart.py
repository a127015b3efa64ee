"""The Helm chart, checked offline: lint, every mode rendered and valid against the Kubernetes
schemas, bad values refused by values.schema.json; and installed by helm into the tests' real API
server, its RBAC audited against what the operator really requests there (the API server's
audit log of an operator running with the release's ServiceAccount token)."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import time
from pathlib import Path

import kubernetes_validate
import pytest
import requests
import yaml

from scorestream import naming
from scorestream.operator import crd as crd_module
from scorestream.operator import desired
from scorestream.operator.settings import OperatorConfig
from scorestream.tools.local.broker import free_port

from harness.matrix import END
from harness.operator import MS, ApiError, Operator, apply, helm_install, obj, resource, tool, until

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


def run_helm(helm, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=60)


def render(helm, *flags, release="ss") -> list[dict]:
    res = run_helm(helm, "template", release, str(CHART), "--namespace", "operators", "--include-crds", *flags)
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def by_kind(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def test_lint_is_clean(helm):
    res = run_helm(helm, "lint", "--strict", str(CHART))
    assert res.returncode == 0 and "0 chart(s) failed" in res.stdout, res.stdout + res.stderr


def test_the_chart_ships_the_generated_crd():
    assert (CHART / "crds" / "modelserving.yaml").read_text() == crd_module.render(), \
        "charts/scorestream/crds/modelserving.yaml is stale: run `python -m scorestream.operator.crd --write`"


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_renders_valid_objects(helm, mode):
    objs = render(helm, *MODES[mode])
    for o in objs:
        assert not o["apiVersion"].startswith("kopf.dev/"), "kopf's peering is not used: a Lease elects the leader"
        if o["kind"] == "ServiceMonitor":  # the Prometheus Operator's kind: no schema here
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
    lease_roles = [r for r in by_kind(objs, "Role") if r["metadata"]["name"].endswith("-leader-election")]
    roles = [r for r in by_kind(objs, "Role") if r not in lease_roles]
    # The operator's own; not those for the namespaces' users (test_namespace_users_may_manage_...).
    cluster_roles = [r for r in by_kind(objs, "ClusterRole") if not any(
        k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in r["metadata"]["labels"])]
    assert desired.owner_reference({"name": "wine", "uid": "u"})["blockOwnerDeletion"]
    for role in roles + cluster_roles:
        assert BLOCK_OWNER_DELETION <= granted(role["rules"]), f"{role['metadata']}: children would be refused"
    if "cluster-wide" in mode:
        assert config.all_namespaces and not roles and len(cluster_roles) == 1
    else:
        assert not cluster_roles and not by_kind(objs, "ClusterRoleBinding")
        assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(config.namespaces)
        assert config.namespaces == (["ml", "analytics"] if mode == "namespaced" else ["operators"])
    if mode.startswith("ha"):
        assert config.leader_election is not None and deployment["spec"]["replicas"] > 1
        assert config.leader_election.lease_name == naming.OPERATOR_LEASE
        # The Lease's rights in the release namespace only; get and update of that one Lease.
        (lease_role,) = lease_roles
        assert lease_role["metadata"]["namespace"] == "operators"
        assert granted(lease_role["rules"]) == {(v, "coordination.k8s.io", "leases") for v in ("create", "get", "update")}
        assert all(r.get("resourceNames") == [naming.OPERATOR_LEASE] for r in lease_role["rules"] if "create" not in r["verbs"])
        assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    else:
        assert config.leader_election is None and not lease_roles


def test_runtime_image_allow_list_and_api_server_cidrs_reach_the_operators_config(helm):
    """The chart's values for the jobs (#15, #17) are the OperatorConfig fields the operator reads."""
    objs = render(helm, "--set", "runtimeImage=registry.example.com/scorestream/runtime:0.1.0",
                  "--set", "allowedImages={registry.example.com/scorestream/*,mirror.example.com/*}",
                  "--set", "jobNetworkPolicy.apiServerCIDRs={10.0.0.0/24,fd00::/64}")
    config = OperatorConfig.model_validate(yaml.safe_load(by_kind(objs, "ConfigMap")[0]["data"]["operator.yaml"]))
    assert config.runtime_image == "registry.example.com/scorestream/runtime:0.1.0"
    assert config.allowed_images == ["registry.example.com/scorestream/*", "mirror.example.com/*"]
    assert config.api_server_cidrs == ["10.0.0.0/24", "fd00::/64"]
    default = OperatorConfig.model_validate(yaml.safe_load(by_kind(render(helm), "ConfigMap")[0]["data"]["operator.yaml"]))
    assert (default.runtime_image, default.api_server_cidrs) == (None, [])


def test_a_fresh_install_runs_only_the_projects_own_images(helm):
    """#30 LOW: allowedImages defaults to the project's runtime images (any tag or digest), enforced by
    the operator and, through the ValidatingAdmissionPolicy, by the API server; an admin widens it."""
    from scorestream.api.v1alpha1.modelserving import ModelServingSpec
    from scorestream.operator import images

    from test_desired import EXAMPLE

    objs = render(helm)
    default = OperatorConfig.model_validate(yaml.safe_load(by_kind(objs, "ConfigMap")[0]["data"]["operator.yaml"]))
    assert by_kind(objs, "ValidatingAdmissionPolicy"), "enforced by the API server as well"

    def verdict(config, image):
        spec = ModelServingSpec.model_validate({**EXAMPLE["spec"], "spark": {**EXAMPLE["spec"]["spark"], "image": image}})
        return images.decide(spec, config.runtime_image, config.allowed_images)

    for ok in ("localhost/scorestream-runtime-pmml:0.1.0", "localhost/scorestream-runtime:0.1.0",
               "localhost/scorestream-runtime@sha256:" + "0" * 64):
        assert verdict(default, ok).image == ok
    for bad in ("docker.io/evil/miner:1", "localhost/scorestream-runtime-evil:1", "localhost/scorestream-runtime"):
        refused = verdict(default, bad)
        assert refused.image is None and f"{bad!r} not allowed" in refused.message
        assert "the chart's allowedImages" in refused.message
    widened = OperatorConfig.model_validate(yaml.safe_load(by_kind(
        render(helm, "--set", "allowedImages={registry.example.com/scorestream/*}"), "ConfigMap")[0]["data"]["operator.yaml"]))
    assert verdict(widened, "registry.example.com/scorestream/scorestream-runtime:1").image
    anything = render(helm, "--set-json", "allowedImages=[]")
    config = OperatorConfig.model_validate(yaml.safe_load(by_kind(anything, "ConfigMap")[0]["data"]["operator.yaml"]))
    assert verdict(config, "docker.io/evil/miner:1").image and not by_kind(anything, "ValidatingAdmissionPolicy")


def test_monitoring_peers_and_the_operators_namespace_reach_the_network_policy(helm):
    """#30 MED 7: scrapers by namespace and pod labels (configurable: Prometheus by default, Alloy
    here), the operator by its release namespace."""
    from scorestream.operator import desired as d

    from test_desired import EXAMPLE

    alloy = "jobNetworkPolicy.monitoring[0]"
    objs = render(helm, "--set", f"{alloy}.namespaceLabels.kubernetes\\.io/metadata\\.name=grafana",
                  "--set", f"{alloy}.podLabels.app\\.kubernetes\\.io/name=alloy")
    config = OperatorConfig.model_validate(yaml.safe_load(by_kind(objs, "ConfigMap")[0]["data"]["operator.yaml"]))
    assert config.operator_namespace == "operators"
    assert [(p.namespace_labels, p.pod_labels) for p in config.monitoring_peers] == [
        ({"kubernetes.io/metadata.name": "grafana"}, {"app.kubernetes.io/name": "alloy"})]
    default = OperatorConfig.model_validate(yaml.safe_load(by_kind(render(helm), "ConfigMap")[0]["data"]["operator.yaml"]))
    assert [(p.namespace_labels, p.pod_labels) for p in default.monitoring_peers] == [
        ({"kubernetes.io/metadata.name": "monitoring"}, {"app.kubernetes.io/name": "prometheus"})]
    policy = next(o for o in d.desired_objects(EXAMPLE, settings=d.Settings.of(config)) if o["kind"] == "NetworkPolicy")
    assert policy["spec"]["ingress"][1]["from"][0]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "operators"}}
    assert policy["spec"]["ingress"][2]["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "grafana"}},
                                                     "podSelector": {"matchLabels": {"app.kubernetes.io/name": "alloy"}}}]


def test_artifact_allowed_networks_reach_every_jobs_configuration(helm):
    """Chart value -> operator setting -> each job's ArtifactPolicy (#30): none by default."""
    from scorestream.config import JobConfig
    from scorestream.operator import desired

    from test_desired import EXAMPLE

    objs = render(helm, "--set", "artifacts.allowedNetworks={10.96.12.34/32}")
    config = OperatorConfig.model_validate(yaml.safe_load(by_kind(objs, "ConfigMap")[0]["data"]["operator.yaml"]))
    assert config.artifact_allowed_networks == ["10.96.12.34/32"]
    default = OperatorConfig.model_validate(yaml.safe_load(by_kind(render(helm), "ConfigMap")[0]["data"]["operator.yaml"]))
    assert default.artifact_allowed_networks == []

    def rendered(settings):
        objs = desired.desired_objects(EXAMPLE, settings=settings)
        job = JobConfig.model_validate_json(next(o for o in objs if o["kind"] == "ConfigMap")["data"]["job.json"])
        sts = next(o for o in objs if o["kind"] == "StatefulSet")
        return job.artifacts.allowed_networks, sts["spec"]["template"]["metadata"]["annotations"]

    allowed, annotations = rendered(desired.Settings.of(config))
    assert allowed == ["10.96.12.34/32"]
    assert rendered(desired.Settings.of(default)) == ([], annotations)  # the same configuration hash


DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@pytest.mark.parametrize("mode", MODES)
def test_names_and_labels_fit_with_the_longest_release_name(helm, mode):
    # The schemas do not check lengths; the API server does. Helm allows release names of 53.
    for o in render(helm, *MODES[mode], release="r" * 53):
        meta = o["metadata"]
        if o["kind"] == "Service":
            assert len(meta["name"]) <= 63 and DNS_1035_LABEL.match(meta["name"]), meta["name"]
        assert len(meta["name"]) <= 253
        for key, value in meta.get("labels", {}).items():
            assert len(value) <= 63 and LABEL_VALUE.match(value), f"{o['kind']} label {key}: {value}"


def test_watched_namespaces_are_created_only_when_asked_and_outlive_the_release(helm):
    # By default they must exist: the chart does not own namespaces that hold users' resources.
    assert not by_kind(render(helm, *MODES["namespaced"]), "Namespace")
    objs = render(helm, "--set", "watch.namespaces={ml,operators}", "--set", "watch.createNamespaces=true")
    namespaces = by_kind(objs, "Namespace")
    assert [n["metadata"]["name"] for n in namespaces] == ["ml"]  # not the release's own
    for n in namespaces:
        kubernetes_validate.validate(n, K8S_VERSION, strict=True)
        assert "namespace" not in n["metadata"] and n["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    kinds = [o["kind"] for o in objs]
    assert kinds.index("Namespace") < kinds.index("Role"), "helm installs in this order: the Roles need the namespace"


@pytest.mark.parametrize("flags, message", [
    (["--set", "replicaCount=0"], "at '/replicaCount': minimum"),
    (["--set", "watch.allNamespaces=true", "--set", "watch.namespaces={ml}"],
     "at '/watch/namespaces/0': value must be 'none: watch.allNamespaces=true watches every namespace; leave"
     " watch.namespaces empty, or set watch.allNamespaces=false'"),
    (["--set", "logLevel=verbose"], "at '/logLevel'"),
    (["--set", "extraEnv[0].value=x"], "at '/extraEnv/0': missing property 'name'"),
    (["--set", "fullnameOverride=Not_A_Name"], "at '/fullnameOverride'"),
    (["--set", "metrics.port=8080"], "at '/metrics/port'"),
    (["--set", "image.pullPolicy=Sometimes"], "at '/image/pullPolicy'"),
    (["--set", "watch.namespaces={Not_A_Namespace}"], "at '/watch/namespaces/0'"),
    (["--set", "operator.observeInterval=0"], "at '/operator/observeInterval'"),
    (["--set", "replicas=2"], "additional properties 'replicas' not allowed"),  # a typo of replicaCount
    (["--set", "resources.requests.memory=lots"], "at '/resources/requests/memory'"),
    (["--set", "jobNetworkPolicy.apiServerCIDRs={10.0.0.1}"], "at '/jobNetworkPolicy/apiServerCIDRs/0'"),
    (["--set", "allowedImages={}", "--set-json", 'allowedImages=[""]'], "at '/allowedImages/0'"),
    (["--set", "logFormat=xml"], "at '/logFormat'"),
    (["--set", "image.digest=latest"], "at '/image/digest'"),
    (["--set", "artifacts.maxFetchBytes=1000"], "at '/artifacts/maxFetchBytes'"),
    (["--set", "artifacts.fetchTimeoutSeconds=0"], "at '/artifacts/fetchTimeoutSeconds'"),
    (["--set", "extraVolumeMounts[0].name=ca"], "at '/extraVolumeMounts/0': missing property 'mountPath'"),
    (["--set", "topologySpreadConstraints[0].maxSkew=1"], "at '/topologySpreadConstraints/0'"),
    (["--set", "metrics.serviceMonitor.namespace=Not_A_Namespace"], "at '/metrics/serviceMonitor/namespace'"),
])
def test_bad_values_are_refused_with_a_message(helm, flags, message):
    res = run_helm(helm, "template", "ss", str(CHART), *flags)
    assert res.returncode != 0, f"accepted: {flags}"
    if END.tools.helm.startswith("v3."):
        message = helm3_wording(message)
    assert "values don't meet the specifications of the schema" in res.stderr and message in res.stderr, res.stderr


def helm3_wording(message: str) -> str:
    """The same refusal as Helm 3 words it (its JSON Schema library is another): the value's path
    dotted, or the property named (make test-compat runs the chart tests with Helm 3)."""
    if at := re.match(r"at '/([^']*)'", message):
        return f"- {at.group(1).replace('/', '.')}: "
    return re.sub(r"additional properties '(\w+)' not allowed", r"Additional property \1 is not allowed", message)


def test_operator_pod_settings_reach_the_deployment(helm):
    objs = render(helm, "--set", "logLevel=debug", "--set", "extraEnv[0].name=HTTPS_PROXY",
                  "--set", "extraEnv[0].value=http://proxy.example:3128", "--set", "podSecurityContext.runAsUser=1000640000",
                  "--set", "securityContext.readOnlyRootFilesystem=true", "--set", "resources.limits.memory=1Gi")
    pod = by_kind(objs, "Deployment")[0]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"][-2:] == ["--log-level", "debug"]
    assert {"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"} in container["env"]
    assert container["env"][0]["name"] == "POD_NAMESPACE"
    assert pod["securityContext"]["runAsUser"] == 1000640000 and pod["securityContext"]["runAsNonRoot"]
    assert container["resources"]["limits"]["memory"] == "1Gi"


def test_name_overrides(helm):
    names = {(o["kind"], o["metadata"]["name"]) for o in render(helm, "--set", "nameOverride=scoring", release="ml")}
    assert ("Deployment", "ml-scoring") in names and ("ServiceAccount", "ml-scoring") in names
    names = {(o["kind"], o["metadata"]["name"]) for o in render(helm, "--set", "fullnameOverride=ops", release="ml")}
    assert ("Deployment", "ops") in names and ("ConfigMap", "ops") in names


def _admits(selector: dict, labels: dict) -> bool:
    """Whether a NetworkPolicy peer's selector (matchLabels, matchExpressions In/Exists) selects `labels`."""
    ok = all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())
    for e in selector.get("matchExpressions", []):
        ok = ok and (e["key"] in labels if e["operator"] == "Exists" else labels.get(e["key"]) in e["values"])
    return ok


@pytest.mark.parametrize("flags", [["--set", "nameOverride=scoring", "--set", "podLabels.team=ml"],
                                   ["--set", "fullnameOverride=ops"]])
def test_every_jobs_network_policy_admits_the_operator_whatever_the_names(helm, flags):
    """nameOverride changes the operator pod's app.kubernetes.io/name; the policy each job gets
    (rendered by the operator's own desired state, with the chart's configuration) must still let
    the operator's pods, in the release namespace, reach the job's control port."""
    from test_desired import EXAMPLE

    objs = render(helm, *flags, release="ml")
    template = by_kind(objs, "Deployment")[0]["spec"]["template"]
    config = OperatorConfig.model_validate(yaml.safe_load(by_kind(objs, "ConfigMap")[0]["data"]["operator.yaml"]))
    policy = next(o for o in desired.desired_objects(EXAMPLE, settings=desired.Settings.of(config))
                  if o["kind"] == "NetworkPolicy")
    control = [r for r in policy["spec"]["ingress"] if {"protocol": "TCP", "port": naming.HTTP_PORT} in r.get("ports", [])]
    namespace_labels = {"kubernetes.io/metadata.name": "operators"}  # the API server sets it on every namespace
    assert any(_admits(peer["podSelector"], template["metadata"]["labels"])
               and _admits(peer["namespaceSelector"], namespace_labels) for r in control for peer in r["from"]), \
        (template["metadata"]["labels"], control)
    assert naming.OPERATOR_POD_LABELS.items() <= template["metadata"]["labels"].items()


def test_defaults_meet_pod_security_restricted_with_any_uid(helm):
    """The restricted profile's checks (kubernetes.io/docs/concepts/security/pod-security-standards),
    on the defaults; no UID is fixed, so a platform may assign any. The real API server's PodSecurity
    admission runs the same checks in tests/test_user_paths.py."""
    pod = by_kind(render(helm), "Deployment")[0]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert "runAsUser" not in pod["securityContext"] and "runAsGroup" not in pod["securityContext"]
    assert not any(k in pod for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert all("hostPath" not in v for v in pod.get("volumes", []))
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
        assert not sc.get("capabilities", {}).get("add") and not sc.get("privileged")
        assert "runAsUser" not in sc


def test_notes_name_the_namespace_in_every_command(helm):
    res = run_helm(helm, "install", "ss", str(CHART), "--dry-run=client", "-n", "operators",
                   "--set", "watch.namespaces={ml,analytics}")
    assert res.returncode == 0, res.stderr
    notes = res.stdout.split("NOTES:", 1)[1]
    commands = [line.strip() for line in notes.splitlines() if line.strip().startswith("kubectl")]
    assert commands and all(" -n " in c for c in commands), commands
    assert "kubectl wait -n ml --for=condition=Ready modelserving/wine" in notes


# --- RBAC audit ---------------------------------------------------------------------------------

# Not a call: the admission plugin OwnerReferencesPermissionEnforcement (on in the tests' API
# server, as in production clusters) refuses a child whose owner reference has blockOwnerDeletion
# unless its creator may do this to the owner.
BLOCK_OWNER_DELETION = {("update", "scorestream.dev", "modelservings/finalizers")}


# Reads on paths this scenario does not take: a status write refused as stale (409) reads the
# resource again; a child whose create conflicts with an object the watch cache does not hold is
# read to see whose it is. Everything else is read from the operator's watches.
RARE_READS = {("get", "scorestream.dev", "modelservings")} | {
    ("get", group, plural) for group, plural in [("", "configmaps"), ("", "serviceaccounts"), ("", "services"),
                                                 ("rbac.authorization.k8s.io", "roles"),
                                                 ("rbac.authorization.k8s.io", "rolebindings"),
                                                 ("apps", "statefulsets"), ("networking.k8s.io", "networkpolicies")]}

# A driver StatefulSet made anew, where an older operator rendered it otherwise than an update may
# change (tests/test_operator.py's restart test takes that path, with the chart's RBAC).
MADE_ANEW = {("delete", "apps", "statefulsets")}


def granted(rules):
    return {(v, g, res) for r in rules for v in r["verbs"] for g in r["apiGroups"] for res in r["resources"]}


def calls_of(kube, subject):
    """(verb, group, resource[/subresource]) of every request the subject made, and those refused."""
    calls, refused = set(), []
    for event in kube.audit(subject):
        ref = event.get("objectRef") or {}
        if not ref.get("resource"):
            continue  # discovery and health: every authenticated subject may
        call = (event["verb"], ref.get("apiGroup", ""), ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else ""))
        calls.add(call)
        if call[0] == "patch" and event.get("responseStatus", {}).get("code") == 201:
            calls.add(("create", *call[1:]))  # a server-side apply that created: authorized as create
        status = event.get("responseStatus", {})
        # A namespace being deleted refuses new content with 403 too; that says nothing of RBAC.
        if status.get("code") == 403 and "being terminated" not in status.get("message", ""):
            refused.append((*call, ref.get("namespace"), ref.get("name")))
    return calls, refused


# Rights granted on one object by name (resourceNames): asked about that object.
BY_NAME = {("get", "coordination.k8s.io", "leases"): naming.OPERATOR_LEASE,
           ("update", "coordination.k8s.io", "leases"): naming.OPERATOR_LEASE}


def can_i(kube, installation, verb, group, resource, namespace):
    name = BY_NAME.get((verb, group, resource))
    res = tool("kubectl", kube, "auth", "can-i", verb,
               f"{resource.split('/')[0]}{'.' + group if group else ''}" + (f"/{name}" if name else ""),
               *([f"--subresource={resource.split('/')[1]}"] if "/" in resource else []),
               f"--as={installation.subject}", "-n", namespace, check=False)
    return res.stdout.strip() == "yes"


@pytest.mark.broker
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["ha", "ha-cluster-wide"])
async def test_rbac_allows_every_call_the_operator_makes_and_nothing_it_does_not(api, broker, topics, helm, mode,
                                                                                tmp_path):
    release = f"audit-{api.ns}"
    flags = list(MODES[mode]) if mode != "ha" else [*MODES[mode], "--set", f"watch.namespaces={{{api.ns}}}"]
    # The test cluster runs no Prometheus operator, so it has no ServiceMonitor kind to install.
    pairs = [flags[i:i + 2] for i in range(0, len(flags), 2)]
    flags = [f for pair in pairs if not pair[1].startswith("metrics.serviceMonitor") for f in pair]
    installation = helm_install(api.cluster, tmp_path, release, api.ns, *flags)
    try:
        raw = api.request("GET", f"/api/v1/namespaces/{api.ns}/configmaps?labelSelector=app.kubernetes.io/instance={release}")
        config = OperatorConfig.model_validate(yaml.safe_load(raw["items"][0]["data"]["operator.yaml"]))
        # The chart's metrics port is the pod's own; here operators share one host.
        config = config.model_copy(update={"observe_interval": 0.5, "endpoint_template": "http://127.0.0.1:9",
                                           "metrics_port": free_port()})
        # Everything the operator does in a resource's life: a Secret for Kafka, a model to publish,
        # an update, a child deleted by someone else, status, events, the leader election's Lease.
        api.create("v1/secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kafka-client"},
                                  "data": {"client.properties": base64.b64encode(b"client.id=scorestream-audit\n").decode()}})
        from scorestream.tools.local.broker import create_topics

        create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
        op = Operator(api, config, kubeconfig=installation.kubeconfig)
        await op.start()
        try:
            body = resource(topics, broker, model={"name": "wine-tree", "version": "1", "format": "pmml",
                                                   "uri": "file:///models/tree.pmml"})
            body["spec"]["kafka"]["secretRef"] = {"name": "kafka-client"}
            # As an earlier version left it: kopf patches its finalizer away.
            body["metadata"]["finalizers"] = ["scorestream.dev/finalizer"]
            await apply(api, body)
            del body["metadata"]["finalizers"]
            await until(lambda: obj(api, "apps/v1/statefulsets", "wine-driver"), what="the driver StatefulSet")
            body["spec"]["spark"]["triggerInterval"] = "2s"  # a job change: the driver's template changes
            await apply(api, body)
            await until(lambda: (obj(api, MS, "wine").get("status") or {}).get("observedGeneration") == 2, what="gen 2")
            api.delete("v1/configmaps", "wine-job")
            await until(lambda: obj(api, "v1/configmaps", "wine-job"), what="the ConfigMap restored")
            # Children edited by someone else are patched back, whatever their kind.
            for key in ("v1/serviceaccounts", "v1/services", "rbac.authorization.k8s.io/v1/roles",
                        "rbac.authorization.k8s.io/v1/rolebindings"):
                label = next(k for k in obj(api, key, "wine-driver")["metadata"]["labels"] if k != "app.kubernetes.io/managed-by")
                api.patch(key, "wine-driver", {"metadata": {"labels": {label: "tampered"}}})
                await until(lambda: obj(api, key, "wine-driver")["metadata"]["labels"][label] != "tampered",
                            what=f"{key} restored")
            await asyncio.sleep(1.5)  # a few observer timers
        finally:
            await op.stop()

        calls, refused = calls_of(api.cluster, installation.subject)
        assert not refused, f"the API server refused the operator (the chart's RBAC lacks these): {refused}"
        rules = [r for kind in ("ClusterRole", "Role") for o in api.request(
            "GET", f"/apis/rbac.authorization.k8s.io/v1/{kind.lower()}s?labelSelector=app.kubernetes.io/instance={release}"
            ",!rbac.authorization.k8s.io/aggregate-to-edit")["items"]  # the operator's, not its users'

            for r in o["rules"]]
        # Kubernetes lets a subject create a Role only with permissions it holds: the driver's Role's.
        # KafkaTopics are made only for a spec with kafka.strimziTopics: tests/test_strimzi.py uses them.
        strimzi_topics = {(v, "kafka.strimzi.io", "kafkatopics") for v in ("get", "create", "patch")}
        unused = sorted(granted(rules) - calls - granted(desired.DRIVER_RULES) - BLOCK_OWNER_DELETION - strimzi_topics
                        - RARE_READS - MADE_ANEW)
        assert not unused, f"the chart grants what the operator never uses: {unused}"
        # kubectl's view of the same: every call allowed to the ServiceAccount, and a verb it was not given refused.
        answers = {call: can_i(api.cluster, installation, *call, api.ns) for call in sorted(calls)}
        assert all(answers.values()), {c: a for c, a in answers.items() if not a}
        assert not can_i(api.cluster, installation, "delete", "scorestream.dev", "modelservings", api.ns)
        # Secrets by name only (the Kafka Secret a resource names), never listed; outside the
        # watched namespaces not at all — cluster-wide mode watches every namespace, kube-system too.
        assert not can_i(api.cluster, installation, "list", "", "secrets", api.ns)
        assert can_i(api.cluster, installation, "get", "", "secrets", "kube-system") == (mode == "ha-cluster-wide")
        token = yaml.safe_load(installation.kubeconfig.read_text())["users"][0]["user"]["token"]
        r = requests.delete(api.cluster.server + api.path(MS, "wine"), headers={"Authorization": f"Bearer {token}"},
                            verify=str(api.cluster.dir / "ca.crt"))
        assert r.status_code == 403, r.text
        print(f"\nRBAC ({mode}): {len(calls)} kinds of call by {installation.subject}, each allowed by "
              f"`kubectl auth can-i`: " + ", ".join(f"{v} {r}{'.' + g if g else ''}" for v, g, r in sorted(calls)))
    finally:
        tool("helm", api.cluster, "uninstall", release, "-n", api.ns, "--wait")


# --- examples -----------------------------------------------------------------------------------

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_is_valid(path):
    from harness.admission import admit

    from scorestream.api.v1alpha1.modelserving import KIND, ModelServingSpec

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


def test_the_api_server_enforces_the_image_allow_list(api, helm):  # noqa: F811
    """#30 MED 5: the chart's ValidatingAdmissionPolicy, on the tests' real API server. A pod created
    with a driver's ServiceAccount token (what a taken-over driver or a sidecar holding the token
    would do) runs only allowed images, image volumes included; so does any pod of a ModelServing;
    other pods of the namespace are not its business."""
    release = f"vap-{api.ns[-6:]}"
    objs = render(helm, "--set", f"watch.namespaces={{{api.ns}}}",
                  "--set", "allowedImages={registry.example.com/scorestream/*}", release=release)
    policy = by_kind(objs, "ValidatingAdmissionPolicy") + by_kind(objs, "ValidatingAdmissionPolicyBinding")
    assert len(policy) == 2
    assert not by_kind(render(helm, "--set-json", "allowedImages=[]"), "ValidatingAdmissionPolicy")  # nothing to enforce
    sa = "wine-driver"
    api.create("v1/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}})
    api.create("rbac.authorization.k8s.io/v1/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "pods"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]})
    api.create("rbac.authorization.k8s.io/v1/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": api.ns}]})
    token = api.cluster.token(api.ns, sa)

    def pod(name, image, labels=None, volume=None):
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
                "spec": {"containers": [{"name": "c", "image": image}],
                         **({"volumes": [{"name": "v", "image": {"reference": volume}}]} if volume else {})}}

    def as_driver(body) -> requests.Response:
        return requests.post(f"{api.cluster.server}{api.path('v1/pods')}", json=body, timeout=30,
                             headers={"Authorization": f"Bearer {token}"}, verify=str(api.cluster.dir / "ca.crt"))

    plural = {"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
              "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}
    made = []
    try:
        for o in policy:
            made.append(api.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural[o['kind']]}", o))
        evil = "evil.example/miner:latest"
        # A policy takes effect a moment after it is created: until the first refusal, retried.
        end = time.monotonic() + 30
        while True:
            r = as_driver(pod(f"miner-{int(time.monotonic() * 1000)}", evil))
            if r.status_code != 201 or time.monotonic() > end:
                break
            api.delete("v1/pods", r.json()["metadata"]["name"])
            time.sleep(0.5)
        assert r.status_code in (403, 422) and f"{evil} not allowed by scorestream allowedImages" in r.text, r.text
        assert as_driver(pod("ok", "registry.example.com/scorestream/runtime:1")).status_code == 201
        r = as_driver(pod("vol", "registry.example.com/scorestream/runtime:1", volume=evil))
        if r.status_code == 201:  # ImageVolume is off on this API server: it drops the field, nothing is pulled
            assert not any("image" in v for v in r.json()["spec"]["volumes"])
        else:
            assert r.status_code in (403, 422) and evil in r.text, r.text
        with pytest.raises(ApiError, match="not allowed by scorestream allowedImages"):
            api.create("v1/pods", pod("labelled", evil, labels={"scorestream.dev/modelserving": "wine"}))
        # A ModelServing's pod updated to drop its label and change its image in one request: judged
        # by the label it had (#48 LOW, oldObject on UPDATE).
        allowed = "registry.example.com/scorestream/runtime:1"
        api.create("v1/pods", pod("was-labelled", allowed, labels={"scorestream.dev/modelserving": "wine"}))
        unlabelled = {"metadata": {"labels": {"scorestream.dev/modelserving": None}},
                      "spec": {"containers": [{"name": "c", "image": evil}]}}
        with pytest.raises(ApiError, match="not allowed by scorestream allowedImages"):
            api.request("PATCH", api.path("v1/pods", "was-labelled"), unlabelled,
                        content_type="application/strategic-merge-patch+json")
        api.create("v1/pods", pod("someone-elses", "docker.io/library/nginx:1"))  # not a scorestream pod
    finally:
        for o in reversed(made):
            api.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural[o['kind']]}/{o['metadata']['name']}",
                        ok_missing=True)


# --- the operator pod's and the release's knobs (as Strimzi's and the Flink operator's charts have) --


def test_operator_pod_knobs_reach_the_deployment(helm):
    digest = "sha256:" + "ab" * 32
    objs = render(helm, "--set", f"image.digest={digest}", "--set", "image.tag=ignored", "--set", "revisionHistoryLimit=3",
                  "--set-json", 'envFrom=[{"secretRef": {"name": "operator-proxy"}}]',
                  "--set-json", 'extraVolumes=[{"name": "ca", "configMap": {"name": "corporate-ca"}}]',
                  "--set-json", 'extraVolumeMounts=[{"name": "ca", "mountPath": "/etc/ssl/corporate", "readOnly": true}]',
                  "--set-json", 'topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",'
                                ' "whenUnsatisfiable": "ScheduleAnyway"}, {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname",'
                                ' "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"team": "ml"}}}]')
    deployment = by_kind(objs, "Deployment")[0]
    kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == f"localhost/scorestream-operator@{digest}"
    assert deployment["spec"]["revisionHistoryLimit"] == 3
    assert container["envFrom"] == [{"secretRef": {"name": "operator-proxy"}}]
    assert {"name": "ca", "configMap": {"name": "corporate-ca"}} in pod["volumes"]
    assert {"name": "ca", "mountPath": "/etc/ssl/corporate", "readOnly": True} in container["volumeMounts"]
    assert {v["name"] for v in pod["volumes"]} >= {"config", "tmp"}  # the chart's own stay
    own, given = pod["topologySpreadConstraints"]
    assert own["labelSelector"] == deployment["spec"]["selector"] and own["maxSkew"] == 1
    assert given["labelSelector"] == {"matchLabels": {"team": "ml"}}  # a selector given is kept
    default = by_kind(render(helm), "Deployment")[0]
    assert default["spec"]["revisionHistoryLimit"] == 10 and default["spec"]["template"]["spec"]["containers"][0]["image"] \
        == f"localhost/scorestream-operator:{yaml.safe_load((CHART / 'Chart.yaml').read_text())['appVersion']}"
    assert "envFrom" not in default["spec"]["template"]["spec"]["containers"][0]
    assert "topologySpreadConstraints" not in default["spec"]["template"]["spec"]


def test_a_pod_disruption_budget_keeps_one_operator_through_a_drain(helm):
    assert not by_kind(render(helm), "PodDisruptionBudget")
    objs = render(helm, "--set", "replicaCount=2", "--set", "podDisruptionBudget.enabled=true")
    pdb = by_kind(objs, "PodDisruptionBudget")[0]
    kubernetes_validate.validate(pdb, K8S_VERSION, strict=True)
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": by_kind(objs, "Deployment")[0]["spec"]["selector"]}
    pdb = by_kind(render(helm, "--set", "replicaCount=3", "--set", "podDisruptionBudget.enabled=true",
                        "--set", "podDisruptionBudget.minAvailable=2"), "PodDisruptionBudget")[0]
    assert pdb["spec"]["minAvailable"] == 2 and "maxUnavailable" not in pdb["spec"]
    res = run_helm(helm, "template", "ss", str(CHART), "--set", "podDisruptionBudget.enabled=true",
                   "--set", "podDisruptionBudget.minAvailable=1")
    assert res.returncode != 0 and "block every node drain" in res.stderr


def test_namespace_users_may_manage_modelservings_through_the_aggregated_roles(helm):
    roles = {r["metadata"]["name"]: r for r in by_kind(render(helm), "ClusterRole")}
    view, edit = roles["ss-scorestream-view"], roles["ss-scorestream-edit"]
    for role in (view, edit):
        kubernetes_validate.validate(role, K8S_VERSION, strict=True)
    aggregated = {name: {k.rsplit("-", 1)[1] for k, v in r["metadata"]["labels"].items()
                         if k.startswith("rbac.authorization.k8s.io/aggregate-to-") and v == "true"} for name, r in roles.items()}
    assert aggregated["ss-scorestream-view"] == {"view", "edit", "admin"}
    assert aggregated["ss-scorestream-edit"] == {"edit", "admin"}
    assert granted(view["rules"]) >= {(v, "scorestream.dev", "modelservings") for v in ("get", "list", "watch")}
    assert granted(edit["rules"]) >= {(v, "scorestream.dev", "modelservings") for v in ("create", "update", "patch", "delete")}
    assert not any(res == "modelservings/status" and verb not in ("get", "list", "watch")
                   for verb, _, res in granted(view["rules"]) | granted(edit["rules"])), "status is the operator's"
    assert not by_kind(render(helm, "--set", "rbac.aggregateToViewEdit=false"), "ClusterRole")


def test_the_service_monitor_namespace_interval_and_relabelings(helm):
    on = ["--set", "metrics.serviceMonitor.enabled=true"]
    default = by_kind(render(helm, *on), "ServiceMonitor")[0]
    assert default["metadata"]["namespace"] == "operators" and "namespaceSelector" not in default["spec"]
    assert default["spec"]["endpoints"][0]["interval"] == "30s" and "relabelings" not in default["spec"]["endpoints"][0]
    relabel = {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}
    monitor = by_kind(render(helm, *on, "--set", "metrics.serviceMonitor.namespace=monitoring",
                             "--set", "metrics.serviceMonitor.interval=15s",
                             "--set-json", f"metrics.serviceMonitor.relabelings=[{json.dumps(relabel)}]"), "ServiceMonitor")[0]
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["operators"]}  # where the Service is
    assert monitor["spec"]["endpoints"][0]["interval"] == "15s"
    assert monitor["spec"]["endpoints"][0]["relabelings"] == [relabel]


def test_log_format_and_artifact_limits_reach_the_operators_config(helm):
    import kopf

    def config(*flags):
        objs = render(helm, *flags)
        return OperatorConfig.model_validate(yaml.safe_load(by_kind(objs, "ConfigMap")[0]["data"]["operator.yaml"]))

    default = config()
    assert default.log_format == "text" and default.kopf_logging()["log_format"] is kopf.LogFormat.FULL
    assert (default.artifact_max_fetch_bytes, default.artifact_fetch_timeout_seconds) == (512 << 20, 120)
    given = config("--set", "logFormat=json", "--set", "artifacts.maxFetchBytes=2147483648",
                   "--set", "artifacts.fetchTimeoutSeconds=600")
    assert given.kopf_logging()["log_format"] is kopf.LogFormat.JSON
    assert (given.artifact_max_fetch_bytes, given.artifact_fetch_timeout_seconds) == (2 << 30, 600)


def test_the_oldest_kubernetes_the_chart_allows_takes_every_object_and_the_docs_say_so(helm):
    """Chart.yaml's kubeVersion is the oldest minor whose API has every kind the chart renders (the
    default image policy is a v1 ValidatingAdmissionPolicy, GA in 1.30), and the install page names it."""
    minimum = re.fullmatch(r">=1\.(\d+)\.0-0", yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"])
    assert minimum, "kubeVersion: >=1.N.0-0"
    minor = int(minimum.group(1))
    objs = [o for o in render(helm, "--set", "replicaCount=2", "--set", "podDisruptionBudget.enabled=true")
            if o["kind"] != "ServiceMonitor"]
    for o in objs:
        kubernetes_validate.validate(o, f"1.{minor}", strict=True)
    with pytest.raises((kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError)):  # no such kind yet
        kubernetes_validate.validate(by_kind(objs, "ValidatingAdmissionPolicy")[0], f"1.{minor - 1}", strict=True)
    assert f"Kubernetes 1.{minor} or later" in (REPO / "docs" / "operations" / "install.md").read_text()


def test_artifact_limits_reach_every_jobs_configuration(helm):
    """Chart value -> operator setting -> each job's ArtifactPolicy, as artifacts.allowedNetworks does."""
    from scorestream.config import JobConfig

    from test_desired import EXAMPLE

    objs = render(helm, "--set", "artifacts.maxFetchBytes=2147483648", "--set", "artifacts.fetchTimeoutSeconds=600")
    config = OperatorConfig.model_validate(yaml.safe_load(by_kind(objs, "ConfigMap")[0]["data"]["operator.yaml"]))
    rendered = desired.desired_objects(EXAMPLE, settings=desired.Settings.of(config))
    job = JobConfig.model_validate_json(next(o for o in rendered if o["kind"] == "ConfigMap")["data"]["job.json"])
    assert (job.artifacts.max_fetch_bytes, job.artifacts.fetch_timeout_seconds) == (2 << 30, 600)
