"""Desired state: a pure function from a ModelServing to the Kubernetes objects that run it.

No I/O here. The kopf handlers apply what this returns; `scorestream render` prints it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from scorestream import naming
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.config import (
    ArtifactPolicy,
    BearerAccess,
    GcsAccess,
    HttpConfig,
    InputConfig,
    JobConfig,
    KafkaConfig,
    KeylessModels,
    ProtobufInput,
    S3Access,
    SparkConfig,
    StoreAccess,
)
from scorestream.operator import models_route, podtemplate, strimzi
from scorestream.operator.kube import contains

CONFIG_DIR = "/etc/scorestream"
CONFIG_FILE = f"{CONFIG_DIR}/job.json"
# spec.executor.podTemplate, as the pod file Spark starts executors from: a key of the job's
# ConfigMap, which the driver mounts whole at CONFIG_DIR.
EXECUTOR_TEMPLATE_KEY = "executor-pod-template.yaml"
EXECUTOR_TEMPLATE_FILE = f"{CONFIG_DIR}/{EXECUTOR_TEMPLATE_KEY}"
# The main containers' names: the driver's in the StatefulSet, the executors' in their template.
DRIVER_CONTAINER = "driver"
EXECUTOR_CONTAINER = "executor"
KAFKA_SECRET_DIR = "/etc/scorestream/kafka"
# spec.modelStore's Secrets, mounted into the driver only: executors fetch nothing (the driver
# fetches every model and sample and ships the files to them).
STORES_DIR = "/etc/scorestream/stores"
STORE_VOLUMES = {"s3": "store-s3", "gcs": "store-gcs", "https": "store-https"}
CHECKPOINT_DIR = "/var/lib/scorestream"
# The control token: a Secret the operator makes per resource (never rendered here: its value is
# random, made once), mounted into the driver only.
CONTROL_SECRET_DIR = "/etc/scorestream/control"
CONTROL_TOKEN_KEY = "token"
# The uid of the Spark images' `spark` user, which the runtime image keeps.
RUN_AS_USER = 185
# The driver's and every executor's hardening: what Pod Security `restricted` asks, and a read-only root.
POD_SECURITY = {"runAsNonRoot": True, "runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER, "fsGroup": RUN_AS_USER,
                "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
IN_CLUSTER_MASTER = "k8s://https://kubernetes.default.svc"

# What Spark's Kubernetes scheduler backend does as the driver in client mode, and nothing more:
# executor pods (create on allocation, watch and list for state, delete on scale-down, deletecollection
# by label on stop) and the executors' configuration ConfigMap (created at start, deleted by label on
# stop). Volume claims are not granted: the spec gives executors no on-demand volumes.
DRIVER_RULES = [
    {"apiGroups": [""], "resources": ["pods"],
     "verbs": ["create", "delete", "deletecollection", "get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["configmaps"],
     "verbs": ["create", "delete", "deletecollection", "get", "list"]},
]


def owner_reference(meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": s.API_VERSION, "kind": s.KIND, "name": meta["name"], "uid": meta["uid"],
        "controller": True, "blockOwnerDeletion": True,
    }


def _spark_ui_conf(ui: s.SparkUISpec) -> dict[str, str]:
    """Spark's UI and its Prometheus endpoints, where the spec turns them on (the runtime turns
    the UI off otherwise)."""
    if not ui.enabled:
        return {}
    return {"spark.ui.enabled": "true", "spark.ui.port": str(naming.SPARK_UI_PORT),
            # Spark's own Prometheus endpoints on the UI port: the driver's metrics system
            # (/metrics/prometheus) and the executors' (/metrics/executors/prometheus).
            "spark.ui.prometheus.enabled": "true",
            "spark.metrics.conf.*.sink.prometheusServlet.class": "org.apache.spark.metrics.sink.PrometheusServlet",
            "spark.metrics.conf.*.sink.prometheusServlet.path": "/metrics/prometheus"}


def _spark_ui_port(spec: s.ModelServingSpec, **port: Any) -> list[dict[str, Any]]:
    if not spec.spark.ui.enabled:
        return []
    return [{"name": naming.SPARK_UI_PORT_NAME, **port, "protocol": "TCP"}]


def job_config(name: str, namespace: str, spec: s.ModelServingSpec) -> JobConfig:
    """The runtime's configuration for this resource: the same type the runtime reads. No secrets.
    Every field of the job's is set here from the spec's by name: the spec and the job config
    are types of their own, so neither changes with the other unseen."""
    config = JobConfig.model_validate({
        "artifacts": ArtifactPolicy(stores=store_access(spec.model_store)),
        "name": name,
        "namespace": namespace,
        "dataTypes": [spec.data_type],
        "kafka": _kafka_config(namespace, spec.kafka),
        "input": _input_config(spec.input),
        "spark": SparkConfig(master=IN_CLUSTER_MASTER, trigger=spec.spark.trigger, triggerInterval=spec.spark.trigger_interval,
                             warmUpBatches=spec.spark.warm_up_batches,
                             conf=_spark_conf(name, namespace, spec)),
        "http": HttpConfig(host="0.0.0.0", port=naming.HTTP_PORT, metricsPort=naming.METRICS_PORT,
                           controlTokenFile=f"{CONTROL_SECRET_DIR}/{CONTROL_TOKEN_KEY}"),
        "checkpointLocation": f"{CHECKPOINT_DIR}/checkpoint",
        "workDir": "/tmp/scorestream",
        "upgradeMode": spec.upgrade_mode,
        "delivery": spec.delivery,
    })
    if spec.upgrade_mode == "stateless":
        # A checkpoint per configuration: a changed job starts afresh from the committed offsets.
        config = config.model_copy(update={"checkpoint_location": f"{CHECKPOINT_DIR}/stateless-{config_hash(config)}"})
    return config


def _kafka_config(namespace: str, spec: s.KafkaSpec) -> KafkaConfig:
    """The job's Kafka settings: the topics, and where its credentials are mounted (never their values)."""
    credentials = strimzi.credential_files(spec)
    keyless = spec.keyless_models
    return KafkaConfig(
        bootstrap_servers=spec.bootstrap_servers, data_topic=spec.data_topic, output_topic=spec.output_topic,
        # The namespace's own topic where the spec names none; an admin's shared topic is put in by
        # _objects (Settings), outside the configuration hash as the artifact policy is.
        models_topic=models_route.Assignment().topic(spec, namespace),
        accept_unaddressed_models=spec.accept_unaddressed_models,
        keyless_models=None if keyless is None else KeylessModels(topic=keyless.topic,
                                                                   retention_hours=keyless.retention_hours),
        dead_letter_topic=spec.dead_letter_topic, properties=spec.properties,
        starting_offsets=spec.starting_offsets, max_offsets_per_trigger=spec.max_offsets_per_trigger,
        secret_properties_file=f"{KAFKA_SECRET_DIR}/{spec.secret_ref.key}" if spec.secret_ref else None,
        credentials=credentials)


