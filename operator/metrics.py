"""The operator's own Prometheus metrics: how often it reconciles, why, with what outcome, how long."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

RECONCILES = Counter("scorestream_operator_reconciles", "Reconciles of ModelServings",
                     ["trigger", "outcome"])
RECONCILE_SECONDS = Histogram("scorestream_operator_reconcile_seconds", "Time one reconcile took", ["trigger"],
                              buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
ROLLOUT_STEPS = Counter("scorestream_operator_rollout_steps", "Model messages sent to models topics",
                        ["step"])


def serve(port: int) -> None:
    from prometheus_client import start_http_server

    start_http_server(port)
