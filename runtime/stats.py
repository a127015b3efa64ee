"""Serving statistics: the report's ModelServingInfo per dataType, and Prometheus metrics.

Fed once per micro-batch with what the JVM scorer counted (``BatchCounts``), which Spark already
summed over all tasks.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from scorestream import monitoring as catalogue
from scorestream.api.job_http import (CandidateFigures, Comparison, Duration, ModelDrift, ModelFigures, ServingFigures,
                                       Totals)
from scorestream.api.scoring import LATENCY_BUCKETS, BatchCounts, ShadowCounts
from scorestream.runtime.models import Candidate, LoadedModel, ModelRegistry, Snapshot

if TYPE_CHECKING:
    from scorestream.runtime.jvm_metrics import JvmSnapshot


# Models swapped out whose figures are kept (/stats `previous`, /metrics): per dataType, and in all.
MAX_PREVIOUS_PER_DATA_TYPE = 10
MAX_INFOS = 200


@dataclass
class ModelServingInfo:
    """As in the report: what serves, since when, how often, how fast (milliseconds)."""

    name: str
    version: str
    description: str
    since: float
    invocations: int = 0
    errors: int = 0
    total_ms: float = 0.0
    min_ms: float | None = None
    max_ms: float | None = None

    def figures(self, drift: ModelDrift | None = None) -> ModelFigures:
        return ModelFigures(
            name=self.name, version=self.version, description=self.description, since=self.since,
            invocations=self.invocations, errors=self.errors,
            duration=Duration(totalMs=round(self.total_ms, 6), minMs=self.min_ms, maxMs=self.max_ms,
                              meanMs=round(self.total_ms / self.invocations, 6) if self.invocations else None),
            drift=drift,
        )


@dataclass
class ShadowInfo:
    """A shadow's comparisons with the serving model (records both scored)."""

    compared: int = 0
    errors: int = 0
    agreed: int = 0
    abs_diff: float = 0.0
    nanos: int = 0

    def add(self, c: ShadowCounts) -> None:
        self.compared += c.n
        self.errors += c.err
        self.agreed += c.agree
        self.abs_diff += c.diff
        self.nanos += c.sum

    def comparison(self) -> Comparison:
        n = self.compared
        return Comparison(records=n, errors=self.errors,
                          # equal labels, for a classifier
                          agreement=round(self.agreed / n, 6) if n else None,
                          # of the predicted values, for a regression
                          meanAbsDiff=round(self.abs_diff / n, 9) if n else None)