def _input_config(spec: s.InputSpec) -> InputConfig:
    return InputConfig(format=spec.format, data_type_field=spec.data_type_field, fields=spec.fields,
                       protobuf=ProtobufInput(descriptor_file=spec.protobuf.descriptor_file,
                                              message_type=spec.protobuf.message_type))


def _spark_conf(name: str, namespace: str, spec: s.ModelServingSpec) -> dict[str, str]:
    """Spark's settings for the driver in this pod and the executor pods it creates."""
    names = naming.Names(name, namespace)
    image = spec.spark.image
    if image is None:  # the operator fills the default in (images.with_image) or refuses first
        raise ValueError("spec.spark.image is not set and no default runtime image was given")
    return {
        # Client mode: the driver runs in this pod; its executors are pods it creates, owned by it
        # (so they go when the driver pod goes) and reaching it through the headless Service.
        "spark.submit.deployMode": "client",
        "spark.kubernetes.namespace": namespace,
        "spark.kubernetes.driver.pod.name": names.driver_pod,
        "spark.kubernetes.container.image": image,
        "spark.kubernetes.container.image.pullPolicy": spec.spark.image_pull_policy,
        "spark.kubernetes.executor.podNamePrefix": f"{name}-exec",
        f"spark.kubernetes.executor.label.{naming.MODELSERVING_LABEL}": name,
        "spark.kubernetes.executor.label.app.kubernetes.io/component": "executor",
        "spark.kubernetes.executor.request.cores": spec.spark.executor.cpu,
        "spark.kubernetes.executor.limit.cores": spec.spark.executor.cpu,
        "spark.executor.memory": _jvm_memory(spec.spark.executor.memory),
        "spark.executor.instances": str(spec.replicas),
        "spark.driver.host": names.driver_host,
        "spark.driver.bindAddress": "0.0.0.0",
        "spark.driver.port": str(naming.DRIVER_PORT),
        "spark.driver.blockManager.port": str(naming.BLOCK_MANAGER_PORT),
        "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
        "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
        # Always: the template carries the driver's hardening onto every executor pod.
        "spark.kubernetes.executor.podTemplateFile": EXECUTOR_TEMPLATE_FILE,
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
        **spec.spark.conf,
        **_spark_ui_conf(spec.spark.ui),
        # Driver and executors authenticate each other's RPC: on Kubernetes, Spark generates a secret
        # per application and hands it to the executor pods it creates (an environment variable).
        # After the spec's conf, which may not set spark.authenticate* anyway (refused).
        "spark.authenticate": "true",
    }


