"""The job's configuration: one typed model, rendered by the operator and read by the runtime."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Annotated, Literal, Protocol

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


DEFAULT_MODELS_TOPIC = "scorestream-models"
UNADDRESSED_MESSAGE = (f"acceptUnaddressedModels needs a modelsTopic of your own, not the shared"
                       f" default {DEFAULT_MODELS_TOPIC!r}")


def _not_models_prefix_message(prefix: str) -> str:
    return (f"dataTopic, outputTopic and deadLetterTopic may not start with {prefix!r}: those are the"
            f" operator's models topics")


NOT_MODELS_PREFIX_MESSAGE = _not_models_prefix_message(naming.MODELS_TOPIC_PREFIX)
KEYLESS_MESSAGE = (f"keylessModels.topic needs a topic of its own: not dataTopic, outputTopic, deadLetterTopic,"
                   f" modelsTopic nor the shared default {DEFAULT_MODELS_TOPIC!r}")


class Topics(Protocol):
    """What the topic rules read: the spec's kafka (scorestream.api) and the job config's alike."""

    data_topic: str
    output_topic: str
    dead_letter_topic: str
    accept_unaddressed_models: bool
    properties: dict[str, str]
    max_offsets_per_trigger: int | None

    @property
    def models_topic(self) -> str | None: ...

    @property
    def keyless_models(self) -> "KeylessModels | None": ...


def under_models_prefix(kafka: Topics, prefix: str = naming.MODELS_TOPIC_PREFIX) -> str | None:
    """Why the data, output or dead-letter topic is not the tenant's to name: one is under the
    models topics' `prefix` (the default here and in the CRD; the operator checks the chart's too).
    None where none is."""
    if any(t.startswith(prefix) for t in (kafka.data_topic, kafka.output_topic, kafka.dead_letter_topic)):
        return _not_models_prefix_message(prefix)
    return None


def check_topics(kafka: Topics) -> None:
    """The topic rules the spec (where CEL says the same in the CRD) and the job config both keep.
    A spec's unset modelsTopic is the operator's to assign: none of these rules apply to it."""
    models = kafka.models_topic
    if kafka.data_topic in (kafka.output_topic, kafka.dead_letter_topic, models):
        raise ValueError("dataTopic must differ from outputTopic, deadLetterTopic and modelsTopic")
    if kafka.output_topic == kafka.dead_letter_topic:
        raise ValueError("outputTopic and deadLetterTopic must differ")
    if under_models_prefix(kafka) is not None:
        raise ValueError(NOT_MODELS_PREFIX_MESSAGE)
    if kafka.accept_unaddressed_models and models in (None, DEFAULT_MODELS_TOPIC):
        raise ValueError(UNADDRESSED_MESSAGE)
    keyless = kafka.keyless_models
    if keyless is not None and keyless.topic in (kafka.data_topic, kafka.output_topic, kafka.dead_letter_topic,
                                                 models, DEFAULT_MODELS_TOPIC):
        raise ValueError(KEYLESS_MESSAGE)


class KeylessModels(Strict):
    # A second models topic, not compacted, of messages without a key (spec.kafka.keylessModels).
    topic: str = Field(pattern=_TOPIC)
    retention_hours: int = Field(alias="retentionHours", ge=1, le=876000)


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


class KafkaConfig(Strict):
    """Where the job reads and writes (the operator's mapping of spec.kafka, docs in the spec)."""

    bootstrap_servers: str = Field(alias="bootstrapServers", min_length=1)
    data_topic: str = Field(alias="dataTopic", pattern=_TOPIC)
    output_topic: str = Field(alias="outputTopic", pattern=_TOPIC)
    # The models topic the job reads: the operator assigns one where the spec names none.
    models_topic: str = Field(DEFAULT_MODELS_TOPIC, alias="modelsTopic", pattern=_TOPIC)
    accept_unaddressed_models: bool = Field(False, alias="acceptUnaddressedModels")
    keyless_models: KeylessModels | None = Field(None, alias="keylessModels")
    dead_letter_topic: str = Field(alias="deadLetterTopic", pattern=_TOPIC)
    # Client settings that are not secret (librdkafka names).
    properties: dict[str, str] = Field(default_factory=dict)
    starting_offsets: Literal["group", "earliest", "latest"] = Field("group", alias="startingOffsets")
    max_offsets_per_trigger: int | None = Field(None, alias="maxOffsetsPerTrigger", gt=0)
    # A file of `key=value` client settings mounted from a Secret (sasl.password, ssl keys...):
    # read at start, never copied into the config, logs or status.
    secret_properties_file: str | None = Field(None, alias="secretPropertiesFile")
    credentials: KafkaCredentialFiles | None = None

    @model_validator(mode="after")
    def _topics(self) -> "KafkaConfig":
        check_topics(self)
        return self

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
    # None: the legacy messages (WineRecord) built into scorestream.
    descriptor_file: str | None = Field(None, alias="descriptorFile")
    message_type: str = Field("WineRecord", alias="messageType", min_length=1)


class InputConfig(Strict):
    """How the job decodes records (the operator's mapping of spec.input, docs in the spec)."""

    format: Literal["json", "protobuf"] = "json"
    data_type_field: str = Field("dataType", alias="dataTypeField", min_length=1)
    fields: list[str] | None = None
    protobuf: ProtobufInput = Field(default_factory=ProtobufInput)


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


class Trigger(Protocol):
    """What the query rules read: the spec's spark (scorestream.api) and the job config's alike."""

    trigger: str
    trigger_interval: str
    conf: dict[str, str]


def check_duration(text: str) -> str:
    """A field validator: a duration Spark takes."""
    if not _DURATION.match(text):
        raise ValueError("must be a duration such as '500ms', '1s' or '2 minutes'")
    return text


def check_trigger(spark: Trigger) -> None:
    """No real-time batch shorter than Spark's shortest."""
    if spark.trigger == "realTime" and duration_seconds(spark.trigger_interval) < REAL_TIME_MIN_SECONDS:
        raise ValueError(f"trigger realTime takes a triggerInterval of at least {REAL_TIME_MIN_SECONDS:g}s"
                         f" (Spark's shortest real-time batch), not {spark.trigger_interval!r}")


# Spark refuses shorter real-time batches (INVALID_STREAMING_REAL_TIME_MODE_TRIGGER_INTERVAL).
REAL_TIME_MIN_SECONDS = 5.0
REAL_TIME_NO_MAX_OFFSETS = "trigger realTime takes no kafka.maxOffsetsPerTrigger: a real-time batch reads for its whole interval"


def check_real_time_offsets(spark: Trigger, kafka: Topics) -> None:
    """What the spec and the job config both refuse: a per-batch bound in a query without one."""
    if spark.trigger == "realTime" and kafka.max_offsets_per_trigger:
        raise ValueError(REAL_TIME_NO_MAX_OFFSETS)


EXACTLY_ONCE_NO_SPECULATION = ("delivery exactlyOnce takes no spark.speculation: two attempts of one task would"
                               " fence each other's transactions in turn")
# Kafka settings the transactional sink sets itself; another value would break the promise.
EXACTLY_ONCE_KAFKA_KEYS = ("transactional.id", "enable.idempotence", "acks", "isolation.level")
EXACTLY_ONCE_KAFKA = ("delivery exactlyOnce sets the Kafka settings transactional.id, enable.idempotence, acks"
                      " and isolation.level itself: remove them from kafka.properties")


def check_delivery(delivery: str, spark: Trigger, kafka: Topics) -> None:
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


class TriggerRules(Strict):
    """The trigger's rules and readings, for the spec's spark (scorestream.api) and the job's alike.
    No fields: each declares its own (the spec's documented for users), so neither changes the other."""

    _interval = field_validator("trigger_interval", check_fields=False)(check_duration)

    @model_validator(mode="after")
    def _trigger(self) -> "TriggerRules":
        check_trigger(self)  # type: ignore[arg-type]  # the subclass has the fields
        return self

    @property
    def real_time(self) -> bool:
        return getattr(self, "trigger") == "realTime"

    def trigger_seconds(self) -> float:
        return duration_seconds(getattr(self, "trigger_interval"))


class SparkConfig(TriggerRules):
    """The streaming query (the operator's mapping of spec.spark, docs in the spec)."""

    trigger: Literal["processingTime", "realTime"] = "processingTime"
    trigger_interval: str = Field("1s", alias="triggerInterval")
    warm_up_batches: int = Field(WARM_UP_BATCHES, alias="warmUpBatches", ge=0, le=10_000)
    conf: dict[str, str] = Field(default_factory=dict)
    master: str = "local[2]"


# Never model sources, whatever the configuration says: devices, kernel and process state.
_SYSTEM_DIRS = ("/dev", "/proc", "/sys")


_ENDPOINT = r"^https?://[^/?#@\s]+/?$"
_REGION = r"^[a-z0-9-]{1,32}$"
_HOST = r"^[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?$"


class S3Access(Strict):
    endpoint: str | None = Field(None, pattern=_ENDPOINT, max_length=1024)
    region: str = Field("us-east-1", pattern=_REGION)
    workload_identity: bool = Field(False, alias="workloadIdentity")
    # A mounted Secret's folder: files AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and optionally
    # AWS_SESSION_TOKEN, read at each fetch (a rotated Secret is used without a restart).
    credentials_dir: str | None = Field(None, alias="credentialsDir")


class GcsAccess(Strict):
    endpoint: str | None = Field(None, pattern=_ENDPOINT, max_length=1024)
    workload_identity: bool = Field(False, alias="workloadIdentity")
    # A mounted service-account key (JSON), read at each fetch.
    service_account_file: str | None = Field(None, alias="serviceAccountFile")


class BearerAccess(Strict):
    # The token goes to these hosts only (spec.modelStore.https.hosts).
    hosts: list[Annotated[str, StringConstraints(pattern=_HOST, max_length=260)]] = Field(min_length=1, max_length=64)
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


class JobConfig(Strict):
    """One serving job: what to read, where to write, which dataTypes to serve, where to keep state."""

    delivery: Literal["atLeastOnce", "exactlyOnce"] = "atLeastOnce"
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
