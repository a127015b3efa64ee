"""The job's configuration: one typed model, rendered by the operator and read by the runtime."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator, model_validator

from scorestream import naming

DURATION_PATTERN = r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|milliseconds?|seconds?|minutes?)\s*$"
_DURATION = re.compile(DURATION_PATTERN)
_K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_TOPIC = r"^[a-zA-Z0-9._-]{1,249}$"


class Strict(BaseModel):
    """Unknown fields are errors: a typo must not silently fall back to a default.

    Attribute docstrings are the fields' descriptions: they reach the CRD (`kubectl explain`).
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_attribute_docstrings=True)


# modelsTopic may be absent: a ModelServing leaves it to the operator (operator/models_route.py).
_DISTINCT_TOPICS = (
    "self.dataTopic != self.outputTopic && self.dataTopic != self.deadLetterTopic"
    " && (!has(self.modelsTopic) || self.dataTopic != self.modelsTopic) && self.outputTopic != self.deadLetterTopic"
)


DEFAULT_MODELS_TOPIC = "scorestream-models"
_UNADDRESSED_OWN_TOPIC = (
    f"!has(self.acceptUnaddressedModels) || !self.acceptUnaddressedModels"
    f" || (has(self.modelsTopic) && self.modelsTopic != '{DEFAULT_MODELS_TOPIC}')"
)
_UNADDRESSED_MESSAGE = (f"acceptUnaddressedModels needs a modelsTopic of your own, not the shared"
                        f" default {DEFAULT_MODELS_TOPIC!r}")

# The per-namespace models topics are the operator's: a tenant's ACLs refuse its job a write there,
# so a spec naming one for data, output or dead letters is refused where it is written.
_NOT_MODELS_PREFIX = " && ".join(f"!self.{field}.startsWith('{naming.MODELS_TOPIC_PREFIX}')"
                                 for field in ("dataTopic", "outputTopic", "deadLetterTopic"))
_NOT_MODELS_PREFIX_MESSAGE = (f"dataTopic, outputTopic and deadLetterTopic may not start with"
                              f" {naming.MODELS_TOPIC_PREFIX!r}: those are the operator's models topics")

_KEYLESS_OWN_TOPIC = (
    "!has(self.keylessModels) || !(self.keylessModels.topic in [self.dataTopic, self.outputTopic,"
    f" self.deadLetterTopic, '{DEFAULT_MODELS_TOPIC}'] || (has(self.modelsTopic)"
    " && self.keylessModels.topic == self.modelsTopic))"
)
_KEYLESS_MESSAGE = (f"keylessModels.topic needs a topic of its own: not dataTopic, outputTopic, deadLetterTopic,"
                    f" modelsTopic nor the shared default {DEFAULT_MODELS_TOPIC!r}")


class KeylessModels(Strict):
    """A models topic for producers that send model messages without a key."""

    topic: str = Field(pattern=_TOPIC)
    """The topic: not compacted (Kafka refuses messages without a key on a compacted topic), so it
    keeps every message for retentionHours. The operator creates it with cleanup.policy=delete,
    or checks the one that exists."""
    retention_hours: int = Field(alias="retentionHours", ge=1, le=876000)
    """How long the topic keeps a model message (its retention.ms). A job restores the newest
    model per dataType that is still there: publish again within this time, or the next start of
    the job finds none."""