@dataclass
class ServingStats:
    registry: ModelRegistry
    records_in: int = 0
    records_out: int = 0
    records_dead: int = 0
    batches: int = 0
    lag: int | None = None
    executors: int | None = None
    executor_target: int | None = None
    live_scaling: bool | None = None
    query_id: str | None = None
    # Load signals for the autoscaler: (time, records, seconds, workers) per recent batch, and
    # (time, data topic end offsets summed) samples for the input rate.
    recent_batches: deque = field(default_factory=lambda: deque(maxlen=20))
    end_offsets: deque = field(default_factory=lambda: deque(maxlen=120))
    last_batch_at: float | None = None
    buckets: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))
    scored_nanos: int = 0
    # (dataType, route) -> info; a model keeps its figures after it is swapped out.
    infos: dict[tuple[str, str], ModelServingInfo] = field(default_factory=dict)
    shadows: dict[tuple[str, str], ShadowInfo] = field(default_factory=dict)
    # Per route (name:version), each model's inputs and predictions against its baseline, as the
    # JVM counts them (pipeline.BatchScorer.drift); None: not counted (no JVM, as in unit tests).
    drift: Callable[[], dict[str, ModelDrift]] | None = None
    # The driver's and executors' JVMs for /metrics (jvm_metrics.snapshot_of); None: before Spark.
    jvm: Callable[[], "JvmSnapshot"] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_batch(self, counts: BatchCounts, tables: Sequence[Snapshot], seconds: float = 0.0) -> None:
        """``tables``: the snapshots whose routing tables the counted tasks scored with (a micro-batch
        has one; a real-time query's drain may span a swap): counts are matched by ``name:version``.
        ``seconds``: how long the batch was busy, 0 when not known."""
        models = {(m.data_type, m.route): m for snap in tables for m in snap.all_models()}
        shadows = {c.model.route: c.model for snap in tables for c in snap.candidates.values() if c.strategy == "Shadow"}
        with self._lock:
            self.batches += 1
            self.last_batch_at = time.time()
            self.recent_batches.append((self.last_batch_at, counts.in_, seconds, len(counts.workers)))
            self.records_in += counts.in_
            self.records_out += counts.out
            self.records_dead += counts.dead
            self.scored_nanos += counts.nanos
            for i, n in enumerate(counts.le):
                self.buckets[i] += n
            for m in models.values():
                info = self._info(m)
                c = counts.routes.get(m.route)
                if c is None:
                    continue
                info.errors += c.err
                if not c.n:
                    continue
                info.invocations += c.n
                info.total_ms += c.sum / 1e6
                info.min_ms = c.min / 1e6 if info.min_ms is None else min(info.min_ms, c.min / 1e6)
                info.max_ms = c.max / 1e6 if info.max_ms is None else max(info.max_ms, c.max / 1e6)
            for route, m in shadows.items():
                shadow = counts.shadows.get(route)
                if shadow is not None:
                    self._shadow_info(m).add(shadow)

    def _shadow_info(self, m: LoadedModel) -> ShadowInfo:
        key = (m.data_type, m.route)
        info = self.shadows.get(key)
        if info is None:
            info = self.shadows[key] = ShadowInfo()
        return info

    def _info(self, m: LoadedModel) -> ModelServingInfo:
        key = (m.data_type, m.route)
        info = self.infos.get(key)
        if info is None:
            info = self.infos[key] = ModelServingInfo(m.name, m.version, m.description, m.since)
            self._prune(m.data_type)
        return info

    def _prune(self, data_type: str) -> None:
        """Forget the oldest models swapped out: each new model of the models topic adds one, and
        /stats (which the operator reads at most 1 MiB of) and /metrics show every one kept."""
        snap = self.registry.snapshot()
        live = {(dt, m.route) for dt, m in snap.models.items()}
        live |= {(dt, c.model.route) for dt, c in snap.candidates.items()}
        for limit, same in ((MAX_PREVIOUS_PER_DATA_TYPE, lambda k: k[0] == data_type), (MAX_INFOS, lambda k: True)):
            gone = [k for k in self.infos if same(k) and k not in live]  # oldest first: insertion order
            for k in gone[:max(0, len(gone) - limit)]:
                del self.infos[k]
                self.shadows.pop(k, None)

    def serving_info(self) -> dict[str, ServingFigures]:
        """Per dataType: the serving model's ModelServingInfo, the models it replaced, and the
        candidate on trial with its figures (a shadow's from its comparisons)."""
        snap = self.registry.snapshot()
        drift = self.drift() if self.drift is not None else {}  # a call into the JVM: not under the lock
        with self._lock:
            out = {}
            for dt, m in sorted(snap.models.items()):
                c = snap.candidates.get(dt)
                skip = {m.route, c.model.route} if c else {m.route}
                previous = [i.figures(drift.get(r)) for (d, r), i in self.infos.items() if d == dt and r not in skip]
                out[dt] = ServingFigures(**dict(self._info(m).figures(drift.get(m.route))), format=m.format,
                                         previous=previous,
                                         candidate=self._candidate(c, drift.get(c.model.route)) if c is not None else None)
            return out

    def _candidate(self, c: Candidate, drift: ModelDrift | None) -> CandidateFigures:
        figures = dict(self._info(c.model).figures(drift))
        comparison = None
        if c.strategy == "Shadow":
            s = self._shadow_info(c.model)
            comparison = s.comparison()
            figures.update(invocations=s.compared, errors=s.errors,
                           duration=Duration(totalMs=round(s.nanos / 1e6, 6), minMs=None, maxMs=None,
                                             meanMs=round(s.nanos / 1e6 / s.compared, 6) if s.compared else None))
        return CandidateFigures(**figures, format=c.model.format, strategy=c.strategy, percent=c.percent,
                                comparison=comparison)

    def note_end_offsets(self, total: int) -> None:
        with self._lock:
            self.end_offsets.append((time.time(), total))

    def note_no_new_data(self) -> None:
        """The source's last trigger found nothing past the last batch: the end offsets still stand
        at the last sample, now. Without this an idle job (no batches, so no samples) would see its
        window empty and its input rate become unknown, and an unknown rate keeps the executors the
        job has: the autoscaler could never scale an idle job down."""
        with self._lock:
            if self.end_offsets:
                self.end_offsets.append((time.time(), self.end_offsets[-1][1]))

    def load(self, window: float = 30.0) -> dict:
        """What the autoscaler needs: the rate records arrive at (end offsets over the last
        `window` seconds), the rate one executor processes them while busy, recent batch times."""
        now = time.time()
        ends = [(t, o) for t, o in self.end_offsets if now - t <= window]
        input_rate = (ends[-1][1] - ends[0][1]) / (ends[-1][0] - ends[0][0]) \
            if len(ends) >= 2 and ends[-1][0] > ends[0][0] else None
        busy = [(n, s, w) for _, n, s, w in self.recent_batches if n and s > 0]
        per_executor = None
        if busy:
            executors = max(1, self.executors or 1)
            per_executor = sum(n for n, _, _ in busy) / sum(s for _, s, _ in busy) / executors
        seconds = [s for _, _, s, _ in self.recent_batches if s > 0]
        return {"inputRate": None if input_rate is None else round(input_rate, 3),
                "processingRatePerExecutor": None if per_executor is None else round(per_executor, 3),
                "batchSeconds": round(sum(seconds) / len(seconds), 3) if seconds else None,
                "executorsUsedLastBatch": self.recent_batches[-1][3] if self.recent_batches else None}

    def totals(self) -> Totals:
        with self._lock:
            return Totals(
                recordsIn=self.records_in,
                recordsOut=self.records_out,
                recordsDeadLettered=self.records_dead,
                batches=self.batches,
                lag=self.lag,
                executors=self.executors,
                executorTarget=self.executor_target,
                liveScaling=self.live_scaling,
                queryId=self.query_id,
                **self.load(),
                modelSwitches=self.registry.switches,
                lastBatchAt=self.last_batch_at,
            )


