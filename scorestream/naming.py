"""Every name that two parts of scorestream must agree on, in one place."""

from __future__ import annotations

import uuid
from dataclasses import dataclass


def data_group(namespace: str, name: str) -> str:
    """The data topic's consumer group: one per ModelServing, shared by all its executors.

    Two ModelServings reading one data topic get two groups, so both see every record.
    """
    return f"scorestream.{namespace}.{name}"


def source_group_prefix(namespace: str, name: str) -> str:
    """The prefix of the groups Spark's Kafka source reads with (it adds a unique suffix and never
    commits); progress is committed to ``data_group`` by the driver."""
    return f"{data_group(namespace, name)}.source"


def transactional_prefix(namespace: str, name: str, data_topic: str) -> str:
    """The transactional ids of a ``delivery: exactlyOnce`` job's writers, one per data-topic
    partition (``<prefix>-<partition>``): the same in every run, attempt and executor, so a
    writer fences every earlier one of its partition (docs/adr/0026)."""
    return f"{data_group(namespace, name)}.tx.{data_topic}"


def models_group(namespace: str, name: str, run_id: str | None = None) -> str:
    """The models topic's group: one per run, so every job (and every restart) reads all models."""
    return f"{data_group(namespace, name)}.models.{run_id or uuid.uuid4().hex[:12]}"


CANDIDATE = "candidate"


def model_key(namespace: str, name: str, data_type: str, candidate: bool = False) -> str:
    """The models topic's message key for one ModelServing: ``<namespace>/<name>/<dataType>``, and
    ``.../candidate`` for its canary or shadow. Compaction keeps the latest message per key, and a
    job accepts only keys addressed to it, so ModelServings sharing a topic and a dataType (in one
    namespace or several) never install each other's models."""
    base = f"{namespace}/{name}/{data_type}"
    return f"{base}/{CANDIDATE}" if candidate else base


def unaddressed_model_key(data_type: str, candidate: bool = False) -> str:
    """The report's key, by dataType alone (``<dataType>``, ``<dataType>/candidate``). A job
    accepts it only where its spec opts in (``kafka.acceptUnaddressedModels``, its own topic)."""
    return f"{data_type}/{CANDIDATE}" if candidate else data_type


@dataclass(frozen=True)
class ModelKey:
    """What a models-topic key says: to whom (None for the report's unaddressed keys), which
    dataType ("" for an unkeyed message) and which role."""

    namespace: str | None
    name: str | None
    data_type: str
    candidate: bool

    def addressed_to(self, namespace: str, name: str) -> bool:
        return (self.namespace, self.name) == (namespace, name)


def parse_model_key(key: str) -> ModelKey:
    """The inverse of ``model_key`` and ``unaddressed_model_key``. Kubernetes names and dataTypes
    hold no '/', so three or more segments are an address and fewer are the report's key."""
    parts = key.split("/")
    candidate = len(parts) in (2, 4) and parts[-1] == CANDIDATE
    if candidate:
        parts = parts[:-1]
    if len(parts) == 3:
        return ModelKey(parts[0], parts[1], parts[2], candidate)
    if len(parts) == 1:
        return ModelKey(None, None, parts[0], candidate)
    # Neither shape (a '/' too many or too few): nobody's address; the role part is kept whole.
    return ModelKey("", "", key, False)