def store_access(store: s.ModelStoreSpec | None) -> StoreAccess | None:
    """spec.modelStore for the job: where its Secrets are mounted (_store_volumes), never their values."""
    if store is None:
        return None
    s3, gcs, https = store.s3, store.gcs, store.https
    return StoreAccess(
        s3=None if s3 is None else S3Access(
            endpoint=s3.endpoint, region=s3.region, workload_identity=s3.workload_identity,
            credentials_dir=f"{STORES_DIR}/s3" if s3.secret_ref else None),
        gcs=None if gcs is None else GcsAccess(
            endpoint=gcs.endpoint, workload_identity=gcs.workload_identity,
            service_account_file=f"{STORES_DIR}/gcs/{gcs.secret_ref.key}" if gcs.secret_ref else None),
        https=None if https is None else BearerAccess(
            hosts=https.hosts, token_file=f"{STORES_DIR}/https/{https.secret_ref.key}"))


def _store_volumes(store: s.ModelStoreSpec | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The driver's volumes and mounts of spec.modelStore's Secrets. Mounted whole folders, no
    subPath: the kubelet swaps a rotated Secret's files in place, and the job reads them at each fetch."""
    volumes, mounts = [], []
    refs = {"s3": (store.s3.secret_ref, None) if store and store.s3 and store.s3.secret_ref else None,
            "gcs": (store.gcs.secret_ref, store.gcs.secret_ref.key) if store and store.gcs and store.gcs.secret_ref else None,
            "https": (store.https.secret_ref, store.https.secret_ref.key) if store and store.https else None}
    for kind, found in refs.items():
        if found is None:
            continue
        ref, key = found
        secret: dict[str, Any] = {"secretName": ref.name, "defaultMode": 0o440}
        if key is not None:
            secret["items"] = [{"key": key, "path": key}]
        volumes.append({"name": STORE_VOLUMES[kind], "secret": secret})
        mounts.append({"name": STORE_VOLUMES[kind], "mountPath": f"{STORES_DIR}/{kind}", "readOnly": True})
    return volumes, mounts


def _jvm_memory(quantity: str) -> str:
    """A Kubernetes quantity as a JVM size, leaving room for off-heap memory (Spark adds 10%)."""
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024, "k": 1 / 1024, "M": 1, "G": 1000}
    for unit, mib in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if quantity.endswith(unit):
            return f"{max(1, int(float(quantity[: -len(unit)]) * mib / 1.1))}m"
    return f"{max(1, int(float(quantity) / 1024 / 1024 / 1.1))}m"


