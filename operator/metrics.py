"""The operator's own Prometheus metrics: how often it reconciles, why, with what outcome, how long;
and each ModelServing's phase and conditions as the operator last computed them (what the alert
rules read: Degraded, a model rolled back, not ready)."""

from __future__ import annotations

import threading
from typing import Any, get_args

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from scorestream import monitoring as m
from scorestream.operator import spec as s

RECONCILES = Counter(m.RECONCILES.name.removesuffix("_total"), "Reconciles of ModelServings",
                     ["trigger", "outcome"])
RECONCILE_SECONDS = Histogram(m.RECONCILE_SECONDS.name, "Time one reconcile took", ["trigger"],
                              buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
ROLLOUT_STEPS = Counter(m.ROLLOUT_STEPS.name.removesuffix("_total"), "Model messages sent to models topics",
                        ["step"])
PHASES: tuple[str, ...] = get_args(s.Phase)


class ResourceStatus(Collector):
    """The last status computed per resource. A resource's series change together with its
    status (a new reason replaces the old series, not adds to it) and go when it is deleted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._status: dict[tuple[str, str], dict[str, Any]] = {}

    def record(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        with self._lock:
            self._status[(namespace, name)] = status

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
            statuses = sorted(self._status.items())
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


def serve(port: int) -> None:
    from prometheus_client import start_http_server

    start_http_server(port)