class StatsCollector(Collector):
    def __init__(self, stats: ServingStats):
        self.stats = stats

    def collect(self):
        s = self.stats
        with s._lock:
            records = CounterMetricFamily("scorestream_records", "Records by outcome", labels=["outcome"])
            records.add_metric(["in"], s.records_in)
            records.add_metric(["out"], s.records_out)
            records.add_metric(["dead_lettered"], s.records_dead)
            yield records
            yield CounterMetricFamily("scorestream_batches", "Micro-batches completed", value=s.batches)
            cumulative = [(str(b), c) for b, c in zip(LATENCY_BUCKETS, s.buckets)]
            cumulative.append(("+Inf", s.records_out))
            yield HistogramMetricFamily(
                "scorestream_scoring_latency_seconds",
                "Model evaluation time per record",
                buckets=cumulative,
                sum_value=s.scored_nanos / 1e9,
            )
            lag = GaugeMetricFamily("scorestream_consumer_lag", "Records in the data topic not yet processed")
            if s.lag is not None:
                lag.add_metric([], s.lag)
            yield lag
            invocations = CounterMetricFamily(catalogue.MODEL_INVOCATIONS.name.removesuffix("_total"),
                                              "Records scored per model", labels=list(catalogue.MODEL_INVOCATIONS.labels))
            for (dt, _), info in s.infos.items():
                invocations.add_metric([dt, info.name, info.version], info.invocations)
            yield invocations
        info = GaugeMetricFamily(catalogue.MODEL_INFO.name, "The model serving each data type (value 1)",
                                 labels=list(catalogue.MODEL_INFO.labels))
        since = GaugeMetricFamily(catalogue.MODEL_SINCE.name, "When the serving model took over, in seconds since the epoch",
                                  labels=list(catalogue.MODEL_SINCE.labels))
        for dt, model in s.registry.snapshot().models.items():
            info.add_metric([dt, model.name, model.version], 1)
            since.add_metric([dt], model.since)
        yield info
        yield since
        yield CounterMetricFamily("scorestream_model_switches", "Models replaced while running", value=s.registry.switches)
        yield CounterMetricFamily("scorestream_models_rejected", "Model messages rejected", value=s.registry.rejections)