def config_hash(config: JobConfig, restart_nonce: int | None = None, pod_templates: str | None = None) -> str:
    """What rolls the driver when it changes: the job configuration, except the executor total,
    which the running job changes live (spec.replicas, the autoscaler), spec.restartNonce (a
    restart asked for on purpose) and the pod templates (the executors' is read at the driver's
    start; a driver template that cannot run then fails the upgrade, which runs the last stable
    spec). Unset, each adds nothing: the hash is what it was before the field existed."""
    conf = {k: v for k, v in config.spark.conf.items() if k != "spark.executor.instances"}
    rolled = config.model_copy(update={"spark": config.spark.model_copy(update={"conf": conf})})
    text = rolled.hashed_json() + ("" if restart_nonce is None else f"\nrestartNonce={restart_nonce}") \
        + ("" if pod_templates is None else f"\npodTemplates={pod_templates}")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _pod_templates(spec: s.ModelServingSpec) -> str | None:
    if spec.driver.pod_template is None and spec.executor.pod_template is None:
        return None
    return json.dumps({"driver": spec.driver.model_dump(by_alias=True, exclude_none=True),
                       "executor": spec.executor.model_dump(by_alias=True, exclude_none=True)}, sort_keys=True)


def spec_hash(name: str, namespace: str, spec: s.ModelServingSpec) -> str:
    """The driver's configuration hash for a spec (its pod template's annotation)."""
    return config_hash(job_config(name, namespace, spec), spec.restart_nonce, _pod_templates(spec))


@dataclass(frozen=True)
class Settings:
    """What the objects depend on from the operator's configuration (OperatorConfig)."""

    api_server_cidrs: tuple[str, ...] = ()  # admitted to the read-only port (kubectl scorestream)
    artifact_allowed_networks: tuple[str, ...] = ()  # non-public networks the job's fetches may reach
    artifact_max_fetch_bytes: int | None = None  # the admin's artifact limits (None: ArtifactPolicy's defaults)
    artifact_fetch_timeout_seconds: float | None = None
    monitoring: tuple[tuple[dict[str, str], dict[str, str]], ...] = ()  # (namespace, pod) labels: the read-only port
    operator_namespace: str | None = None  # where the operator's pods are (the control port)
    models: models_route.Assignment = models_route.Assignment()  # the models topic of a spec that names none

    @classmethod
    def of(cls, config: Any) -> "Settings":
        return cls(api_server_cidrs=tuple(config.api_server_cidrs),
                   artifact_allowed_networks=tuple(config.artifact_allowed_networks),
                   artifact_max_fetch_bytes=config.artifact_max_fetch_bytes,
                   artifact_fetch_timeout_seconds=config.artifact_fetch_timeout_seconds,
                   monitoring=tuple((p.namespace_labels, p.pod_labels) for p in config.monitoring_peers),
                   operator_namespace=config.operator_namespace, models=models_route.Assignment.of(config))


@dataclass(frozen=True)
class Observations:
    """What the desired objects depend on besides the resource's own spec."""

    data_topic_missing: bool = False  # no driver until it exists: it would only crash-loop
    # No driver started while a Secret it mounts is missing (it would not start) or its KafkaTopics
    # are not Ready (it would write to topics that are not there): `status.holds_driver`.
    kafka_waiting: bool = False
    stable_spec: dict[str, Any] | None = None  # a failed upgrade runs the last stable spec instead


def digest(objects: list[dict[str, Any]]) -> str:
    """Identifies a set of rendered objects: equal digests, the same objects to apply."""
    return hashlib.sha256(json.dumps(objects, sort_keys=True).encode()).hexdigest()


def desired_state(body: dict[str, Any], seen: Observations, settings: Settings = Settings()) -> list[dict[str, Any]]:
    """What reconcile applies, and what drift repair compares children with: one rendering, so
    that a repair never restores what the reconcile chose not to run.

    Whether the driver runs is the resource's own spec's to say (`suspend`), also while a failed
    upgrade renders the last stable spec: that spec may have been recorded while suspended."""
    own = s.ModelServingSpec.model_validate(body.get("spec", {}))
    rendered = own if seen.stable_spec is None else s.ModelServingSpec.model_validate(seen.stable_spec)
    return _objects(body["metadata"], rendered,
                    run=not own.suspend and not seen.data_topic_missing and not seen.kafka_waiting, settings=settings)


def drifted(owner: dict[str, Any], child: dict[str, Any], seen: Observations, deleted: bool,
            settings: Settings = Settings()) -> bool:
    """Whether a child of ours differs from what the owner's reconcile renders."""
    wanted = next((o for o in desired_state(owner, seen, settings) if o["kind"] == child.get("kind")
                   and o["metadata"]["name"] == child.get("metadata", {}).get("name")), None)
    return wanted is not None and (deleted or not contains(child, wanted))