class KafkaTopics(Strict):
    """Where a serving job reads and writes: shared by the ModelServing spec and the job config."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [{
            "rule": _DISTINCT_TOPICS,
            "message": "dataTopic must differ from outputTopic, deadLetterTopic and modelsTopic,"
                       " and outputTopic from deadLetterTopic",
        }, {
            "rule": _UNADDRESSED_OWN_TOPIC,
            "message": _UNADDRESSED_MESSAGE,
        }, {
            "rule": _KEYLESS_OWN_TOPIC,
            "message": _KEYLESS_MESSAGE,
        }, {
            "rule": _NOT_MODELS_PREFIX,
            "message": _NOT_MODELS_PREFIX_MESSAGE,
        }]},
    )

    bootstrap_servers: str = Field(alias="bootstrapServers", min_length=1)
    """Kafka bootstrap servers, comma-separated host:port."""
    data_topic: str = Field(alias="dataTopic", pattern=_TOPIC)
    """The topic of records to score."""
    output_topic: str = Field(alias="outputTopic", pattern=_TOPIC)
    """The topic predictions are written to."""
    models_topic: str = Field(DEFAULT_MODELS_TOPIC, alias="modelsTopic", pattern=_TOPIC)
    """The compacted topic of model descriptors; many ModelServings may share it: each takes only
    the messages keyed `<namespace>/<name>/<dataType>` (and `.../candidate`) for itself."""
    accept_unaddressed_models: bool = Field(False, alias="acceptUnaddressedModels")
    """Also take model messages in the legacy layout, keyed by dataType alone (`<dataType>`,
    `<dataType>/candidate`). Whoever writes such a message to the topic reaches every ModelServing
    that opts in on it, so this needs a modelsTopic of your own (not the shared default)."""
    keyless_models: KeylessModels | None = Field(None, alias="keylessModels")
    """Also take model messages without a key, from a second models topic that is not compacted
    (docs/model-messages.md): the newest message per dataType serves, as for the unaddressed ones.
    Whoever writes to that topic reaches every ModelServing that reads it: a topic of your own."""
    dead_letter_topic: str = Field(alias="deadLetterTopic", pattern=_TOPIC)
    """Records that cannot be decoded or scored go here unchanged, with headers saying why."""
    properties: dict[str, str] = Field(default_factory=dict)
    """Client settings (librdkafka names) that are not secret: security.protocol, sasl.mechanism..."""
    starting_offsets: Literal["group", "earliest", "latest"] = Field("group", alias="startingOffsets")
    """Where a new job starts: `group` = the data group's committed offsets, partitions without a
    commit from the earliest offset (a serving job must not skip records it never saw)."""
    max_offsets_per_trigger: int | None = Field(None, alias="maxOffsetsPerTrigger", gt=0)
    """At most this many records per micro-batch (unbounded when unset)."""

    @model_validator(mode="after")
    def _distinct_topics(self) -> KafkaTopics:
        if self.data_topic in (self.output_topic, self.dead_letter_topic, self.models_topic):
            raise ValueError("dataTopic must differ from outputTopic, deadLetterTopic and modelsTopic")
        if self.output_topic == self.dead_letter_topic:
            raise ValueError("outputTopic and deadLetterTopic must differ")
        if any(t.startswith(naming.MODELS_TOPIC_PREFIX) for t in (self.data_topic, self.output_topic,
                                                                   self.dead_letter_topic)):
            raise ValueError(_NOT_MODELS_PREFIX_MESSAGE)
        if self.accept_unaddressed_models and self.models_topic == DEFAULT_MODELS_TOPIC:
            raise ValueError(_UNADDRESSED_MESSAGE)
        if self.keyless_models is not None and self.keyless_models.topic in (
                self.data_topic, self.output_topic, self.dead_letter_topic, self.models_topic, DEFAULT_MODELS_TOPIC):
            raise ValueError(_KEYLESS_MESSAGE)
        return self


class KafkaCredentialFiles(Strict):
    """Where the job finds the Kafka credentials that spec.kafka.tls and spec.kafka.authentication
    name (Strimzi's KafkaUser and cluster CA Secrets), mounted into the driver and every executor:
    paths only, never a value (scorestream/kafka_auth.py reads them)."""

    tls: bool = False
    """Connections are encrypted (security.protocol SSL, or SASL_SSL with SCRAM)."""
    ca_files: list[str] = Field(default_factory=list, alias="caFiles")
    """PEM files of the certificates trusted for the brokers (none: the system's)."""
    mechanism: Literal["tls", "scram-sha-512"] | None = None
    """How the client authenticates: a client certificate (tls) or SCRAM-SHA-512; none: not at all."""
    certificate_file: str | None = Field(None, alias="certificateFile")
    """tls: the client's PEM certificate (Strimzi's user.crt)."""
    key_file: str | None = Field(None, alias="keyFile")
    """tls: its PEM private key, PKCS#8 (Strimzi's user.key)."""
    keystore_file: str | None = Field(None, alias="keystoreFile")
    """tls: a PKCS#12 keystore instead (Strimzi's user.p12)."""
    keystore_password_file: str | None = Field(None, alias="keystorePasswordFile")
    """tls: the file holding the keystore's password (Strimzi's user.password)."""
    username: str | None = None
    """scram-sha-512: the user's name (the KafkaUser's name)."""
    password_file: str | None = Field(None, alias="passwordFile")
    """scram-sha-512: the file holding the password (Strimzi's password key)."""


class KafkaConfig(KafkaTopics):
    # A file of `key=value` client settings mounted from a Secret (sasl.password, ssl keys...):
    # read at start, never copied into the config, logs or status.
    secret_properties_file: str | None = Field(None, alias="secretPropertiesFile")
    credentials: KafkaCredentialFiles | None = None

    def settings_properties(self) -> dict[str, str]:
        """The settings as given (properties and the Secret's file), before any credentials."""
        props = {"bootstrap.servers": self.bootstrap_servers, **self.properties}
        if self.secret_properties_file:
            props.update(read_properties(Path(self.secret_properties_file)))
        return props

    def client_properties(self) -> dict[str, str]:
        """librdkafka settings for every client of this job, secrets included."""
        props = self.settings_properties()
        if self.credentials is not None:
            from scorestream.kafka_auth import credentials_from_files

            props.update(credentials_from_files(self.credentials).librdkafka())
        return props


def read_properties(path: Path) -> dict[str, str]:
    try:
        return read_properties_text(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def read_properties_text(text: str) -> dict[str, str]:
    """A Java properties file of `key=value` lines (comments: `#`, `!`).

    The text is a Secret's: an error names the line by number only, because a malformed line may
    be a password pasted without its key, and errors reach logs, status and Events."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"line {number} has no '=' (key=value expected)")
            out[key.strip()] = value.strip()
    return out


class ProtobufInput(Strict):
    descriptor_file: str | None = Field(None, alias="descriptorFile")
    """A FileDescriptorSet (protoc --descriptor_set_out) in the job's filesystem; without one, the
    legacy messages (WineRecord) built into scorestream are used."""
    message_type: str = Field("WineRecord", alias="messageType", min_length=1)
    """The message type of input records."""


class InputConfig(Strict):
    format: Literal["json", "protobuf"] = "json"
    """How input records are encoded: JSON objects or protobuf messages."""
    data_type_field: str = Field("dataType", alias="dataTypeField", min_length=1)
    """The record field that routes a record to the model of its dataType."""
    fields: list[str] | None = None
    """The record's feature fields in order. A model whose inputs are not among them is rejected
    at load time, and a TensorFlow model with one dense input reads them in this order."""
    protobuf: ProtobufInput = Field(default_factory=ProtobufInput)
    """Protobuf decoding, when format is protobuf."""


class HttpConfig(Strict):
    host: str = "0.0.0.0"
    # The control port: every endpoint, POST /executors among them (the operator's).
    port: int = Field(8080, ge=0, le=65535)
    # A port of its own for the read-only endpoints (/metrics, /stats, /models, /healthz, /readyz):
    # what monitoring and probes reach. Unset: only the control port.
    metrics_port: int | None = Field(None, alias="metricsPort", ge=0, le=65535)
    # A file holding the bearer token POST /executors requires (the operator's Secret, mounted).
    # Unset: the mutating endpoint is refused to everyone.
    control_token_file: str | None = Field(None, alias="controlTokenFile")


WARM_UP_BATCHES = 300


class SparkTrigger(Strict):
    """What the spec and the job config say alike about a streaming query."""

    trigger: Literal["processingTime", "realTime"] = "processingTime"
    """How the query runs. processingTime: a micro-batch every triggerInterval. realTime: Spark's
    real-time mode, one long task per data-topic partition writing each prediction as soon as its
    record is scored (p50 a few ms instead of about the interval), except at each batch's end,
    where reading stops while Spark plans and launches the next batch: 0.05-0.15 s on 2 cores,
    in a new job too, which warms that path up before it reads (warmUpBatches). With 5s batches
    those pauses are the p99; with 10s batches they reach fewer than 1 record in 100, and the p99
    is the records' own path (17-50 ms at half the peak rate on 2 cores).
    triggerInterval, at least 5s, is then how often progress is checkpointed, when a new model
    takes over, how much a restart reads again and how long a graceful stop may wait. realTime
    serves PMML models only (it runs no Python), takes no kafka.maxOffsetsPerTrigger, needs a task
    slot per data-topic partition, and changes executors by restarting the job."""
    trigger_interval: str = Field("1s", alias="triggerInterval", json_schema_extra={"pattern": DURATION_PATTERN})
    """How often a micro-batch starts: '500ms', '1s', '2 minutes' (with realTime: how long each batch runs)."""
    warm_up_batches: int = Field(WARM_UP_BATCHES, alias="warmUpBatches", ge=0, le=10_000)
    """With trigger realTime: before it reads its first record, the job runs its own query this
    many times as small micro-batches of generated records that it drops unread (nothing is
    scored, counted or written), so the code Spark runs at every batch end is compiled before
    the first real one: a new job's first pauses are then about a warm job's, not two to three
    times them. About 20 s at the start on 2 cores (at most 2 minutes), not ready meanwhile; 0:
    none. Ignored with processingTime."""
    conf: dict[str, str] = Field(default_factory=dict)
    """Spark configuration (spark.* keys) for the job."""

    @field_validator("trigger_interval")
    @classmethod
    def _duration(cls, v: str) -> str:
        if not _DURATION.match(v):
            raise ValueError("must be a duration such as '500ms', '1s' or '2 minutes'")
        return v

    @model_validator(mode="after")
    def _real_time_batch(self) -> "SparkTrigger":
        if self.real_time and self.trigger_seconds() < REAL_TIME_MIN_SECONDS:
            raise ValueError(f"trigger realTime takes a triggerInterval of at least {REAL_TIME_MIN_SECONDS:g}s"
                             f" (Spark's shortest real-time batch), not {self.trigger_interval!r}")
        return self

    @property
    def real_time(self) -> bool:
        return self.trigger == "realTime"

    def trigger_seconds(self) -> float:
        return duration_seconds(self.trigger_interval)


# Spark refuses shorter real-time batches (INVALID_STREAMING_REAL_TIME_MODE_TRIGGER_INTERVAL).
REAL_TIME_MIN_SECONDS = 5.0
REAL_TIME_PMML_ONLY = "trigger realTime serves PMML models only: a real-time query runs no Python, and TensorFlow scores there"
REAL_TIME_NO_MAX_OFFSETS = "trigger realTime takes no kafka.maxOffsetsPerTrigger: a real-time batch reads for its whole interval"


def check_real_time_offsets(spark: SparkTrigger, kafka: KafkaTopics) -> None:
    """What the spec and the job config both refuse: a per-batch bound in a query without one."""
    if spark.real_time and kafka.max_offsets_per_trigger:
        raise ValueError(REAL_TIME_NO_MAX_OFFSETS)


class DeliverySetting(Strict):
    """What the spec and the job config say alike about delivery."""

    delivery: Literal["atLeastOnce", "exactlyOnce"] = "atLeastOnce"
    """atLeastOnce: after a failure (a killed driver or executor) the batch in flight is written
    again, so a prediction or dead letter may appear twice. exactlyOnce: each task writes an input
    partition's predictions and dead letters in a Kafka transaction that also commits the data
    group's offset, so read_committed consumers see each exactly once through failures, retries,
    upgrades and rescales (docs/delivery.md). Predictions become visible to them when their
    batch's transaction commits: about a trigger interval after their record arrived, also with
    trigger realTime (a transaction per partition and real-time batch). It takes no
    spark.speculation, and leaves the producer's transactional.id, acks and enable.idempotence
    and the consumer's isolation.level to the job."""


EXACTLY_ONCE_NO_SPECULATION = ("delivery exactlyOnce takes no spark.speculation: two attempts of one task would"
                               " fence each other's transactions in turn")
# Kafka settings the transactional sink sets itself; another value would break the promise.
EXACTLY_ONCE_KAFKA_KEYS = ("transactional.id", "enable.idempotence", "acks", "isolation.level")
EXACTLY_ONCE_KAFKA = ("delivery exactlyOnce sets the Kafka settings transactional.id, enable.idempotence, acks"
                      " and isolation.level itself: remove them from kafka.properties")


def check_delivery(delivery: str, spark: SparkTrigger, kafka: KafkaTopics) -> None:
    """What the spec and the job config both refuse with exactlyOnce (CEL says the same in the CRD)."""
    if delivery != "exactlyOnce":
        return
    if spark.conf.get("spark.speculation", "false").strip(" \t").lower() == "true":  # as Spark reads it
        raise ValueError(EXACTLY_ONCE_NO_SPECULATION)
    if any(k in kafka.properties for k in EXACTLY_ONCE_KAFKA_KEYS):
        raise ValueError(EXACTLY_ONCE_KAFKA)


def duration_seconds(text: str) -> float:
    """'500ms', '1s', '2 minutes' in seconds (text that matched DURATION_PATTERN)."""
    m = _DURATION.match(text)
    if m is None:
        raise ValueError(f"not a duration: {text!r}")
    value, unit = float(m.group(1)), m.group(2)
    if unit == "ms" or unit.startswith("milli"):
        return value / 1000
    if unit == "m" or unit.startswith("min"):
        return value * 60
    return value


class SparkConfig(SparkTrigger):
    master: str = "local[2]"


# Never model sources, whatever the configuration says: devices, kernel and process state.
_SYSTEM_DIRS = ("/dev", "/proc", "/sys")


_ENDPOINT = r"^https?://[^/?#@\s]+/?$"
_REGION = r"^[a-z0-9-]{1,32}$"
_HOST = r"^[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?$"


class S3Endpoint(Strict):
    """Where s3:// locations are fetched from: shared by the spec (spec.modelStore.s3) and the job config."""

    endpoint: str | None = Field(None, pattern=_ENDPOINT, max_length=1024)
    """An S3-compatible endpoint (MinIO, Ceph, a cloud's S3 API): https://host[:port], buckets
    addressed by path. Unset: AWS S3 in `region`. It passes the same address check as an http(s)
    location (the chart's artifacts.allowedNetworks for an in-cluster store)."""
    region: str = Field("us-east-1", pattern=_REGION)
    """The region requests are signed for (SigV4)."""
    workload_identity: bool = Field(False, alias="workloadIdentity")
    """Sign with the pod's own identity, AWS's default credential chain (IRSA: the web identity
    token and role the EKS pod identity webhook sets in the environment; EKS Pod Identity; the
    instance's role), instead of a Secret. Neither set: requests are unsigned (public buckets)."""


class GcsEndpoint(Strict):
    """Where gs:// locations are fetched from: shared by the spec (spec.modelStore.gcs) and the job config."""

    endpoint: str | None = Field(None, pattern=_ENDPOINT, max_length=1024)
    """Google Cloud Storage's JSON API at another address (an emulator, a private endpoint):
    http(s)://host[:port]. Unset: https://storage.googleapis.com. It passes the same address check
    as an http(s) location."""
    workload_identity: bool = Field(False, alias="workloadIdentity")
    """Use the pod's own identity, Google's Application Default Credentials (GKE Workload
    Identity: the node's metadata server answers for the pod's Kubernetes ServiceAccount),
    instead of a Secret. Neither set: requests carry no token (public objects)."""


class BearerHosts(Strict):
    """https locations that get a bearer token: shared by the spec (spec.modelStore.https) and the job config."""

    hosts: list[Annotated[str, StringConstraints(pattern=_HOST, max_length=260)]] = Field(min_length=1, max_length=64)
    """The hosts (host, or host:port when not 443) the token is sent to; a location elsewhere, a
    redirect to another host and every http:// location get no token: a models-topic writer
    names the location, and must not be able to collect the token."""


class S3Access(S3Endpoint):
    # A mounted Secret's folder: files AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and optionally
    # AWS_SESSION_TOKEN, read at each fetch (a rotated Secret is used without a restart).
    credentials_dir: str | None = Field(None, alias="credentialsDir")


class GcsAccess(GcsEndpoint):
    # A mounted service-account key (JSON), read at each fetch.
    service_account_file: str | None = Field(None, alias="serviceAccountFile")


class BearerAccess(BearerHosts):
    # A mounted file holding the token, read at each fetch.
    token_file: str = Field(alias="tokenFile")


class StoreAccess(Strict):
    """How the job reaches object stores and token-protected https locations: file paths of
    mounted Secrets, never the credentials themselves."""

    s3: S3Access | None = None
    gcs: GcsAccess | None = None
    https: BearerAccess | None = None


class ArtifactPolicy(Strict):
    """What a model message may make the driver fetch and unpack. Models-topic writers are not
    trusted with the driver's files, memory, disk or time: every limit here is a rejection, never a
    truncation."""

    schemes: list[Literal["file", "http", "https", "s3", "gs"]] = ["file", "http", "https", "s3", "gs"]
    """Location schemes a descriptor may use (an absolute path counts as file)."""
    model_dirs: list[str] = Field(["/models"], alias="modelDirs")
    """file:// locations and paths must resolve (symlinks followed) to a file or folder under one of
    these: the volumes or image folders meant for models, never the job's own config and Secrets."""
    max_inline_bytes: int = Field(64 << 20, alias="maxInlineBytes", gt=0)
    """The largest model carried in the message itself."""
    max_fetch_bytes: int = Field(512 << 20, alias="maxFetchBytes", gt=0)
    """The largest artifact fetched from a location."""
    max_unpacked_bytes: int = Field(1 << 30, alias="maxUnpackedBytes", gt=0)
    """The most bytes a SavedModel archive (or folder) may hold once unpacked."""
    max_compression_ratio: float = Field(100.0, alias="maxCompressionRatio", gt=1)
    """Unpacked bytes per archive byte: a SavedModel's weights barely compress, a zip bomb does."""
    max_members: int = Field(10_000, alias="maxMembers", gt=0)
    """The most files and folders in a SavedModel archive (or folder)."""
    fetch_timeout_seconds: float = Field(120.0, alias="fetchTimeoutSeconds", gt=0)
    """The whole fetch, from connecting to the last byte: a source that drips slower is rejected."""
    max_redirects: int = Field(5, alias="maxRedirects", ge=0)
    """HTTP redirects followed (to http or https only)."""
    allowed_networks: list[str] = Field([], alias="allowedNetworks")
    """Non-public networks (CIDRs) an http(s), s3 or gs fetch may connect to (an object store's
    endpoint included). Every other loopback, private,
    link-local (cloud metadata), shared or reserved address is refused, checked on the addresses
    DNS answers and again after every redirect. The cluster admin's to set (the chart's
    artifacts.allowedNetworks, rendered by the operator); a spec cannot."""
    stores: StoreAccess | None = None
    """Credentials and endpoints for s3://, gs:// and bearer-token https:// locations (from
    spec.modelStore); unset: unsigned requests to the public endpoints."""

    @field_validator("allowed_networks")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        for cidr in v:
            ipaddress.ip_network(cidr, strict=False)  # a ValueError names the bad one
        return v

    @field_validator("model_dirs")
    @classmethod
    def _model_dirs(cls, dirs: list[str]) -> list[str]:
        for d in dirs:
            if not d.startswith("/"):
                raise ValueError(f"model directory {d!r} is not an absolute path")
            norm = "/" + d.strip("/")
            if norm == "/" or any(norm == s or norm.startswith(s + "/") for s in _SYSTEM_DIRS):
                raise ValueError(f"model directory {d!r} would expose the whole filesystem or system files")
        return dirs


class JobConfig(DeliverySetting):
    """One serving job: what to read, where to write, which dataTypes to serve, where to keep state."""

    name: str = Field(pattern=_K8S_NAME, max_length=63)
    namespace: str = Field("default", pattern=_K8S_NAME, max_length=63)
    # The dataTypes this job serves; it waits for a model for each before it starts scoring.
    # Empty: any dataType that has a model.
    data_types: list[str] = Field(default_factory=list, alias="dataTypes")
    kafka: KafkaConfig
    input: InputConfig = Field(default_factory=InputConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    checkpoint_location: str = Field(alias="checkpointLocation", min_length=1)
    # last-state: a restarted job resumes from its checkpoint. stateless: each configuration has a
    # checkpoint of its own and starts from the data group's committed offsets; older stateless
    # checkpoints next to it are removed at start.
    upgrade_mode: Literal["last-state", "stateless"] = Field("last-state", alias="upgradeMode")
    # What a model message may make the driver fetch and unpack.
    artifacts: ArtifactPolicy = Field(default_factory=ArtifactPolicy)
    # Scratch space for model files handed to executors.
    work_dir: str = Field("/tmp/scorestream", alias="workDir", min_length=1)
    # How long the driver waits for the models topic replay before it gives up starting.
    restore_timeout_seconds: float = Field(60.0, alias="restoreTimeoutSeconds", gt=0)
    # Stop after this many seconds with no data (0: run until stopped). For demos and tests.
    idle_stop_seconds: float = Field(0.0, alias="idleStopSeconds", ge=0)

    @model_validator(mode="after")
    def _real_time(self) -> "JobConfig":
        check_real_time_offsets(self.spark, self.kafka)
        check_delivery(self.delivery, self.spark, self.kafka)
        return self

    @property
    def exactly_once(self) -> bool:
        return self.delivery == "exactlyOnce"

    @property
    def data_group(self) -> str:
        return naming.data_group(self.namespace, self.name)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True, indent=2)

    def hashed_json(self) -> str:
        """``to_json`` without what a default of a field added later would add: the same text, so
        the same configuration hash, as before that field existed (an operator upgrade must not
        roll every driver)."""
        spark = {name for name, default in (("trigger", "processingTime"), ("warm_up_batches", WARM_UP_BATCHES))
                 if getattr(self.spark, name) == default}
        exclude: dict = {"spark": spark} if spark else {}
        if self.delivery == "atLeastOnce":
            exclude["delivery"] = True
        return self.model_dump_json(by_alias=True, exclude_none=True, indent=2, exclude=exclude or None)


class ConfigError(ValueError):
    """A configuration that cannot run, with every offending field named."""


def load_job_config(path: str | Path) -> JobConfig:
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"cannot read job config {path}: {e}") from e
    return parse_job_config(raw, source=str(path))


def parse_job_config(raw: object, source: str = "job config") -> JobConfig:
    try:
        return JobConfig.model_validate(raw)
    except ValidationError as e:
        lines = [f"{source} is invalid:"]
        for err in e.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            lines.append(f"  {where}: {err['msg']}")
        raise ConfigError("\n".join(lines)) from None
