"""The contract between the driver (Python) and the JVM scorer.

- ``RoutingTable``: what the driver fixes at the start of each micro-batch and the scorer reads
  (``dev.scorestream.jvm.RoutingTable``; the contract test compares the two field by field, and
  the JVM refuses unknown fields).
- ``BatchCounts``: what the scorer counted in a batch (``dev.scorestream.jvm.BatchCounts.value()``).
- The scorer's result schema is defined once, in the JVM (``Scorer.RESULT_DDL``); Python reads
  it from there (``scorestream.runtime.pipeline``) rather than restating it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Scoring latency histogram bounds, seconds (Prometheus `le`); the JVM counts in nanoseconds.
LATENCY_BUCKETS = (1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1.0)


def latency_bounds_nanos() -> str:
    """The bounds as the JVM's BatchCounts takes them."""
    return ",".join(str(round(b * 1e9)) for b in LATENCY_BUCKETS)


class _Contract(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Route(_Contract):
    """One model a dataType's records may meet."""

    key: str  # name:version
    format: Literal["pmml", "tensorflow"]
    file: str  # the file executors fetch through SparkFiles
    inputs: list[str]
    candidate: Route | None = None  # the model on trial next to this one
    mode: Literal["canary", "shadow"] | None = None  # a candidate's
    share: int = Field(0, ge=0, le=10_000)  # a canary's share of the 10,000 key buckets


class RoutingTable(_Contract):
    dataTypeField: str = "dataType"
    served: list[str] | None = None  # None: any dataType with a model
    routes: dict[str, Route] = Field(default_factory=dict)
    protobuf: dict[str, list[str]] | None = None  # field number -> [name, type], for protobuf input
    batchId: int = 0
    outputTopic: str
    deadLetterTopic: str


class RouteCounts(_Contract):
    n: int  # scored
    err: int  # dead-lettered at validation or scoring
    sum: int  # scoring nanoseconds
    min: int | None
    max: int | None


class ShadowCounts(_Contract):
    n: int  # compared
    err: int  # the shadow failed where the serving model scored
    agree: int
    diff: float  # summed |difference| of predicted values
    sum: int  # the shadow's scoring nanoseconds


class BatchCounts(_Contract):
    """One micro-batch, summed over its tasks."""

    in_: int = Field(alias="in")
    out: int
    dead: int
    nanos: int
    le: list[int]  # cumulative, one per LATENCY_BUCKETS bound
    routes: dict[str, RouteCounts]
    shadows: dict[str, ShadowCounts]
    workers: list[str]  # executors that ran a task of the batch
