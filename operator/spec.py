"""The ModelServing resource: spec and status as typed models, the one source of the CRD.

The attribute docstrings are the CRD's field descriptions (`kubectl explain modelserving.spec`).
A cross-field rule is written twice on purpose, once as CEL for the API server and once as a
pydantic validator for `scorestream render` and the operator; `tests/test_crd.py` evaluates every
CEL rule against the same examples as the validator, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from scorestream.config import (
    _K8S_NAME,
    InputConfig,
    KafkaTopics,
    SparkTrigger,
    Strict,
)

GROUP = "scorestream.dev"
VERSION = "v1alpha1"
KIND = "ModelServing"
PLURAL = "modelservings"
SINGULAR = "modelserving"
SHORT_NAMES = ["ms"]
API_VERSION = f"{GROUP}/{VERSION}"

# Child objects are named `<name>-driver` etc. and the driver's pod `<name>-driver-0`: a Service
# name is a DNS-1035 label (≤ 63 characters, starting with a letter).
MAX_NAME_LENGTH = 50
_DNS_1035 = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_QUANTITY = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_DATA_TYPE = r"^[A-Za-z0-9._-]{1,128}$"


def _rules(*rules: tuple[str, str]) -> dict:
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]}


class SecretRef(Strict):
    name: str = Field(pattern=_K8S_NAME, max_length=253)
    """A Secret in the ModelServing's namespace holding Kafka client settings (SASL, TLS)."""
    key: str = Field("client.properties", min_length=1, max_length=253)
    """The Secret's key whose value is a properties file of librdkafka settings
    (`sasl.password=...`). It is mounted into the driver, never copied into a ConfigMap or status."""


class KafkaSpec(KafkaTopics):
    secret_ref: SecretRef | None = Field(None, alias="secretRef")
    """Kafka credentials and TLS settings, from a Secret."""


class ModelSpec(Strict):
    name: str = Field(min_length=1, max_length=253)
    """The model's name, as it appears in every prediction."""
    version: str = Field(min_length=1, max_length=128)
    """The model's version; changing it rolls the model without restarting the job."""
    format: Literal["pmml", "tensorflow"]
    """pmml (scored by PMML4S in Spark's JVM) or tensorflow (a SavedModel)."""
    uri: str = Field(min_length=1, max_length=262144, pattern=r"^((file|https?|s3|gs)://|/|data:)")
    """Where the model's artifact is: file:// or an absolute path (a mounted volume of the driver),
    http(s)://, s3:// or gs:// (with the fsspec extra), or a data: URI (RFC 2397) carrying a small
    model inline. The job fetches it; an artifact it cannot fetch or load fails the rollout and
    the current model keeps serving."""
    description: str = Field("", max_length=1024)
    """A human description, reported with the serving statistics."""


class RolloutSpec(Strict):
    strategy: Literal["Immediate"] = "Immediate"
    """How a model change is rolled out. Immediate: the next micro-batch uses the new model."""


class Resources(Strict):
    cpu: str = Field("1", pattern=_QUANTITY)
    """CPU request and limit (a Kubernetes quantity, e.g. 500m, 2)."""
    memory: str = Field("2Gi", pattern=_QUANTITY)
    """Memory request and limit (a Kubernetes quantity, e.g. 2Gi)."""


class SparkSpec(SparkTrigger):
    image: str = Field(min_length=1)
    """The runtime image (scorestream with Spark, PMML4S and TensorFlow); driver and executors run it."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field("IfNotPresent", alias="imagePullPolicy")
    """The image pull policy of the driver and executor pods."""
    driver: Resources = Field(default_factory=Resources)
    """The driver pod's resources."""
    executor: Resources = Field(default_factory=Resources)
    """Each executor pod's resources."""


class CheckpointSpec(Strict):
    model_config = Strict.model_config | {"json_schema_extra": _rules(
        ("self == oldSelf", "checkpoint is immutable: it is the driver's volume claim template"))}

    size: str = Field("1Gi", pattern=_QUANTITY)
    """The size of the driver's checkpoint volume."""
    storage_class_name: str | None = Field(None, alias="storageClassName")
    """The storage class of the checkpoint volume (the cluster's default when unset)."""


