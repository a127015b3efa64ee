"""The driver's and the executors' JVMs on the job's /metrics: heap, GC, threads of the driver, and
per executor what Spark's status store has from its heartbeats (``dev.scorestream.jvm.JvmMetrics``,
one call per scrape). The families are in the catalogue (``scorestream.monitoring``), named by
Prometheus' conventions as the job's others are."""

from __future__ import annotations

from typing import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from pydantic import BaseModel, ConfigDict

from scorestream import monitoring as m


class _Contract(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MemoryArea(_Contract):
    used: int
    committed: int
    max: int | None  # None: the JVM sets no limit


class Collector(_Contract):
    name: str
    collections: int
    seconds: float


class Executor(_Contract):
    id: str  # "driver" for the driver's own slot (local mode runs every task there)
    storageMemoryUsedBytes: int
    storageMemoryMaxBytes: int
    gcSeconds: float
    activeTasks: int
    completedTasks: int
    failedTasks: int
    peakHeapBytes: int | None  # None until the executor's first heartbeat with metrics


class JvmSnapshot(_Contract):
    """``JvmMetrics.snapshot()``."""

    heap: MemoryArea
    nonHeap: MemoryArea
    gc: list[Collector]
    threads: int
    daemonThreads: int
    peakThreads: int
    executors: list[Executor]


def snapshot_of(spark) -> Callable[[], JvmSnapshot]:
    """What the job's /metrics calls on each scrape: a JVM snapshot of `spark`'s driver."""
    jvm_metrics = spark.sparkContext._jvm.dev.scorestream.jvm.JvmMetrics
    sc = spark.sparkContext._jsc.sc()
    return lambda: JvmSnapshot.model_validate_json(jvm_metrics.snapshot(sc))


def _gauge(f: m.Family, doc: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(f.name, doc, labels=list(f.labels))


def _counter(f: m.Family, doc: str) -> CounterMetricFamily:
    return CounterMetricFamily(f.name.removesuffix("_total"), doc, labels=list(f.labels))


def families(snap: JvmSnapshot | None):
    """The families, empty without a snapshot (before Spark started, or in a test without it)."""
    used = _gauge(m.JVM_MEMORY_USED, "The driver JVM's memory in use, by area (heap, nonheap)")
    committed = _gauge(m.JVM_MEMORY_COMMITTED, "The driver JVM's memory committed, by area")
    limit = _gauge(m.JVM_MEMORY_MAX, "The most memory the driver JVM may use, by area (where it sets a limit)")
    gc_count = _counter(m.JVM_GC_COLLECTIONS, "Collections by the driver JVM's garbage collectors")
    gc_seconds = _counter(m.JVM_GC_SECONDS, "Time the driver JVM's garbage collectors spent collecting")
    threads = _gauge(m.JVM_THREADS, "The driver JVM's live threads (all, daemon, peak)")
    ex_used = _gauge(m.EXECUTOR_STORAGE_USED, "An executor's storage memory in use (Spark's block manager)")
    ex_max = _gauge(m.EXECUTOR_STORAGE_MAX, "An executor's storage memory")
    ex_heap = _gauge(m.EXECUTOR_PEAK_HEAP, "An executor's peak JVM heap, as its heartbeats report it")
    ex_gc = _counter(m.EXECUTOR_GC_SECONDS, "Time an executor's JVM spent in garbage collection during tasks")
    ex_tasks = _counter(m.EXECUTOR_TASKS, "Tasks an executor finished, by outcome (completed, failed)")
    ex_active = _gauge(m.EXECUTOR_ACTIVE_TASKS, "Tasks an executor runs now")
    if snap is not None:
        for area, u in (("heap", snap.heap), ("nonheap", snap.nonHeap)):
            used.add_metric([area], u.used)
            committed.add_metric([area], u.committed)
            if u.max is not None:
                limit.add_metric([area], u.max)
        for gc in snap.gc:
            gc_count.add_metric([gc.name], gc.collections)
            gc_seconds.add_metric([gc.name], gc.seconds)
        for state, n in (("live", snap.threads), ("daemon", snap.daemonThreads), ("peak", snap.peakThreads)):
            threads.add_metric([state], n)
        for e in snap.executors:
            ex_used.add_metric([e.id], e.storageMemoryUsedBytes)
            ex_max.add_metric([e.id], e.storageMemoryMaxBytes)
            if e.peakHeapBytes is not None:
                ex_heap.add_metric([e.id], e.peakHeapBytes)
            ex_gc.add_metric([e.id], e.gcSeconds)
            ex_tasks.add_metric([e.id, "completed"], e.completedTasks)
            ex_tasks.add_metric([e.id, "failed"], e.failedTasks)
            ex_active.add_metric([e.id], e.activeTasks)
    return used, committed, limit, gc_count, gc_seconds, threads, ex_used, ex_max, ex_heap, ex_gc, ex_tasks, ex_active