def desired_objects(body: dict[str, Any], run: bool = True, settings: Settings = Settings()) -> list[dict[str, Any]]:
    """The objects that run one ModelServing, in the order they should be applied.

    `run=False` keeps the driver at zero replicas (suspended, or its data topic is missing).
    """
    spec = s.ModelServingSpec.model_validate(body.get("spec", {}))
    return _objects(body["metadata"], spec, run=run and not spec.suspend, settings=settings)


def _objects(meta: dict[str, Any], spec: s.ModelServingSpec, run: bool,
             settings: Settings = Settings()) -> list[dict[str, Any]]:
    name, namespace = meta["name"], meta.get("namespace", "default")
    names = naming.Names(name, namespace)
    config = job_config(name, namespace, spec)
    # The cluster admin's, not the spec's: outside the configuration hash (spec_hash, which the
    # upgrade check compares, knows only the spec), so it applies at each driver's next start.
    limits = {"max_fetch_bytes": settings.artifact_max_fetch_bytes,
              "fetch_timeout_seconds": settings.artifact_fetch_timeout_seconds}
    served = config.model_copy(update={"artifacts": config.artifacts.model_copy(
        update={"allowed_networks": list(settings.artifact_allowed_networks),
                **{k: v for k, v in limits.items() if v is not None}}),
        "kafka": config.kafka.model_copy(update={"models_topic": settings.models.topic(spec.kafka, namespace)})})
    config_data = {"job.json": served.to_json(),
                   EXECUTOR_TEMPLATE_KEY: podtemplate.executor_pod_yaml(spec.executor.pod_template, name, EXECUTOR_CONTAINER,
                                                                        POD_SECURITY, CONTAINER_SECURITY,
                                                                        strimzi.volumes(spec.kafka))}

    def obj(api_version: str, kind: str, obj_name: str, **rest: Any) -> dict[str, Any]:
        return {
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": obj_name, "namespace": namespace, "labels": naming.labels(name),
                         "ownerReferences": [owner_reference(meta)]},
            **rest,
        }

    return [
        obj("v1", "ConfigMap", names.config, data=config_data),
        # Its token is projected into the driver's main container only (_driver_pod_spec).
        obj("v1", "ServiceAccount", names.service_account, automountServiceAccountToken=False),
        obj("rbac.authorization.k8s.io/v1", "Role", names.driver, rules=DRIVER_RULES),
        obj("rbac.authorization.k8s.io/v1", "RoleBinding", names.driver,
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": names.driver},
            subjects=[{"kind": "ServiceAccount", "name": names.service_account, "namespace": namespace}]),
        obj("v1", "Service", names.driver, spec={
            # Headless: executors resolve the driver pod's own name, and no traffic is balanced.
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": naming.selector(name),
            "ports": [
                {"name": "http", "port": naming.HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                {"name": "metrics", "port": naming.METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
                {"name": "driver", "port": naming.DRIVER_PORT, "targetPort": "driver", "protocol": "TCP"},
                {"name": "blockmanager", "port": naming.BLOCK_MANAGER_PORT, "targetPort": "blockmanager",
                 "protocol": "TCP"},
                *_spark_ui_port(spec, port=naming.SPARK_UI_PORT, targetPort=naming.SPARK_UI_PORT_NAME),
            ],
        }),
        obj("networking.k8s.io/v1", "NetworkPolicy", names.driver, spec=network_policy(name, settings.api_server_cidrs, settings.monitoring,
                                                                                  settings.operator_namespace)),
        obj("apps/v1", "StatefulSet", names.driver,
            spec=_statefulset_spec(name, spec, names, config, run)),
    ]


def network_policy(name: str, api_server_cidrs: tuple[str, ...] | list[str] = (),
                   monitoring: tuple[tuple[dict[str, str], dict[str, str]], ...] = (),
                   operator_namespace: str | None = None) -> dict[str, Any]:
    """Ingress to the job's pods (driver and executors): each other on any port (Spark's RPC and
    block transfers, authenticated by spark.authenticate), the operator's pods in its namespace on
    the control port, the monitoring peers (namespace and pod naming.labels, both: a tenant cannot label a
    pod into another's namespace, and may not set these naming.labels on the pods the operator makes) on
    the read-only port, and the API server's addresses (`api_server_cidrs`) on the read-only port,
    for its service proxy (kubectl scorestream): a NetworkPolicy cannot select the API server,
    which is no pod, other than by address. Nothing else. Egress is not limited: Kafka, the API
    server and model locations are the cluster's to know. Probes come from the node, which a
    policy does not govern."""
    read_only = [{"protocol": "TCP", "port": naming.METRICS_PORT}]
    operator_ns = {"matchLabels": {"kubernetes.io/metadata.name": operator_namespace}} if operator_namespace else {}
    peers = [{"from": [{"namespaceSelector": {"matchLabels": dict(ns)}, "podSelector": {"matchLabels": dict(pod)}}
                       for ns, pod in monitoring], "ports": read_only}] if monitoring else []
    proxy = [{"from": [{"ipBlock": {"cidr": c}} for c in api_server_cidrs], "ports": read_only}] if api_server_cidrs else []
    return {
        "podSelector": {"matchLabels": {naming.MODELSERVING_LABEL: name}},
        "policyTypes": ["Ingress"],
        "ingress": [
            {"from": [{"podSelector": {"matchLabels": {naming.MODELSERVING_LABEL: name}}}]},
            {"from": [{"namespaceSelector": operator_ns, "podSelector": {"matchLabels": naming.OPERATOR_POD_LABELS}}],
             "ports": [{"protocol": "TCP", "port": naming.HTTP_PORT}]},
            *peers,
            *proxy,
        ],
    }


def control_secret(meta: dict[str, Any], token: str) -> dict[str, Any]:
    """The control token's Secret: created once by the operator (observer.ensure_control_secret),
    owned by the resource so that it goes with it."""
    name, namespace = meta["name"], meta.get("namespace", "default")
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": naming.Names(name, namespace).control_secret, "namespace": namespace,
                     "labels": naming.labels(name, "control"), "ownerReferences": [owner_reference(meta)]},
        "stringData": {CONTROL_TOKEN_KEY: token},
    }