class ModelServingSpec(Strict):
    """The desired state of one serving job."""

    model_config = Strict.model_config | {"json_schema_extra": _rules(
        ("self.dataType == oldSelf.dataType",
         "dataType is immutable: it keys the model messages this job serves"))}

    data_type: str = Field(alias="dataType", pattern=_DATA_TYPE)
    """The routing key: records whose dataType field has this value are scored by this resource's
    model, and model messages for it apply."""
    kafka: KafkaSpec
    """The Kafka cluster and topics."""
    input: InputConfig = Field(default_factory=InputConfig)
    """How input records are decoded."""
    model: ModelSpec | None = None
    """The desired model. Changing it rolls the model; unset, the job serves what the models topic holds."""
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    """How a model change is rolled out."""
    replicas: int = Field(1, ge=0, le=1000)
    """Spark executors. The scale subresource points here (`kubectl scale`)."""
    spark: SparkSpec
    """The Spark job: image, resources, trigger interval and configuration."""
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    """The driver's checkpoint volume."""
    upgrade_mode: Literal["last-state", "stateless"] = Field("last-state", alias="upgradeMode")
    """How a changed job resumes: last-state from its checkpoint, stateless from the data
    consumer group's committed offsets with a fresh checkpoint."""
    suspend: bool = False
    """Stop the job gracefully, keeping its position; false resumes."""


# --- status -------------------------------------------------------------------------------------

ConditionType = Literal["Ready", "ModelReady", "Progressing", "Degraded"]
Phase = Literal["Pending", "Running", "Suspended", "Degraded", "Failed"]


class Condition(Strict):
    type: ConditionType
    """Ready, ModelReady, Progressing or Degraded."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024)
    """A CamelCase machine-readable reason for the last transition."""
    message: str = Field("", max_length=32768)
    """A human-readable message on the last transition."""
    last_transition_time: str = Field(alias="lastTransitionTime")
    """When the status last changed (RFC 3339)."""
    observed_generation: int = Field(0, alias="observedGeneration", ge=0)
    """The generation of the spec this condition was set for."""


class ServedModel(Strict):
    name: str
    """The model's name."""
    version: str
    """The model's version."""
    since: str | None = None
    """When the job started serving it (RFC 3339)."""


class ModelHistoryEntry(Strict):
    name: str
    """The model's name."""
    version: str
    """The model's version."""
    outcome: Literal["Published", "Serving", "Replaced", "RolledBack"]
    """Published (not yet confirmed by the job), Serving, Replaced (by a later one) or RolledBack."""
    at: str
    """When it reached this outcome (RFC 3339)."""
    reason: str | None = None
    """Why it was rolled back."""


class ModelStatus(Strict):
    current: ServedModel | None = None
    """The model the job reports it serves."""
    desired: ServedModel | None = None
    """The model spec.model asks for."""
    published: str | None = None
    """The rollout id (a digest of the model message) last published for spec.model; the same
    spec is never published twice."""
    history: list[ModelHistoryEntry] = Field(default_factory=list, max_length=10)
    """The last versions rolled out, oldest first, with their outcome."""


class ConsumerGroups(Strict):
    data: str
    """The data topic's consumer group; its lag is the job's backlog."""
    models: str
    """The models topic's group prefix; each run of the job reads the whole topic under its own group."""


class ModelServingStatus(Strict):
    observed_generation: int = Field(0, alias="observedGeneration", ge=0)
    """The spec generation the operator last acted on."""
    phase: Phase = "Pending"
    """Pending, Running, Suspended, Degraded or Failed."""
    conditions: list[Condition] = Field(default_factory=list)
    """Ready, ModelReady, Progressing, Degraded."""
    replicas: int = Field(0, ge=0)
    """Executors the job runs, as it reports them (the scale subresource reads this)."""
    selector: str = ""
    """The label selector of the job's pods (for the scale subresource)."""
    model: ModelStatus = Field(default_factory=ModelStatus)
    """The model served and the model desired."""
    consumer_groups: ConsumerGroups | None = Field(None, alias="consumerGroups")
    """The consumer groups the job uses."""
    lag: int | None = Field(None, ge=0)
    """Records in the data topic not yet processed (the data group's lag)."""
    driver: str | None = None
    """The driver's serving endpoint (http://host:port)."""


def transition_errors(old: ModelServingSpec, new: ModelServingSpec) -> list[str]:
    """The CRD's transition rules (CEL `oldSelf`), for the operator and `render` alike."""
    errors = []
    if old.data_type != new.data_type:
        errors.append("spec.dataType: dataType is immutable: it keys the model messages this job serves")
    if old.checkpoint != new.checkpoint:
        errors.append("spec.checkpoint: checkpoint is immutable: it is the driver's volume claim template")
    return errors
