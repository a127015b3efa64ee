"""Desired state: every object valid against the pinned Kubernetes schemas, least privilege,
the runtime reads the rendered config, no secrets in it, and what rolls the driver and what not."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from scorestream import naming
from scorestream.config import parse_job_config
from scorestream.operator import desired

# The oldest Kubernetes the chart supports (StatefulSet PVC retention GA, CEL in CRDs) and the newest.
K8S_VERSIONS = ["1.32.0", "1.37.0"]
EXAMPLE = yaml.safe_load((Path(__file__).resolve().parent.parent / "examples" / "wine-pmml.yaml").read_text())
EXAMPLE["metadata"]["uid"] = "0f6a6c0e-6a5e-4c40-9b53-0d1c7c1a0001"

VARIANTS = {
    "example": {},
    "no-secret": {"kafka": {**EXAMPLE["spec"]["kafka"], "secretRef": None}},
    "suspended": {"suspend": True},
    "storage-class": {"checkpoint": {"size": "20Gi", "storageClassName": "fast"}},
    "protobuf": {"input": {"format": "protobuf", "protobuf": {"messageType": "WineRecord"}}},
    "no-model": {"model": None},
}


def variant(name):
    body = copy.deepcopy(EXAMPLE)
    body["spec"].update(VARIANTS[name])
    return body


def objects(name="example", **kw):
    return desired.desired_objects(variant(name), **kw)


def by_kind(objs):
    return {o["kind"]: o for o in objs}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_object_is_valid_against_the_kubernetes_schema(name, version):
    for obj in objects(name):
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_validator_would_catch_a_mistake():
    sts = by_kind(objects())["StatefulSet"]
    sts["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, K8S_VERSIONS[-1], strict=True)


def test_role_grants_exactly_what_the_driver_uses():
    role = by_kind(objects())["Role"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete", "deletecollection", "get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "delete", "deletecollection", "get", "list"]},
    ]
    assert all("*" not in r["verbs"] and "*" not in r["resources"] for r in role["rules"])
    binding = by_kind(objects())["RoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "wine-driver", "namespace": "ml"}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_all_objects_are_owned_and_labelled():
    for obj in objects():
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["uid"] == EXAMPLE["metadata"]["uid"] and ref["controller"] is True
        assert obj["metadata"]["labels"]["scorestream.dev/modelserving"] == "wine"
        assert obj["metadata"]["namespace"] == "ml"


def test_the_runtime_reads_the_rendered_config_and_no_secret_is_in_it():
    cm = by_kind(objects())["ConfigMap"]
    config = parse_job_config(json.loads(cm["data"]["job.json"]))
    assert config.data_types == ["wine"]
    assert config.data_group == naming.data_group("ml", "wine") == "scorestream.ml.wine"
    assert config.kafka.secret_properties_file == "/etc/scorestream/kafka/client.properties"
    assert config.spark.conf["spark.kubernetes.driver.pod.name"] == "wine-driver-0"
    assert config.spark.conf["spark.executor.instances"] == "2"
    assert config.spark.master.startswith("k8s://")
    assert "password" not in cm["data"]["job.json"].lower()
    sts = by_kind(objects())["StatefulSet"]["spec"]
    mounts = {m["name"]: m for m in sts["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["kafka-client"]["mountPath"] == "/etc/scorestream/kafka"
    assert {"name": "kafka-client", "secret": {"secretName": "kafka-client",
            "items": [{"key": "client.properties", "path": "client.properties"}], "defaultMode": 0o440}} \
        in sts["template"]["spec"]["volumes"]


def test_driver_is_one_non_root_statefulset_pod_with_a_checkpoint_claim():
    sts = by_kind(objects())["StatefulSet"]["spec"]
    assert sts["replicas"] == 1 and sts["serviceName"] == "wine-driver"
    pod = sts["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["containers"][0]["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}
    assert sts["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert by_kind(objects())["Service"]["spec"]["clusterIP"] == "None"
    assert by_kind(objects("suspended"))["StatefulSet"]["spec"]["replicas"] == 0
    assert by_kind(objects(run=False))["StatefulSet"]["spec"]["replicas"] == 0


def _hash(body):
    sts = by_kind(desired.desired_objects(body))["StatefulSet"]
    return sts["spec"]["template"]["metadata"]["annotations"][desired.CONFIG_HASH_ANNOTATION]


def test_a_model_change_does_not_restart_the_driver_but_a_job_change_does():
    base = variant("example")
    model = copy.deepcopy(base)
    model["spec"]["model"]["version"] = "2"
    trigger = copy.deepcopy(base)
    trigger["spec"]["spark"]["triggerInterval"] = "5s"
    assert _hash(model) == _hash(base)
    assert _hash(trigger) != _hash(base)


def test_render_is_pure():
    assert objects() == objects()


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_network_policy_admits_only_the_jobs_pods_the_operator_and_monitoring(version):
    objs = by_kind(objects())
    policy = objs["NetworkPolicy"]
    kubernetes_validate.validate(policy, version, strict=True)
    own = {"scorestream.dev/modelserving": "wine"}
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": own} and spec["policyTypes"] == ["Ingress"]
    # Driver and executors carry the label the policy selects (executors by Spark's conf).
    assert own.items() <= objs["StatefulSet"]["spec"]["template"]["metadata"]["labels"].items()
    conf = parse_job_config(json.loads(objs["ConfigMap"]["data"]["job.json"])).spark.conf
    assert conf["spark.kubernetes.executor.label.scorestream.dev/modelserving"] == "wine"
    rules = {tuple(p["port"] for p in r.get("ports", [])): r["from"] for r in spec["ingress"]}
    assert rules[()] == [{"podSelector": {"matchLabels": own}}], "every port only for the job's own pods"
    assert rules[(desired.HTTP_PORT,)] == [{"namespaceSelector": {},
                                            "podSelector": {"matchLabels": desired.OPERATOR_POD_LABELS}}]
    assert rules[(desired.METRICS_PORT,)] == [{"namespaceSelector": {},
                                               "podSelector": {"matchLabels": desired.MONITORING_POD_LABELS}}]
    helpers = (Path(__file__).resolve().parent.parent / "charts" / "scorestream" / "templates" / "_helpers.tpl").read_text()
    assert "app.kubernetes.io/component: operator" in helpers, "the chart's operator pods carry the labels admitted"


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_control_token_is_a_secret_mounted_into_the_driver_and_in_no_configmap(version):
    meta = variant("example")["metadata"]
    secret = desired.control_secret(meta, "t0ken")
    kubernetes_validate.validate(secret, version, strict=True)
    assert secret["metadata"]["name"] == "wine-control" and secret["metadata"]["ownerReferences"][0]["uid"] == meta["uid"]
    objs = by_kind(objects())
    assert "Secret" not in objs, "random: made once by the operator, never rendered"
    pod = objs["StatefulSet"]["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "control")
    assert volume["secret"]["secretName"] == "wine-control"
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "control")
    config = parse_job_config(json.loads(objs["ConfigMap"]["data"]["job.json"]))
    assert config.http.control_token_file == f"{mount['mountPath']}/{desired.CONTROL_TOKEN_KEY}"
    assert config.http.metrics_port == desired.METRICS_PORT and config.http.port == desired.HTTP_PORT
    assert config.spark.conf["spark.authenticate"] == "true"
    assert "t0ken" not in json.dumps(list(objs.values()))
    probes = [pod["containers"][0][p]["httpGet"]["port"] for p in ("startupProbe", "livenessProbe", "readinessProbe")]
    assert probes == ["metrics"] * 3, "probes on the read-only port"