def _driver_volumes(spec: s.ModelServingSpec, names: naming.Names) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The driver's volumes and its main container's mounts (podtemplate.DRIVER_VOLUMES names them)."""
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": names.config}},
        {"name": "tmp", "emptyDir": {}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "checkpoint", "mountPath": CHECKPOINT_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if spec.kafka.secret_ref:
        ref = spec.kafka.secret_ref
        volumes.append({"name": "kafka-client", "secret": {
            "secretName": ref.name, "items": [{"key": ref.key, "path": ref.key}], "defaultMode": 0o440}})
        mounts.append({"name": "kafka-client", "mountPath": KAFKA_SECRET_DIR, "readOnly": True})
    store_volumes, store_mounts = _store_volumes(spec.model_store)
    volumes += store_volumes
    mounts += store_mounts
    kafka_volumes, kafka_mounts = strimzi.volumes(spec.kafka)
    volumes += kafka_volumes
    mounts += kafka_mounts
    volumes.append({"name": "control", "secret": {
        "secretName": names.control_secret, "items": [{"key": CONTROL_TOKEN_KEY, "path": CONTROL_TOKEN_KEY}],
        "defaultMode": 0o440}})
    mounts.append({"name": "control", "mountPath": CONTROL_SECRET_DIR, "readOnly": True})
    # The ServiceAccount's token, as Kubernetes would mount it, but into the main container only:
    # a sidecar of the template holding it could create pods with any image (Spark's Role).
    volumes.append({"name": "sa-token", "projected": {"defaultMode": 0o440, "sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}})
    mounts.append({"name": "sa-token", "mountPath": podtemplate.SA_TOKEN_DIR, "readOnly": True})
    return volumes, mounts


def _driver_container(spec: s.ModelServingSpec, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """The driver's main container: the runtime, its ports, probes and hardening."""
    resources = {"cpu": spec.spark.driver.cpu, "memory": spec.spark.driver.memory}
    return {
        "name": DRIVER_CONTAINER,
        "image": spec.spark.image,
        "imagePullPolicy": spec.spark.image_pull_policy,
        # PySpark starts spark-submit in client mode against spark.master (the in-cluster
        # API server) from inside this process: the same entry point as a local run.
        "command": ["python", "-m", "scorestream.runtime", "--config", CONFIG_FILE],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "SPARK_USER", "value": "spark"},
            {"name": "HOME", "value": "/tmp"},
        ],
        "ports": [
            {"name": "http", "containerPort": naming.HTTP_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": naming.METRICS_PORT, "protocol": "TCP"},
            {"name": "driver", "containerPort": naming.DRIVER_PORT, "protocol": "TCP"},
            {"name": "blockmanager", "containerPort": naming.BLOCK_MANAGER_PORT, "protocol": "TCP"},
            *_spark_ui_port(spec, containerPort=naming.SPARK_UI_PORT),
        ],
        "resources": {"requests": resources, "limits": resources},
        "startupProbe": {"httpGet": {"path": "/healthz", "port": "metrics"},
                         "periodSeconds": 5, "failureThreshold": 60},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"},
                          "periodSeconds": 10, "failureThreshold": 6},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 5},
        "securityContext": CONTAINER_SECURITY,
        "volumeMounts": mounts,
    }


