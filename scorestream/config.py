"""The job's configuration: one typed model, rendered by the operator and read by the runtime."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from scorestream import naming

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|milliseconds?|seconds?|minutes?)\s*$")
_K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_TOPIC = r"^[a-zA-Z0-9._-]{1,249}$"


class Strict(BaseModel):
    """Unknown fields are errors: a typo must not silently fall back to a default."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class KafkaConfig(Strict):
    bootstrap_servers: str = Field(alias="bootstrapServers", min_length=1)
    data_topic: str = Field(alias="dataTopic", pattern=_TOPIC)
    output_topic: str = Field(alias="outputTopic", pattern=_TOPIC)
    models_topic: str = Field("scorestream-models", alias="modelsTopic", pattern=_TOPIC)
    dead_letter_topic: str = Field(alias="deadLetterTopic", pattern=_TOPIC)
    # Client settings (librdkafka names) that are not secret: security.protocol, sasl.mechanism...
    properties: dict[str, str] = Field(default_factory=dict)
    # A file of `key=value` client settings mounted from a Secret (sasl.password, ssl keys...):
    # read at start, never copied into the config, logs or status.
    secret_properties_file: str | None = Field(None, alias="secretPropertiesFile")
    # Where a new job starts: `group` = the data group's committed offsets, partitions without a
    # commit from `earliest` (a serving job must not skip records it never saw).
    starting_offsets: Literal["group", "earliest", "latest"] = Field("group", alias="startingOffsets")
    max_offsets_per_trigger: int | None = Field(None, alias="maxOffsetsPerTrigger", gt=0)

    @model_validator(mode="after")
    def _distinct_topics(self) -> KafkaConfig:
        if self.data_topic in (self.output_topic, self.dead_letter_topic, self.models_topic):
            raise ValueError("dataTopic must differ from outputTopic, deadLetterTopic and modelsTopic")
        if self.output_topic == self.dead_letter_topic:
            raise ValueError("outputTopic and deadLetterTopic must differ")
        return self

    def client_properties(self) -> dict[str, str]:
        """librdkafka settings for every client of this job, secrets included."""
        props = {"bootstrap.servers": self.bootstrap_servers, **self.properties}
        if self.secret_properties_file:
            props.update(read_properties(Path(self.secret_properties_file)))
        return props


def read_properties(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"{path}: line without '=': {key[:40]!r}")
            out[key.strip()] = value.strip()
    return out


class ProtobufInput(Strict):
    # A FileDescriptorSet (protoc --descriptor_set_out); without one, the report's messages
    # (WineRecord) built into scorestream are used.
    descriptor_file: str | None = Field(None, alias="descriptorFile")
    message_type: str = Field("WineRecord", alias="messageType")


class InputConfig(Strict):
    format: Literal["json", "protobuf"] = "json"
    # The record field that routes a record to its model.
    data_type_field: str = Field("dataType", alias="dataTypeField", min_length=1)
    # The record's feature fields in order. A model whose inputs are not among them is rejected
    # at load time, and a TensorFlow model with one dense input reads them in this order.
    fields: list[str] | None = None
    protobuf: ProtobufInput = Field(default_factory=ProtobufInput)


class HttpConfig(Strict):
    host: str = "0.0.0.0"
    port: int = Field(8080, ge=0, le=65535)


class SparkConfig(Strict):
    master: str = "local[2]"
    trigger_interval: str = Field("1s", alias="triggerInterval")
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("trigger_interval")
    @classmethod
    def _duration(cls, v: str) -> str:
        if not _DURATION.match(v):
            raise ValueError("must be a duration such as '500ms', '1s' or '2 minutes'")
        return v

    def trigger_seconds(self) -> float:
        m = _DURATION.match(self.trigger_interval)
        assert m is not None
        value, unit = float(m.group(1)), m.group(2)
        if unit == "ms" or unit.startswith("milli"):
            return value / 1000
        if unit == "m" or unit.startswith("min"):
            return value * 60
        return value


class JobConfig(Strict):
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
    # Scratch space for model files handed to executors.
    work_dir: str = Field("/tmp/scorestream", alias="workDir", min_length=1)
    # How long the driver waits for the models topic replay before it gives up starting.
    restore_timeout_seconds: float = Field(60.0, alias="restoreTimeoutSeconds", gt=0)
    # Stop after this many seconds with no data (0: run until stopped). For demos and tests.
    idle_stop_seconds: float = Field(0.0, alias="idleStopSeconds", ge=0)

    @property
    def data_group(self) -> str:
        return naming.data_group(self.namespace, self.name)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True, indent=2)


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
