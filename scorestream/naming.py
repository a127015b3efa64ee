"""Every name that two parts of scorestream must agree on, in one place."""

from __future__ import annotations

import uuid


def data_group(namespace: str, name: str) -> str:
    """The data topic's consumer group: one per ModelServing, shared by all its executors.

    Two ModelServings reading one data topic get two groups, so both see every record.
    """
    return f"scorestream.{namespace}.{name}"


def source_group_prefix(namespace: str, name: str) -> str:
    """The prefix of the groups Spark's Kafka source reads with (it adds a unique suffix and never
    commits); progress is committed to ``data_group`` by the driver."""
    return f"{data_group(namespace, name)}.source"


def models_group(namespace: str, name: str, run_id: str | None = None) -> str:
    """The models topic's group: one per run, so every job (and every restart) reads all models."""
    return f"{data_group(namespace, name)}.models.{run_id or uuid.uuid4().hex[:12]}"


def model_key(data_type: str, candidate: bool = False) -> str:
    """The models topic's message key. Compaction keeps the latest message per key."""
    return f"{data_type}/candidate" if candidate else data_type
