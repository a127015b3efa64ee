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
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.config import parse_job_config
from scorestream.operator import desired, images, podtemplate

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
    "pod-templates": {k: v for k, v in yaml.safe_load(
        (Path(__file__).resolve().parent.parent / "examples" / "wine-pod-templates.yaml").read_text())["spec"].items()
        if k in ("driver", "executor")},
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
    # strict: a misspelt or misplaced field is an error here, where the API server would drop it
    # or refuse the apply. The executor pod template Spark reads from the ConfigMap is a Pod too.
    objs = objects(name)
    for obj in objs:
        kubernetes_validate.validate(obj, version, strict=True)
    executor_pod = yaml.safe_load(by_kind(objs)["ConfigMap"]["data"][desired.EXECUTOR_TEMPLATE_KEY])
    kubernetes_validate.validate(executor_pod, version, strict=True)


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


def test_the_driver_statefulset_replaces_a_pod_that_is_not_ready_and_an_older_one_is_made_anew():
    sts = by_kind(objects())["StatefulSet"]
    # Under OrderedReady, a pod that is not ready is never replaced by a template change.
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    served = copy.deepcopy(sts)  # as the API server holds it: its defaults added
    served["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert desired.immutable_changes(served, sts) == []
    served["spec"]["template"]["metadata"]["annotations"]["x"] = "a template change is an update"
    assert desired.immutable_changes(served, sts) == []
    served["spec"]["podManagementPolicy"] = "OrderedReady"  # as operator 0.1.0 rendered it
    assert desired.immutable_changes(served, sts) == ["podManagementPolicy"]


def _hash(body):
    sts = by_kind(desired.desired_objects(body))["StatefulSet"]
    return sts["spec"]["template"]["metadata"]["annotations"][naming.CONFIG_HASH_ANNOTATION]


# The configuration hashes of drivers running today. An operator whose rendering changes one rolls
# every such driver when it is upgraded: change them on purpose only, said in CHANGELOG.md.
PINNED_HASHES = {"example": "6617b63b44d1c992", "no-secret": "8ff074b2388055eb", "suspended": "6617b63b44d1c992",
                 "storage-class": "6617b63b44d1c992", "protobuf": "83bb89b5333e35bd", "no-model": "6617b63b44d1c992",
                 "pod-templates": "4d337a491ef11814"}


def _pinned_spec(name):
    # The examples follow each release's image; the hashes pin the rendering of one fixed spec.
    body = variant(name)
    body["spec"]["spark"]["image"] = "localhost/scorestream-runtime-pmml:0.1.0"
    return body


def test_an_operator_upgrade_rolls_no_driver_whose_spec_is_unchanged():
    assert {name: _hash(_pinned_spec(name)) for name in VARIANTS} == PINNED_HASHES


def test_a_model_change_does_not_restart_the_driver_but_a_job_change_does():
    base = variant("example")
    model = copy.deepcopy(base)
    model["spec"]["model"]["version"] = "2"
    trigger = copy.deepcopy(base)
    trigger["spec"]["spark"]["triggerInterval"] = "5s"
    assert _hash(model) == _hash(base)
    assert _hash(trigger) != _hash(base)


def test_a_real_time_resource_renders_a_real_time_job_and_changing_the_trigger_or_warm_up_rolls_the_driver():
    body = yaml.safe_load((Path(__file__).resolve().parent.parent / "examples" / "wine-pmml-realtime.yaml").read_text())
    body["metadata"]["uid"] = EXAMPLE["metadata"]["uid"]
    cm = by_kind(desired.desired_objects(body))["ConfigMap"]
    config = parse_job_config(json.loads(cm["data"]["job.json"]))
    assert config.spark.real_time and config.spark.trigger_interval == "10s"
    micro = copy.deepcopy(body)
    micro["spec"]["spark"]["trigger"] = "processingTime"
    assert _hash(micro) != _hash(body)
    cold = copy.deepcopy(body)
    cold["spec"]["spark"]["warmUpBatches"] = 0
    config = parse_job_config(json.loads(by_kind(desired.desired_objects(cold))["ConfigMap"]["data"]["job.json"]))
    assert config.spark.warm_up_batches == 0 and _hash(cold) != _hash(body)


def test_render_is_pure():
    assert objects() == objects()


PROMETHEUS = ({"kubernetes.io/metadata.name": "monitoring"}, {"app.kubernetes.io/name": "prometheus"})
ALLOY = ({"kubernetes.io/metadata.name": "grafana"}, {"app.kubernetes.io/name": "alloy"})


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_network_policy_admits_only_the_jobs_pods_the_operator_and_monitoring(version):
    """#30 MED 7: the operator by its namespace and labels, monitoring by the peers the admin
    configured (namespace and pod labels both), no one else."""
    settings = desired.Settings(monitoring=(PROMETHEUS, ALLOY), operator_namespace="scorestream-system")
    objs = by_kind(desired.desired_objects(copy.deepcopy(EXAMPLE), settings=settings))
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
    assert rules[(naming.HTTP_PORT,)] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name":
                                                                                  "scorestream-system"}},
                                            "podSelector": {"matchLabels": naming.OPERATOR_POD_LABELS}}]
    assert rules[(naming.METRICS_PORT,)] == [{"namespaceSelector": {"matchLabels": ns}, "podSelector": {"matchLabels": pod}}
                                              for ns, pod in (PROMETHEUS, ALLOY)]
    # No peer configured, no monitoring admitted (before: a pod labelled as Prometheus anywhere).
    assert len(desired.network_policy("wine")["ingress"]) == 2
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
    assert config.http.metrics_port == naming.METRICS_PORT and config.http.port == naming.HTTP_PORT
    assert config.spark.conf["spark.authenticate"] == "true"
    assert "t0ken" not in json.dumps(list(objs.values()))
    probes = [pod["containers"][0][p]["httpGet"]["port"] for p in ("startupProbe", "livenessProbe", "readinessProbe")]
    assert probes == ["metrics"] * 3, "probes on the read-only port"


