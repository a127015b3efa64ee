"""How many executors a job needs, as a pure function of what it reports (in the spirit of DS2).

DS2 (Kalavri et al., OSDI 2018; the Flink Kubernetes Operator's autoscaler) sizes an operator by
its *true* processing rate — records per second of busy time, not per second of wall time — so
that a lightly loaded job is not mistaken for a slow one. Here: one executor processes
`per_executor_rate` records per busy second (the job measures it over its recent micro-batches);
the job must absorb the arrival rate and drain the current lag within `targetLagSeconds`:

    needed = (input_rate + lag / targetLagSeconds) / (per_executor_rate * targetUtilization)

rounded up, then bounded by minReplicas/maxReplicas, by the data topic's partitions (more
executors than partitions have nothing to read), and by `maxStep` per decision. Scaling up follows
the recommendation at once; scaling down takes the highest recommendation of the stabilization
window and waits `scaleDownCooldown` after the last change, so a flapping input does not flap the
job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scorestream.api.v1alpha1 import modelserving as s
from scorestream.config import duration_seconds


@dataclass(frozen=True)
class Load:
    """What the job reports (None: not measured yet)."""

    executors: int
    input_rate: float | None  # records/s arriving on the data topic
    per_executor_rate: float | None  # records per busy second of one executor
    lag: int | None  # records not yet processed


@dataclass(frozen=True)
class Decision:
    replicas: int
    recommended: int  # before stabilization, cooldown and step bounds
    reason: str


def recommend(policy: s.AutoscalingSpec, load: Load, cap: int | None) -> tuple[int, str]:
    """The executors the load needs now, within the bounds, and why."""
    upper = min(policy.max_replicas, cap) if cap else policy.max_replicas
    if load.input_rate is None or not load.per_executor_rate:
        n = min(max(load.executors, policy.min_replicas), upper)
        return n, "no load figures yet: keeping the current executors"
    lag = load.lag or 0
    needed_rate = max(0.0, load.input_rate) + lag / policy.target_lag_seconds
    raw = needed_rate / (load.per_executor_rate * policy.target_utilization)
    n = max(policy.min_replicas, min(upper, math.ceil(raw - 1e-9)))
    why = (f"{load.input_rate:.0f} rec/s arriving + lag {lag} over {policy.target_lag_seconds:g}s "
           f"= {needed_rate:.0f} rec/s; one executor does {load.per_executor_rate:.0f} rec/s busy "
           f"(at {policy.target_utilization:.0%}): {raw:.2f} executors")
    if cap and math.ceil(raw) > cap and cap < policy.max_replicas:
        why += f"; capped at {cap} by the data topic's partitions"
    return n, why


def decide(policy: s.AutoscalingSpec, load: Load, current: int, window: list[tuple[float, int]],
           last_change: float | None, now: float, cap: int | None = None) -> Decision:
    """`window`: earlier (time, recommendation) pairs; those inside the stabilization window count."""
    rec, why = recommend(policy, load, cap)
    stable_for = duration_seconds(policy.stabilization_window)
    recent = [r for t, r in window if now - t <= stable_for] + [rec]
    if rec >= current:
        target = min(rec, current + policy.max_step)
        if target > current:
            why += f"; scaling up {current} -> {target}"
    else:
        # Down only as far as the highest recommendation of the window allows.
        floor = max(recent)
        target = max(floor, current - policy.max_step)
        cooldown = duration_seconds(policy.scale_down_cooldown)
        if target >= current:
            target = current
            why += f"; holding {current}: recommended {floor} within the last {stable_for:g}s"
        elif last_change is not None and now - last_change < cooldown:
            target = current
            why += f"; holding {current}: {now - last_change:.0f}s since the last change, cooldown {cooldown:g}s"
        else:
            why += f"; scaling down {current} -> {target}"
    return Decision(replicas=target, recommended=rec, reason=why)
