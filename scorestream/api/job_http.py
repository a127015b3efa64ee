"""The job's HTTP answers: what the driver serves (``scorestream.runtime.http``) and the operator
reads (``scorestream.operator.observer``), defined once so that neither side can drift.

Field names are the wire names. Unknown fields are refused, on the wire and in constructors: the
job and the operator ship in one release, and a field renamed on one side must fail on the other
rather than be read as its default.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scorestream.api.descriptor import Format
from scorestream.api.verification import VerificationReport


def _absent(value: object) -> bool:
    return value is None


def explain(error: ValidationError, limit: int = 5) -> str:
    """A refused answer or request in one line: where, and what is wrong there."""
    problems = [f"{'.'.join(str(p) for p in e['loc']) or '(the body)'}: {e['msg']}" for e in error.errors()]
    more = f"; and {len(problems) - limit} more" if len(problems) > limit else ""
    return "; ".join(problems[:limit]) + more


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Failure(_Answer):
    """Any refusal (4xx, 5xx) but /readyz's 503, which answers `Readiness`."""

    error: str
    paths: list[str] | None = Field(None, exclude_if=_absent)  # the paths there are, for a wrong one


class Readiness(_Answer):
    """GET /readyz: 200 when ready, 503 when not."""

    ready: bool
    reason: str


class Duration(_Answer):
    """Scoring time per record, milliseconds (None: nothing scored)."""

    totalMs: float
    minMs: float | None
    maxMs: float | None
    meanMs: float | None


class DriftFigures(_Answer):
    """How far a distribution moved from the baseline's: the population stability index and the
    Kolmogorov-Smirnov statistic over the baseline's decile bins (None: nothing counted yet)."""

    psi: float | None
    ks: float | None


class ModelDrift(_Answer):
    """A model version's inputs and predictions against its baseline (its verification sample,
    scored by the model when the job admitted it), counted by the JVM scorer as it scores
    (``dev.scorestream.jvm.DriftCounts.value()``, one entry per ``name:version``)."""

    records: int  # predictions counted
    baselineRecords: int
    features: dict[str, DriftFigures]  # by model input
    prediction: DriftFigures


class ModelFigures(_Answer):
    """The report's ModelServingInfo: what serves, since when, how often, how fast."""

    name: str
    version: str
    description: str
    since: float  # seconds since the epoch
    invocations: int
    errors: int
    duration: Duration
    drift: ModelDrift | None = Field(None, exclude_if=_absent)  # None: the model has no baseline


class Comparison(_Answer):
    """A shadow's comparisons with the serving model, over the records both scored."""

    records: int
    errors: int  # the shadow failed where the serving model scored
    agreement: float | None  # the share of equal predictions
    meanAbsDiff: float | None  # the mean absolute difference of the predicted values


class CandidateFigures(ModelFigures):
    """A candidate on trial; a shadow's figures are its comparisons'."""

    format: Format
    strategy: Literal["Canary", "Shadow"]
    percent: float  # a canary's share of the records
    comparison: Comparison | None = Field(None, exclude_if=_absent)  # a shadow's


class ServingFigures(ModelFigures):
    """A dataType's serving model, the models it replaced, and its candidate."""

    format: Format
    previous: list[ModelFigures]
    candidate: CandidateFigures | None = Field(None, exclude_if=_absent)


class Totals(_Answer):
    recordsIn: int
    recordsOut: int
    recordsDeadLettered: int
    batches: int
    lag: int | None  # records in the data topic not yet processed
    executors: int | None  # running now
    executorTarget: int | None  # asked for
    liveScaling: bool | None  # whether its cluster manager changes executors live
    queryId: str | None
    inputRate: float | None  # records/s arriving on the data topic
    processingRatePerExecutor: float | None  # records per busy second of one executor
    batchSeconds: float | None
    executorsUsedLastBatch: int | None
    modelSwitches: int
    lastBatchAt: float | None


class KafkaError(_Answer):
    """A condition of the Kafka cluster that fails or stalls the job's reads or writes now, as the
    job finds it (``scorestream.runtime.kafka_health``); gone from the list once it has cleared.

    ``NOT_ENOUGH_REPLICAS``: partitions of `topic` have fewer in-sync replicas than the topic's
    ``min.insync.replicas``. Every ``acks=all`` write to them is refused by the leader (the job's
    output, dead letters and transactions; for the data topic, its producers'); the producers
    retry until their delivery timeout, then the batch's tasks fail and are retried. Nothing is
    lost: what is not written is not committed, and is written once the replicas are back."""

    code: str  # Kafka's error name, e.g. NOT_ENOUGH_REPLICAS
    topic: str
    role: Literal["data", "output", "deadLetter", "models", "internal"]
    partitions: list[int]  # those affected
    inSyncReplicas: int  # the fewest in sync among them
    minInSyncReplicas: int
    since: float  # seconds since the epoch: when the job first saw it
    message: str


class Stats(_Answer):
    """GET /stats."""

    dataTypes: dict[str, ServingFigures]
    totals: Totals
    kafkaErrors: list[KafkaError] = Field(default_factory=list)  # empty: none seen now


class ModelInfo(_Answer):
    """A model the driver checked and serves."""

    name: str
    version: str
    description: str
    dataType: str
    format: Format
    inputs: list[str]
    file: str
    digest: str
    since: float
    verification: VerificationReport | None = Field(None, exclude_if=_absent)  # how it was admitted


class CandidateInfo(ModelInfo):
    strategy: Literal["Canary", "Shadow"]
    percent: float


class Rejection(_Answer):
    """A model message the driver refused, and why."""

    model: str  # name:version, or where the message was when it had none
    dataType: str | None
    reason: str
    at: float


class Models(_Answer):
    """GET /models."""

    serving: dict[str, ModelInfo]
    candidates: dict[str, CandidateInfo]
    rejected: list[Rejection]


class Executors(_Answer):
    """GET /executors."""

    live: bool  # False: local mode, no executors to change
    running: int
    target: int | None
    applied: int | None  # the total last handed to the cluster manager
    requestedAt: float | None
    error: str | None


# The most executors a job may be asked for: the spec's own bound on replicas and maxReplicas.
MAX_EXECUTORS = 1000
# The largest request body the job reads ({"total": N} is a dozen bytes).
MAX_REQUEST_BYTES = 4096
# The largest answer the operator reads from a job. The job's own answers are far smaller (50
# rejections, a few dataTypes with their history); whatever binds the job's port is a tenant's, and
# the operator is shared: a larger answer is refused before more of it is read.
MAX_ANSWER_BYTES = 1024 * 1024


class ScaleRequest(_Answer):
    """POST /executors."""

    total: int = Field(ge=0, le=MAX_EXECUTORS, strict=True)


class ScaleAnswer(Executors):
    """POST /executors: 202 when accepted, 409 when not (then `reason`)."""

    accepted: bool
    reason: str | None = Field(None, exclude_if=_absent)