# --- pod templates (#17): merged under what the operator owns -----------------------------------

DRIVER_TEMPLATE = {
    "metadata": {"labels": {"team": "fraud", "scorestream.dev/modelserving": "someone-else"},
                 "annotations": {"a": "1", naming.CONFIG_HASH_ANNOTATION: "forged"}},
    "spec": {
        "imagePullSecrets": [{"name": "regcred"}], "nodeSelector": {"pool": "streaming"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "high", "serviceAccountName": "admin", "serviceAccount": "admin",
        "terminationGracePeriodSeconds": 1,
        "securityContext": {"runAsUser": 0, "supplementalGroups": [4000]},
        "volumes": [{"name": "extra", "emptyDir": {}}, {"name": "config", "emptyDir": {}},
                    {"name": "checkpoint", "emptyDir": {}}],
        "initContainers": [{"name": "fetch", "image": "busybox:1.36", "command": ["true"]}],
        "containers": [
            {"name": "log-shipper", "image": "fluent-bit:3", "volumeMounts": [{"name": "extra", "mountPath": "/x"}]},
            {"name": "driver", "image": "evil:latest", "command": ["sh"], "args": ["-c", "x"],
             "ports": [{"name": "debug", "containerPort": 5005}], "resources": {"limits": {"cpu": "64"}},
             "securityContext": {"privileged": True, "capabilities": {"add": ["NET_ADMIN"]}},
             "env": [{"name": "TZ", "value": "UTC"}, {"name": "HOME", "value": "/root"}],
             "volumeMounts": [{"name": "extra", "mountPath": "/extra"},
                              {"name": "extra", "mountPath": "/etc/scorestream"}]},
        ],
    },
}


def with_templates(driver=None, executor=None):
    body = copy.deepcopy(EXAMPLE)
    if driver is not None:
        body["spec"]["driver"] = {"podTemplate": driver}
    if executor is not None:
        body["spec"]["executor"] = {"podTemplate": executor}
    return body


def statefulset(body):
    return next(o for o in desired.desired_objects(body) if o["kind"] == "StatefulSet")


def test_merge_objects_by_key_named_lists_by_name_and_the_operators_value_wins():
    template = {"a": {"x": 1, "y": 1}, "l": [{"name": "p", "v": 1, "t": 1}, {"name": "q"}], "s": [1, 2], "k": "t"}
    owned = {"a": {"x": 2}, "l": [{"name": "p", "v": 2}, {"name": "r"}], "s": [3], "k": "o"}
    assert podtemplate.merge(template, owned) == {
        "a": {"x": 2, "y": 1}, "l": [{"name": "p", "v": 2, "t": 1}, {"name": "r"}, {"name": "q"}],
        "s": [3, 1, 2], "k": "o"}
    # Mounts are told apart by path, not by volume name (one volume may be mounted twice).
    mounts = podtemplate.merge([{"name": "v", "mountPath": "/a"}, {"name": "v", "mountPath": "/b", "readOnly": True}],
                               [{"name": "w", "mountPath": "/b"}], "volumeMounts")
    assert mounts == [{"name": "w", "mountPath": "/b", "readOnly": True}, {"name": "v", "mountPath": "/a"}]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_driver_template_reaches_the_statefulset_and_what_the_operator_owns_wins(version):
    plain = statefulset(copy.deepcopy(EXAMPLE))
    sts = statefulset(with_templates(driver=DRIVER_TEMPLATE))
    kubernetes_validate.validate({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "x"},
                                  "spec": sts["spec"]}, version, strict=True)
    meta, pod = sts["spec"]["template"]["metadata"], sts["spec"]["template"]["spec"]
    own = plain["spec"]["template"]
    # The template's own fields are there ...
    assert meta["labels"]["team"] == "fraud" and meta["annotations"]["a"] == "1"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}] and pod["nodeSelector"] == {"pool": "streaming"}
    assert pod["tolerations"] == DRIVER_TEMPLATE["spec"]["tolerations"] and pod["priorityClassName"] == "high"
    assert pod["initContainers"] == DRIVER_TEMPLATE["spec"]["initContainers"]
    assert pod["securityContext"]["supplementalGroups"] == [4000]
    assert [c["name"] for c in pod["containers"]] == ["driver", "log-shipper"]
    assert {"name": "extra", "emptyDir": {}} in pod["volumes"]
    main = pod["containers"][0]
    assert {"name": "TZ", "value": "UTC"} in main["env"] and {"name": "extra", "mountPath": "/extra"} in main["volumeMounts"]
    # ... and every field the operator owns is the operator's.
    assert meta["labels"]["scorestream.dev/modelserving"] == "wine"
    assert meta["annotations"][naming.CONFIG_HASH_ANNOTATION] != "forged"
    assert sts["spec"]["selector"] == plain["spec"]["selector"]
    assert pod["serviceAccountName"] == "wine-driver" and "serviceAccount" not in pod
    assert pod["terminationGracePeriodSeconds"] == own["spec"]["terminationGracePeriodSeconds"]
    assert pod["securityContext"]["runAsUser"] == desired.RUN_AS_USER
    mine = own["spec"]["containers"][0]
    for field in ("image", "command", "ports", "resources", "livenessProbe", "readinessProbe", "startupProbe",
                  "securityContext"):
        assert main[field] == mine[field], field
    assert "args" not in main
    assert {"name": "HOME", "value": "/tmp"} in main["env"] and {"name": "HOME", "value": "/root"} not in main["env"]
    assert {"name": "config", "mountPath": desired.CONFIG_DIR, "readOnly": True} in main["volumeMounts"]
    assert not any(m["mountPath"] == desired.CONFIG_DIR and m["name"] == "extra" for m in main["volumeMounts"])
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["config"] == {"name": "config", "configMap": {"name": "wine-job"}} and "checkpoint" not in volumes
    # Without a template, nothing changes: not the pod, not the hash that rolls the driver.
    assert plain == statefulset(with_templates())


