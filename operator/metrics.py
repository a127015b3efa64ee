"""The operator's own Prometheus metrics: how often it reconciles, why, with what outcome, how long;
and each ModelServing's phase and conditions as the operator last computed them (what the alert
rules read: Degraded, a model rolled back, not ready)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, get_args

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from scorestream import monitoring as m
from scorestream.api.v1alpha1 import modelserving as s

# A `_created` gauge per counter and histogram is OpenMetrics' way of marking resets; in the text
# format Prometheus scrapes it is one more series per family, and promtool's lint does not expect it.
disable_created_metrics()

RECONCILES = Counter(m.RECONCILES.name.removesuffix("_total"), "Reconciles of ModelServings",
                     ["trigger", "outcome"])
RECONCILE_SECONDS = Histogram(m.RECONCILE_SECONDS.name, "Time one reconcile took", ["trigger"],
                              buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
ROLLOUT_STEPS = Counter(m.ROLLOUT_STEPS.name.removesuffix("_total"), "Model messages sent to models topics",
                        ["step"])
# The settled resources' jobs polled outside the queue (jobwatch.py): answer "same", or "changed"
# (the resource queued).
JOB_POLLS = Counter(m.JOB_POLLS.name.removesuffix("_total"), "Polls of settled resources' jobs", ["answer"])
QUEUE_DEPTH = Gauge(m.QUEUE_DEPTH.name, "Keys waiting in the work queue")
# priority: change (a watch event) or poll (time); up to minutes, where a thousand resources are made at once.
QUEUE_SECONDS = Histogram(m.QUEUE_SECONDS.name, "How long a key waited in the work queue before a worker took it",
                          ["priority"], buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))
PHASES: tuple[str, ...] = get_args(s.Phase)


# The active operator recomputes every status at least once a resync (reconciler.resync: half of
# this at most); a status not recomputed for this long is not current (a resource deleted while
# the operator was down).
STALE_AFTER = 300.0


class ResourceStatus(Collector):
    """The last status computed per resource. A resource's series change together with its
    status (a new reason replaces the old series, not adds to it), go when it is deleted, and go
    when no status was computed for it in `stale_after` seconds."""

    def __init__(self, stale_after: float = STALE_AFTER, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._status: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self.stale_after, self.clock = stale_after, clock

    def record(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        with self._lock:
            self._status[(namespace, name)] = (self.clock(), status)

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._status.pop((namespace, name), None)

    def collect(self):
        labels = list(m.RESOURCE_LABELS)
        condition = GaugeMetricFamily(m.CONDITION.name, "A ModelServing's status condition (value 1): Ready, "
                                      "ModelReady, Progressing, Degraded", labels=labels + list(m.CONDITION.labels))
        phase = GaugeMetricFamily(m.PHASE.name, "A ModelServing's phase: 1 for the current one, 0 for the others",
                                  labels=labels + list(m.PHASE.labels))
        with self._lock:
            now = self.clock()
            for key in [k for k, (at, _) in self._status.items() if now - at > self.stale_after]:
                del self._status[key]
            statuses = sorted((k, st) for k, (_, st) in self._status.items())
        for (namespace, name), status in statuses:
            for c in status.get("conditions", []):
                condition.add_metric([namespace, name, c["type"], c["status"], c.get("reason", "")], 1)
            for p in PHASES:
                phase.add_metric([namespace, name, p], 1 if status.get("phase") == p else 0)
        yield condition
        yield phase


STATUS = ResourceStatus()
REGISTRY.register(STATUS)


def record_status(namespace: str, name: str, status: dict[str, Any]) -> None:
    """Called with every status the operator computes for a resource."""
    STATUS.record(namespace, name, status)


def forget(namespace: str, name: str) -> None:
    """Called when a resource is deleted."""
    STATUS.forget(namespace, name)


def serve(port: int, observe_interval: float | None = None) -> None:
    """Serve /metrics on `port`; with the operator's observe interval, a status counts as stale
    after thirty missed observations (STALE_AFTER at least)."""
    from prometheus_client import start_http_server

    if observe_interval is not None:
        STATUS.stale_after = max(STALE_AFTER, 30 * observe_interval)
    start_http_server(port)
