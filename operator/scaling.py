"""How many executors to ask of a job now, as a pure function: spec.replicas or the autoscaler's
decision, capped by the data topic's partitions; and whether it is asked live or by a restart."""

from __future__ import annotations

import math
from dataclasses import dataclass
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import autoscaler
from scorestream.operator.status import JobReport

KEEP_RECOMMENDATIONS = 60


def cores(quantity: str) -> int:
    """Task slots of one executor: its CPU quantity, rounded up ("500m" -> 1, "2" -> 2)."""
    q = quantity.strip()
    value = float(q[:-1]) / 1000 if q.endswith("m") else float(q)
    return max(1, math.ceil(value))


@dataclass(frozen=True)
class ScalingPlan:
    target: int  # executors to ask for
    capped: bool
    message: str
    ask: bool  # the job runs something else: ask it now
    autoscaling: s.AutoscalingStatus | None


def plan(spec: s.ModelServingSpec, previous: s.ModelServingStatus, job: JobReport, partitions: int | None,
         now: float) -> ScalingPlan:
    cap = max(1, math.ceil(partitions / cores(spec.spark.executor.cpu))) if partitions else None
    auto = None
    want = spec.replicas
    if spec.autoscaling is not None and job.reachable:
        before = previous.autoscaling
        samples = before.recommendations if before else []
        last_change = before.last_change if before else None
        current = job.executor_target if job.executor_target is not None else (job.executors or spec.replicas)
        decision = autoscaler.decide(spec.autoscaling, autoscaler.Load(current, job.input_rate, job.per_executor_rate,
                                                                       job.lag), current,
                                     [(r.at, r.replicas) for r in samples], last_change, now, cap)
        samples = [*samples, s.RecommendationSample(at=now, replicas=decision.recommended)]
        auto = s.AutoscalingStatus(replicas=decision.replicas, recommended=decision.recommended,
                                   reason=decision.reason[:2000],
                                   lastChange=now if decision.replicas != current else last_change,
                                   inputRate=job.input_rate, perExecutorRate=job.per_executor_rate,
                                   recommendations=samples[-KEEP_RECOMMENDATIONS:])
        want = decision.replicas
    elif spec.autoscaling is not None:
        auto = previous.autoscaling
        want = auto.replicas if auto else spec.replicas
    capped = cap is not None and want > cap
    target = min(want, cap) if capped else want
    if capped:
        message = (f"{want} executors asked, but the data topic has {partitions} partitions and an executor "
                   f"{cores(spec.spark.executor.cpu)} core(s): {target} can all be busy; asking for {target}")
    else:
        message = f"{target} executor(s) asked"
    ask = job.reachable and job.ready and job.executor_target != target
    return ScalingPlan(target=target, capped=capped, message=message, ask=ask, autoscaling=auto)