def test_the_executor_template_is_a_file_in_the_configmap_that_spark_is_pointed_at():
    template = {"metadata": {"labels": {"team": "fraud", "app.kubernetes.io/component": "x"},
                             "annotations": {"a": "1"}},
                "spec": {"nodeSelector": {"type": "kwok"}, "serviceAccountName": "admin",
                         "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
                         "containers": [{"name": "sidecar", "image": "busybox"},
                                        {"name": "executor", "image": "evil", "args": ["x"],
                                         "env": [{"name": "TZ", "value": "UTC"}]}]}}
    objs = desired.desired_objects(with_templates(executor=template))
    cm = next(o for o in objs if o["kind"] == "ConfigMap")
    conf = json.loads(cm["data"]["job.json"])["spark"]["conf"]
    assert conf["spark.kubernetes.executor.podTemplateFile"] == desired.EXECUTOR_TEMPLATE_FILE
    assert conf["spark.kubernetes.executor.podTemplateContainerName"] == desired.EXECUTOR_CONTAINER
    # The ConfigMap is mounted whole at the config directory: the file is where Spark looks.
    assert desired.EXECUTOR_TEMPLATE_FILE == f"{desired.CONFIG_DIR}/{desired.EXECUTOR_TEMPLATE_KEY}"
    pod = yaml.safe_load(cm["data"][desired.EXECUTOR_TEMPLATE_KEY])
    kubernetes_validate.validate({**pod, "metadata": {**pod["metadata"], "name": "x"},
                                  "spec": {**pod["spec"], "containers": [{**c, "image": c.get("image", "i")}
                                                                         for c in pod["spec"]["containers"]]}},
                                 K8S_VERSIONS[-1], strict=True)
    assert pod["metadata"]["labels"] == {"team": "fraud", "scorestream.dev/modelserving": "wine",
                                         "app.kubernetes.io/component": "executor"}
    assert pod["metadata"]["annotations"] == {"a": "1"}
    assert pod["spec"]["nodeSelector"] == {"type": "kwok"} and "serviceAccountName" not in pod["spec"]
    assert pod["spec"]["tolerations"] == template["spec"]["tolerations"]
    # The main container first and named as Spark is told, without the fields Spark sets itself,
    # hardened as the driver is (#30: Spark adds no securityContext of its own).
    assert pod["spec"]["containers"] == [{"name": "executor", "env": [{"name": "TZ", "value": "UTC"}],
                                          "securityContext": desired.CONTAINER_SECURITY,
                                          "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]},
                                         {"name": "sidecar", "image": "busybox"}]
    assert pod["spec"]["securityContext"] == desired.POD_SECURITY and pod["spec"]["automountServiceAccountToken"] is False
    # A template with no main container gets one: Spark would otherwise start from the first (a sidecar).
    only_sidecar = yaml.safe_load(next(o for o in desired.desired_objects(with_templates(executor={
        "spec": {"containers": [{"name": "sidecar", "image": "busybox"}]}})) if o["kind"] == "ConfigMap")[
        "data"][desired.EXECUTOR_TEMPLATE_KEY])
    assert [c["name"] for c in only_sidecar["spec"]["containers"]] == ["executor", "sidecar"]
    # A changed executor template rolls the driver (Spark reads it at the driver's start).
    def hash_of(body):
        return statefulset(body)["spec"]["template"]["metadata"]["annotations"][naming.CONFIG_HASH_ANNOTATION]
    changed = copy.deepcopy(template)
    changed["spec"]["nodeSelector"] = {"type": "other"}
    assert hash_of(with_templates(executor=template)) != hash_of(with_templates(executor=changed))
    # Without a template too: the hardening goes onto every executor pod.
    plain = next(o for o in desired.desired_objects(copy.deepcopy(EXAMPLE)) if o["kind"] == "ConfigMap")["data"]
    assert json.loads(plain["job.json"])["spark"]["conf"]["spark.kubernetes.executor.podTemplateFile"] == \
        desired.EXECUTOR_TEMPLATE_FILE
    assert yaml.safe_load(plain[desired.EXECUTOR_TEMPLATE_KEY])["spec"]["securityContext"] == desired.POD_SECURITY


def test_the_network_policy_admits_the_api_servers_cidrs_to_the_read_only_port_only():
    policy = desired.network_policy("wine", ("10.0.0.0/24", "fd00::/64"), (PROMETHEUS,))
    assert policy["ingress"][3] == {"from": [{"ipBlock": {"cidr": "10.0.0.0/24"}}, {"ipBlock": {"cidr": "fd00::/64"}}],
                                    "ports": [{"protocol": "TCP", "port": naming.METRICS_PORT}]}
    rendered = next(o for o in desired.desired_objects(copy.deepcopy(EXAMPLE), settings=desired.Settings(("10.0.0.0/24",)))
                    if o["kind"] == "NetworkPolicy")
    kubernetes_validate.validate(rendered, K8S_VERSIONS[-1], strict=True)
    assert rendered["spec"]["ingress"][2]["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]


def spec_of(**spark):
    body = copy.deepcopy(EXAMPLE)
    body["spec"]["spark"].update(spark)
    body["spec"]["spark"] = {k: v for k, v in body["spec"]["spark"].items() if v is not None}
    return s.ModelServingSpec.model_validate(body["spec"])


def test_a_template_gets_no_token_no_job_secret_and_cannot_steer_the_job():
    """#30 MED 5: the ServiceAccount token is projected into the driver's main container only; a
    sidecar, init or ephemeral container mounts none of the operator's volumes (the token, the
    Kafka Secret, the control token, the configuration) nor a token volume of its own; the main
    container takes no env that steers the JVM, Spark, Python or the job, no envFrom, and no
    mount at or over the job's files or the image's code."""
    steering = [{"name": n, "value": "-javaagent:/x.jar"} for n in
                ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "SPARK_CONF_DIR", "PYTHONPATH",
                 "PYSPARK_PYTHON", "LD_PRELOAD", "KUBERNETES_SERVICE_HOST", "CLASSPATH", "SCORESTREAM_JVM_DIR", "HOME")]
    own_token = {"name": "mine", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}
    body = with_templates(driver={"spec": {
        "shareProcessNamespace": True, "hostPID": True, "hostNetwork": True,  # /proc/<pid>/root: the token
        "volumes": [own_token, {"name": "extra", "emptyDir": {}}],
        "containers": [
            {"name": "driver", "env": [*steering, {"name": "TZ", "value": "UTC"}],
             "envFrom": [{"configMapRef": {"name": "evil"}}],
             "volumeMounts": [{"name": "extra", "mountPath": p} for p in
                              ("/etc/ld.so.preload", "/opt/spark/conf", "/", "/var", "/var/run/secrets/x", "/usr/lib",
                               "/tmp/x", "/var/lib/scorestream/checkpoint")] + [{"name": "extra", "mountPath": "/extra"}]},
            {"name": "side", "image": "busybox", "volumeMounts": [
                {"name": n, "mountPath": f"/steal/{n}"} for n in ("sa-token", "control", "kafka-client", "config", "mine")]
             + [{"name": "extra", "mountPath": "/x"}]}],
        "initContainers": [{"name": "init", "image": "busybox",
                            "volumeMounts": [{"name": "control", "mountPath": "/c"}]}]}})
    pod = statefulset(body)["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert not {"shareProcessNamespace", "hostPID", "hostNetwork"} & pod.keys()
    assert [v["name"] for v in pod["volumes"] if "projected" in v] == ["sa-token"]
    main, side = pod["containers"]
    assert main["name"] == "driver" and side["name"] == "side"
    assert {"name": "sa-token", "mountPath": podtemplate.SA_TOKEN_DIR, "readOnly": True} in main["volumeMounts"]
    names = {e["name"] for e in main["env"]}
    assert "TZ" in names and not names & {e["name"] for e in steering} - {"HOME"} and "envFrom" not in main
    assert [e for e in main["env"] if e["name"] == "HOME"] == [{"name": "HOME", "value": "/tmp"}]  # the operator's
    assert [m["mountPath"] for m in main["volumeMounts"] if m["name"] == "extra"] == ["/extra"]
    assert side["volumeMounts"] == [{"name": "extra", "mountPath": "/x"}]
    assert "volumeMounts" not in pod["initContainers"][0]
    sa = next(o for o in desired.desired_objects(body) if o["kind"] == "ServiceAccount")
    assert sa["automountServiceAccountToken"] is False
    # The executor's template: the same rules, and no token at all.
    executor = yaml.safe_load(next(o for o in desired.desired_objects(with_templates(executor={"spec": {
        "containers": [{"name": "executor", "env": steering, "envFrom": [{"secretRef": {"name": "x"}}]}]}}))
        if o["kind"] == "ConfigMap")["data"][desired.EXECUTOR_TEMPLATE_KEY])
    assert "env" not in executor["spec"]["containers"][0] and "envFrom" not in executor["spec"]["containers"][0]
    assert executor["spec"]["automountServiceAccountToken"] is False


def test_no_path_sets_the_labels_policies_and_monitoring_select_by():
    """#30 MED 7: neither spec.spark.conf nor a pod template's labels put app.kubernetes.io/* or
    scorestream.dev/* on a pod the operator makes (a tenant's executors labelled as Prometheus)."""
    for key in ("spark.kubernetes.executor.volumes.hostPath.root.mount.path",
                "spark.kubernetes.executor.secrets.wine-control",
                "spark.kubernetes.executor.label.app.kubernetes.io/name",
                "spark.kubernetes.driver.label.app.kubernetes.io/component",
                "spark.kubernetes.executor.label.scorestream.dev/modelserving"):
        body = copy.deepcopy(EXAMPLE)
        body["spec"]["spark"]["conf"] = {key: "prometheus"}
        with pytest.raises(ValueError, match="is the operator's to set"):
            s.ModelServingSpec.model_validate(body["spec"])
    template = {"metadata": {"labels": {"app.kubernetes.io/name": "prometheus", "scorestream.dev/x": "y", "team": "a"}}}
    body = with_templates(driver=template, executor=template)
    driver = statefulset(body)["spec"]["template"]["metadata"]["labels"]
    executor = yaml.safe_load(next(o for o in desired.desired_objects(body) if o["kind"] == "ConfigMap")["data"][
        desired.EXECUTOR_TEMPLATE_KEY])["metadata"]["labels"]
    for labels in (driver, executor):
        assert labels["team"] == "a" and labels.get("app.kubernetes.io/name") != "prometheus" and "scorestream.dev/x" not in labels


def test_image_volumes_and_every_container_pass_the_allow_list():
    allow = ["registry.example.com/*"]
    for template in ({"spec": {"volumes": [{"name": "m", "image": {"reference": "evil.example/miner:latest"}}]}},
                     {"spec": {"ephemeralContainers": [{"name": "e", "image": "evil.example/miner:latest"}]}},
                     {"spec": {"initContainers": [{"name": "i", "image": "evil.example/miner:latest"}]}},
                     {"spec": {"containers": [{"name": "s", "image": "evil.example/miner:latest"}]}}):
        for side in ("driver", "executor"):
            body = with_templates(**{side: template})
            body["spec"]["spark"]["image"] = "registry.example.com/runtime:1"
            verdict = images.decide(s.ModelServingSpec.model_validate(body["spec"]), None, allow)
            assert verdict.reason == "ImageNotAllowed" and "evil.example/miner:latest" in verdict.message, (side, template)


def test_the_runtime_image_defaults_to_the_operators_and_the_allow_list_refuses_others():
    mine = "registry.example.com/scorestream/runtime:0.1.0"
    assert images.decide(spec_of(image=None), mine, []) == images.Verdict(mine)
    assert images.decide(spec_of(image=None), None, []).reason == "NoRuntimeImage"
    allow = ["registry.example.com/scorestream/*"]
    assert images.decide(spec_of(image="registry.example.com/scorestream/x@sha256:ab"), None, allow).image
    refused = images.decide(spec_of(image="docker.io/evil/miner:1"), mine, allow)
    assert refused.image is None and refused.reason == "ImageNotAllowed" and "'docker.io/evil/miner:1'" in refused.message
    # Not a prefix match: a look-alike registry host does not pass.
    assert images.decide(spec_of(image="registry.example.com.evil.io/scorestream/x"), None, allow).image is None
    # The admin's default is allowed whatever the list says, and so is naming it explicitly.
    assert images.decide(spec_of(image=mine), mine, ["other/*"]).image == mine
    # A sidecar or init container of a template is an image too; the main container's is never taken.
    body = with_templates(driver={"spec": {"containers": [{"name": "driver", "image": "anything"},
                                                          {"name": "side", "image": "docker.io/evil/side"}]}},
                          executor={"spec": {"initContainers": [{"name": "i", "image": "registry.example.com/scorestream/i"}]}})
    body["spec"]["spark"]["image"] = "registry.example.com/scorestream/runtime:1"
    verdict = images.decide(s.ModelServingSpec.model_validate(body["spec"]), None, allow)
    assert verdict.reason == "ImageNotAllowed" and "docker.io/evil/side" in verdict.message and "anything" not in verdict.message
    # The resource as rendered: its spec with the image filled in, the rest untouched.
    raw = copy.deepcopy(EXAMPLE)
    del raw["spec"]["spark"]["image"]
    filled = images.with_image(raw, mine)
    assert filled["spec"]["spark"]["image"] == mine and "image" not in raw["spec"]["spark"]
    assert statefulset(filled)["spec"]["template"]["spec"]["containers"][0]["image"] == mine
    with pytest.raises(ValueError, match="spec.spark.image is not set"):
        desired.desired_objects(raw)