def _statefulset_spec(name: str, spec: s.ModelServingSpec, names: naming.Names, config: JobConfig,
                      run: bool) -> dict[str, Any]:
    volumes, mounts = _driver_volumes(spec, names)
    pvc_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": spec.checkpoint.size}},
    }
    if spec.checkpoint.storage_class_name:
        pvc_spec["storageClassName"] = spec.checkpoint.storage_class_name
    return {
        # One driver at most, even when a node is lost: a StatefulSet never runs two pods of one
        # ordinal, so there is never a second checkpoint writer.
        "replicas": 1 if run else 0,
        "serviceName": names.driver,
        # Not OrderedReady: under it the StatefulSet controller replaces a pod only once it is
        # Running and Ready, so a driver that never gets ready (an upgrade whose job fails to
        # start, a node that marked its pods not ready) would keep its configuration through
        # every change after: the last stable spec, or the user's fix, would never reach it.
        "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": naming.selector(name)},
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"},
        # spec.driver.podTemplate under the operator's pod: the operator's fields win.
        "template": podtemplate.merged_pod(spec.driver.pod_template, {
            "metadata": {
                "labels": naming.labels(name),
                # A changed job configuration rolls the driver: SIGTERM, the current micro-batch
                # completes, and the new pod resumes from the checkpoint.
                "annotations": {naming.CONFIG_HASH_ANNOTATION: config_hash(config, spec.restart_nonce,
                                                                    _pod_templates(spec))},
            },
            "spec": {
                "serviceAccountName": names.service_account,
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": 120,
                "securityContext": POD_SECURITY,
                "containers": [_driver_container(spec, mounts)],
                "volumes": volumes,
            },
        }, DRIVER_CONTAINER, podtemplate.DRIVER_VOLUMES),
        "volumeClaimTemplates": [{
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "checkpoint", "labels": naming.labels(name)},
            "spec": pvc_spec,
        }],
    }


# What the API server refuses to change in a StatefulSet, of what the operator renders: a change
# of one makes the StatefulSet anew (operator.reconciler).
STATEFULSET_IMMUTABLE = ("podManagementPolicy", "serviceName", "selector")


def immutable_changes(held: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """The fields of `wanted` (a StatefulSet) that `held` has otherwise and no update may change."""
    if wanted.get("kind") != "StatefulSet":
        return []
    have, want = held.get("spec") or {}, wanted["spec"]
    return [f for f in STATEFULSET_IMMUTABLE if f in want and not contains(have.get(f), want[f])]


def consumer_groups(name: str, namespace: str) -> dict[str, str]:
    return {"data": naming.data_group(namespace, name), "models": naming.models_group(namespace, name, "<run>")}


def render(body: dict[str, Any], settings: Settings = Settings()) -> list[dict[str, Any]]:
    """For `scorestream render`: placeholder uid where the resource has none yet."""
    meta = {"uid": "00000000-0000-0000-0000-000000000000", "namespace": "default", **body.get("metadata", {})}
    return desired_objects({**body, "metadata": meta}, settings=settings)
