"""Status as a pure function of what was observed: phase, conditions, served model, lag.

The observer (observer.py) gathers an `Observed`; this module decides what it means. Conditions
follow the Kubernetes API conventions: a condition keeps its lastTransitionTime while its status
does not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from scorestream.operator import desired
from scorestream.operator import spec as s

CRASH_REASONS = {"CrashLoopBackOff", "Error", "OOMKilled", "CreateContainerConfigError", "ImagePullBackOff",
                 "ErrImagePull", "InvalidImageName", "CreateContainerError"}


@dataclass
class DriverState:
    """The driver pod as Kubernetes reports it."""

    exists: bool = False
    ready: bool = False
    restarts: int = 0
    waiting_reason: str | None = None
    last_termination: str | None = None  # "<reason>: <message> (exit code N)"


@dataclass
class JobReport:
    """What the job's HTTP endpoint says (None fields: it did not answer)."""

    reachable: bool = False
    ready: bool = False
    ready_reason: str = ""
    serving: dict[str, dict[str, Any]] = field(default_factory=dict)  # dataType -> {name, version, since}
    lag: int | None = None
    executors: int | None = None


@dataclass
class Observed:
    generation: int
    spec: s.ModelServingSpec
    data_topic_exists: bool | None = None  # None: not checked (broker unreachable)
    topics_error: str | None = None
    driver: DriverState = field(default_factory=DriverState)
    job: JobReport = field(default_factory=JobReport)
    apply_error: str | None = None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rfc3339(since: Any) -> str | None:
    if isinstance(since, (int, float)):
        # The runtime reports seconds since the epoch (or milliseconds, as the report did).
        seconds = since / 1000 if since > 1e11 else since
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return since


def compute(name: str, namespace: str, observed: Observed, previous: dict[str, Any] | None,
            now: str | None = None) -> dict[str, Any]:
    """The status subresource's content for what was observed."""
    now = now or _now()
    spec = observed.spec
    gen = observed.generation
    driver, job = observed.driver, observed.job
    conds: dict[str, tuple[str, str, str]] = {}  # type -> (status, reason, message)

    crashing = driver.waiting_reason in CRASH_REASONS or (driver.restarts >= 3 and not driver.ready)
    if observed.apply_error:
        phase = "Failed"
        conds["Degraded"] = ("True", "ApplyFailed", observed.apply_error)
        conds["Ready"] = ("False", "ApplyFailed", observed.apply_error)
        conds["Progressing"] = ("False", "ApplyFailed", observed.apply_error)
    elif spec.suspend:
        phase = "Suspended"
        conds["Ready"] = ("False", "Suspended", "spec.suspend is true: the job is stopped and keeps its position")
        conds["Progressing"] = ("False", "Suspended", "")
        conds["Degraded"] = ("False", "Suspended", "")
    elif observed.data_topic_exists is False:
        phase = "Pending"
        msg = f"data topic {spec.kafka.data_topic!r} does not exist on {spec.kafka.bootstrap_servers}; retrying"
        conds["Ready"] = ("False", "DataTopicMissing", msg)
        conds["Progressing"] = ("True", "DataTopicMissing", msg)
        conds["Degraded"] = ("False", "DataTopicMissing", msg)
    elif crashing:
        phase = "Degraded"
        why = driver.waiting_reason or "Restarting"
        msg = f"driver pod restarted {driver.restarts} times"
        if driver.last_termination:
            msg += f"; last termination: {driver.last_termination}"
        conds["Degraded"] = ("True", why, msg)
        conds["Ready"] = ("False", "DriverFailing", msg)
        conds["Progressing"] = ("False", "DriverFailing", msg)
    elif driver.ready and job.ready:
        phase = "Running"
        conds["Ready"] = ("True", "Serving", "the job is scoring records")
        conds["Progressing"] = ("False", "Stable", "")
        conds["Degraded"] = ("False", "Healthy", "")
    else:
        phase = "Pending"
        if not driver.exists:
            reason, msg = "DriverCreating", "the driver pod does not exist yet"
        elif not job.reachable:
            reason, msg = "DriverStarting", "the driver's endpoint does not answer yet"
        else:
            reason, msg = "JobNotReady", job.ready_reason or "the job is not ready"
        conds["Ready"] = ("False", reason, msg)
        conds["Progressing"] = ("True", reason, msg)
        conds["Degraded"] = ("False", "Healthy", "")
    if observed.topics_error and "Degraded" in conds and conds["Degraded"][0] == "False":
        conds["Degraded"] = ("True", "TopicsUnavailable", observed.topics_error)

    served = job.serving.get(spec.data_type)
    current = None
    if served:
        current = {"name": served["name"], "version": str(served["version"]), "since": _rfc3339(served.get("since"))}
    want = spec.model
    if spec.suspend:
        conds["ModelReady"] = ("False", "Suspended", "")
    elif want is None:
        conds["ModelReady"] = ("True", "Serving", f"serving {current['name']} {current['version']}") if current \
            else ("False", "NoModel", f"no model for dataType {spec.data_type!r} on the models topic yet")
    elif current and current["name"] == want.name and current["version"] == want.version:
        conds["ModelReady"] = ("True", "Serving", f"serving {want.name} {want.version}")
    elif current:
        conds["ModelReady"] = ("False", "WaitingForModel",
                               f"serving {current['name']} {current['version']}, desired {want.name} {want.version}")
    else:
        conds["ModelReady"] = ("False", "NoModel", f"waiting for {want.name} {want.version} to serve")

    before = {c["type"]: c for c in (previous or {}).get("conditions", [])}
    conditions = []
    for ctype in ("Ready", "ModelReady", "Progressing", "Degraded"):
        status_, reason, message = conds[ctype]
        old = before.get(ctype)
        since = old["lastTransitionTime"] if old and old.get("status") == status_ else now
        conditions.append({"type": ctype, "status": status_, "reason": reason, "message": message,
                           "lastTransitionTime": since, "observedGeneration": gen})

    status = {
        "observedGeneration": gen,
        "phase": phase,
        "conditions": conditions,
        "replicas": (job.executors if job.executors is not None else 0) if job.reachable else 0,
        "selector": desired.selector_string(name),
        "model": {
            "current": current,
            "desired": {"name": want.name, "version": want.version} if want else None,
        },
        "consumerGroups": desired.consumer_groups(name, namespace),
        "lag": job.lag,
        "driver": desired.Names(name, namespace).endpoint,
    }
    # The status model is the schema: what we write must pass it.
    return s.ModelServingStatus.model_validate(status).model_dump(by_alias=True, exclude_none=True)
