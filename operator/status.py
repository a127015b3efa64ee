"""Status as a pure function of what was observed: phase, conditions, served model, lag.

The observer (observer.py) gathers an `Observed`; this module decides what it means. Conditions
follow the Kubernetes API conventions: a condition keeps its lastTransitionTime while its status
does not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from scorestream.operator import desired, publish, rollout
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
    terminating: bool = False  # deleted, stopping gracefully
    config_hash: str | None = None  # the job configuration it runs (its pod template's annotation)


@dataclass
class JobReport:
    """What the job's HTTP endpoint says (None fields: it did not answer)."""

    reachable: bool = False
    error: str | None = None  # it answered, but outside its contract: what was wrong
    ready: bool = False
    ready_reason: str = ""
    serving: dict[str, dict[str, Any]] = field(default_factory=dict)  # dataType -> {name, version, since, figures}
    candidates: dict[str, dict[str, Any]] = field(default_factory=dict)  # dataType -> {name, version, strategy, figures}
    lag: int | None = None
    executors: int | None = None
    rejected: list[dict[str, Any]] = field(default_factory=list)  # [{model: "name:version", dataType, reason, at}]
    executor_target: int | None = None  # the executors the job was asked for
    live_scaling: bool | None = None  # whether its cluster manager changes executors live
    input_rate: float | None = None  # records/s arriving on the data topic
    per_executor_rate: float | None = None  # records per busy second of one executor


@dataclass
class Observed:
    generation: int
    spec: s.ModelServingSpec
    data_topic_exists: bool | None = None  # None: not checked (broker unreachable)
    topics_error: str | None = None
    driver: DriverState = field(default_factory=DriverState)
    job: JobReport = field(default_factory=JobReport)
    apply_error: str | None = None
    published: str | None = None  # the rollout id the models topic has for spec.model
    published_now: bool = False  # ... and it was published by this reconcile
    publish_error: str | None = None
    plan: rollout.Plan | None = None  # the rollout step taken by this reconcile (sent, or nothing to send)
    scaling: dict[str, Any] | None = None  # status.scaling, as decided and carried out
    autoscaling: dict[str, Any] | None = None  # status.autoscaling
    last_stable: dict[str, Any] | None = None  # status.lastStableSpec
    upgrade: dict[str, Any] | None = None  # status.upgrade
    controls: dict[str, Any] | None = None  # status.controls: the control requests handled
    pinned_now: dict[str, Any] | None = None  # status.model.pinned, set by a rollback taken now


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rfc3339(since: Any) -> str | None:
    if isinstance(since, (int, float)):
        # The runtime reports seconds since the epoch (or milliseconds, as the report did).
        seconds = since / 1000 if since > 1e11 else since
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return since


def _reason(conds: dict[str, tuple[str, str, str]]) -> str:
    if conds["Degraded"][0] == "True":
        return conds["Degraded"][1]
    return conds["Ready"][1] if conds["Ready"][0] != "True" else ""


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
    elif job.error:
        # Another release's job, most likely: its figures cannot be trusted for any decision.
        phase = "Degraded"
        conds["Degraded"] = ("True", "JobAnswerInvalid", job.error)
        conds["Ready"] = ("False", "JobAnswerInvalid", job.error)
        conds["Progressing"] = ("False", "JobAnswerInvalid", job.error)
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
    upgrading = observed.upgrade or {}
    if upgrading.get("phase") == "Failed" and not spec.suspend and not observed.apply_error:
        conds["Degraded"] = ("True", "UpgradeFailed", upgrading.get("message", ""))
        conds["Progressing"] = ("False", "UpgradeRolledBack", upgrading.get("message", ""))
    elif upgrading.get("phase") == "Upgrading" and not spec.suspend and not observed.apply_error:
        conds["Progressing"] = ("True", "Upgrading", upgrading.get("message", ""))
    if observed.topics_error and "Degraded" in conds and conds["Degraded"][0] == "False":
        conds["Degraded"] = ("True", "TopicsUnavailable", observed.topics_error)
    if conds["Degraded"][0] == "True" and phase == "Pending":
        phase = "Degraded"  # the phase column must not say Pending while something is wrong

    served = job.serving.get(spec.data_type)
    current = None
    if served:
        current = {"name": served["name"], "version": str(served["version"]), "since": _rfc3339(served.get("since"))}
    want = spec.model
    prev_model = (previous or {}).get("model") or {}
    history = [dict(e) for e in prev_model.get("history", [])]
    pinned = observed.pinned_now or _still_pinned(prev_model.get("pinned"), spec)
    sent = observed.plan.publish if observed.plan and observed.plan.publish else want
    if observed.published_now and want and sent is not None:
        again = _find(history, sent.name, sent.version)  # re-published: it moves to the end
        history = [e for e in history if e is not again]
        entry = {"name": sent.name, "version": sent.version, "outcome": "Published", "at": now}
        kept = rollout.kept_model(want) if (sent.name, sent.version) == (want.name, want.version) else \
            (again or {}).get("model")
        history.append({**entry, **({"model": kept} if kept else {})})
    trial = _trial(observed, prev_model.get("rollout"), current, now)
    rolled_back = rejection(observed, history)
    if not rolled_back and trial and trial["phase"] == "RolledBack" and want and _same(trial["candidate"], want):
        rolled_back = trial["message"]
    if spec.suspend:
        conds["ModelReady"] = ("False", "Suspended", "")
    elif want is not None and pinned and not _same(pinned, want):
        serving = f"serving {current['name']} {current['version']}" if current else "waiting for the job"
        conds["ModelReady"] = ("False", "RolledBackByRequest",
                               f"rolled back to {pinned['name']} {pinned['version']} by request ({serving}); "
                               f"spec.model {want.name} {want.version} is not served until spec.model changes")
    elif want is not None and observed.publish_error:
        conds["ModelReady"] = ("False", "PublishFailed", observed.publish_error)
    elif want is not None and rolled_back and not (current and (current["name"], current["version"]) == (want.name, want.version)):
        keeps = f"; still serving {current['name']} {current['version']}" if current else ""
        conds["ModelReady"] = ("False", "RolledBack",
                               f"{want.name} {want.version} was rolled back: {rolled_back}{keeps}")
    elif want is not None and trial and trial["phase"] == "Analyzing" and _same(trial["candidate"], want) \
            and not _same(current, want):
        share = f" on {trial['percent']:g}% of records" if trial.get("percent") else " on every record, unwritten"
        serving = f"; serving {current['name']} {current['version']}" if current else ""
        conds["ModelReady"] = ("False", f"{trial['strategy']}Analysis",
                               f"{trial['strategy'].lower()} {want.name} {want.version}{share}: {trial['message']}{serving}")
    elif want is None:
        conds["ModelReady"] = ("True", "Serving", f"serving {current['name']} {current['version']}") if current \
            else ("False", "NoModel", f"no model for dataType {spec.data_type!r} on the models topic yet")
    elif current and current["name"] == want.name and current["version"] == want.version:
        conds["ModelReady"] = ("True", "Serving", f"serving {want.name} {want.version}")
    elif current:
        conds["ModelReady"] = ("False", "RollingOut",
                               f"serving {current['name']} {current['version']}, rolling out {want.name} {want.version}")
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
        "reason": _reason(conds),
        "replicas": (job.executors if job.executors is not None else 0) if job.reachable else 0,
        "selector": desired.selector_string(name),
        "model": {
            "current": current,
            "desired": {"name": want.name, "version": want.version} if want else None,
            "published": observed.published if want else None,
            "history": _held_back(_history(history, current, want, rolled_back, now), pinned, want, now),
            "rollout": trial,
            "pinned": pinned,
        },
        "consumerGroups": desired.consumer_groups(name, namespace),
        "lag": job.lag,
        "driver": desired.Names(name, namespace).endpoint,
        "scaling": observed.scaling or (previous or {}).get("scaling"),
        "autoscaling": observed.autoscaling if spec.autoscaling else None,
        "lastStableSpec": observed.last_stable,
        "upgrade": observed.upgrade,
        "controls": observed.controls or None,
    }
    # The status model is the schema: what we write must pass it.
    return s.ModelServingStatus.model_validate(status).model_dump(by_alias=True, exclude_none=True)


# A condition False for one of these reasons is on its way or at rest, not failing.
_BENIGN_FALSE = frozenset({"DriverCreating", "DriverStarting", "JobNotReady", "NoModel", "RollingOut", "Suspended",
                           "CanaryAnalysis", "ShadowAnalysis", "Upgrading", "Stable"})


@dataclass(frozen=True)
class Transition:
    """An Event to post: a condition that changed status or reason."""

    warning: bool
    reason: str
    message: str


def transitions(previous: dict[str, Any], new: dict[str, Any]) -> list[Transition]:
    """What users must see of a status change: each condition that changed, a Warning where it
    fails (Degraded=True, or another condition False for a failing reason)."""
    before = {c["type"]: c for c in previous.get("conditions", [])}
    out = []
    for cond in new["conditions"]:
        old = before.get(cond["type"])
        if old and old.get("status") == cond["status"] and old.get("reason") == cond["reason"]:
            continue
        failing = cond["status"] == "True" if cond["type"] == "Degraded" else \
            cond["status"] == "False" and cond["reason"] not in _BENIGN_FALSE
        out.append(Transition(failing, cond["reason"], f"{cond['type']}={cond['status']}: {cond['message']}".rstrip(": ")))
    return out


STATUS_FIELDS = [f.alias or name for name, f in s.ModelServingStatus.model_fields.items()]


def merge_patch(before: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that turns status `before` into `new`: a merge patch keeps what it
    does not name, so a field `new` no longer has (an upgrade that ended) is removed by name."""
    return {**{k: None for k in {*STATUS_FIELDS, *(before or {})} if k not in new}, **new}


def recorded(body: dict[str, Any]) -> desired.Observations:
    """What the resource's status says its last reconcile rendered from: for drift repair, which
    runs between reconciles and must not undo their choices."""
    status = body.get("status") or {}
    upgrade, stable = status.get("upgrade") or {}, status.get("lastStableSpec") or {}
    # As upgrade.assess: a failed upgrade of this generation runs the last stable spec.
    failed = upgrade.get("phase") == "Failed" and upgrade.get("generation") == body["metadata"].get("generation")
    ready = next((c for c in status.get("conditions", []) if c.get("type") == "Ready"), {})
    return desired.Observations(data_topic_missing=ready.get("reason") == "DataTopicMissing",
                                stable_spec=stable.get("spec") if failed else None)


def _still_pinned(pinned: dict[str, Any] | None, spec: s.ModelServingSpec) -> dict[str, Any] | None:
    """A rollback by request holds while spec.model is the one it held back."""
    if not pinned:
        return None
    main_id = publish.rollout_id(publish.descriptor(spec)) if spec.model else None
    return pinned if pinned.get("overrides") == main_id else None


def _held_back(history: list[dict[str, Any]], pinned: dict[str, Any] | None, want: s.ModelSpec | None,
               now: str) -> list[dict[str, Any]]:
    """spec.model, once the job no longer serves it after a rollback by request, is RolledBack."""
    held = _find(history, want.name, want.version) if pinned and want and not _same(pinned, want) else None
    if held is not None and held["outcome"] in ("Replaced", "Published"):
        held.update(outcome="RolledBack", at=now,
                    reason=f"rolled back to {pinned['name']} {pinned['version']} by request")
    return history


def _find(history: list[dict[str, Any]], name: str, version: str) -> dict[str, Any] | None:
    """A version's entry in the model history (each version has at most one)."""
    return next((e for e in reversed(history) if (e["name"], e["version"]) == (name, version)), None)


def _same(model: dict[str, Any] | None, want: s.ModelSpec | dict[str, Any]) -> bool:
    """The same name and version (a ModelSpec or a status entry)."""
    if not model:
        return False
    name, version = (want.name, want.version) if isinstance(want, s.ModelSpec) else (want["name"], want["version"])
    return (model.get("name"), str(model.get("version"))) == (name, str(version))


def _trial(observed: Observed, previous: dict[str, Any] | None, current: dict[str, Any] | None,
           now: str) -> dict[str, Any] | None:
    """status.model.rollout: the last canary or shadow, its phase and figures."""
    spec, plan = observed.spec, observed.plan
    want = spec.model
    trial = dict(previous) if previous else None
    if plan and plan.publish is not None and plan.publish.candidate is not None and want:
        canary = spec.rollout.strategy == "Canary"
        trial = {"strategy": spec.rollout.strategy, "phase": "Analyzing", "startedAt": now,
                 "percent": spec.rollout.canary.percent if canary else None,
                 "candidate": {"name": want.name, "version": want.version},
                 "message": "published; waiting for the job to install it"}
    if trial is None:
        return None
    trial["candidate"] = dict(trial["candidate"])
    if plan and trial["phase"] == "Analyzing":
        if plan.verdict == "promote":
            trial.update(phase="Promoting", message=f"promoted: {plan.reason}")
        elif plan.verdict == "rollback":
            trial.update(phase="RolledBack", message=plan.reason)
        elif plan.publish is not None and plan.publish.candidate is None:
            # strategy Immediate while the trial ran: the user promotes it, or replaces it (a
            # rollback by request publishes another version: the trial ends with it)
            sent = {"name": plan.publish.name, "version": plan.publish.version}
            trial.update(phase="Promoting", message="promoted by strategy Immediate") \
                if want and _same(trial["candidate"], want) and _same(sent, want) \
                else trial.update(phase="RolledBack", message=plan.reason or "replaced by spec.model")
        elif plan.withdraw:
            trial.update(phase="RolledBack", message=f"withdrawn: {plan.reason}")
        elif plan.reason:
            trial["message"] = plan.reason
    candidate = observed.job.candidates.get(spec.data_type)
    if trial["phase"] in ("Analyzing", "Promoting") and _same(candidate, trial["candidate"]):
        trial["candidate"].update({k: candidate[k] for k in ("records", "errors", "meanMs") if candidate.get(k) is not None})
        for k in ("agreement", "meanAbsDiff"):
            if candidate.get(k) is not None:
                trial[k] = candidate[k]
        served = observed.job.serving.get(spec.data_type)
        if served:
            trial["current"] = {"name": served["name"], "version": str(served["version"]),
                                **{k: served[k] for k in ("records", "errors", "meanMs") if served.get(k) is not None}}
    # The candidate serves only once promoted: Promoted even where the Promoting step was never
    # recorded (a status write lost to a concurrent reconcile, or a job that confirmed first).
    if trial["phase"] in ("Analyzing", "Promoting") and _same(current, trial["candidate"]):
        trial["phase"] = "Promoted"
    return trial


def rejection(observed: Observed, history: list[dict[str, Any]]) -> str | None:
    """Why the job rejected the desired model since it was last published, if it did."""
    want = observed.spec.model
    if want is None:
        return None
    entry = _find(history, want.name, want.version)
    if entry is None:
        return None
    if entry["outcome"] == "RolledBack":
        return entry.get("reason") or "rejected"
    published_at = datetime.strptime(entry["at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    label = f"{want.name}:{want.version}"
    for r in reversed(observed.job.rejected):
        # The job's clock and ours agree within a second or so; a rejection from before this
        # publication is about an earlier artifact of the same version.
        if r.get("model") == label and r.get("dataType") in (observed.spec.data_type, None) \
                and float(r.get("at", 0)) >= published_at - 2:
            return str(r.get("reason", "rejected"))
    return None


def _history(history: list[dict[str, Any]], current: dict[str, Any] | None, want: s.ModelSpec | None,
             rolled_back: str | None, now: str, keep: int = 10) -> list[dict[str, Any]]:
    """The bounded record of versions: what serves is Serving, what served before is Replaced, a
    published version the job rejected is RolledBack."""
    if current:
        e = _find(history, current["name"], current["version"])
        if e is None:
            history.append({"name": current["name"], "version": current["version"], "outcome": "Serving",
                            "at": current.get("since") or now})
        elif e["outcome"] != "Serving":
            e.update(outcome="Serving", at=current.get("since") or now)
            e.pop("reason", None)
        for other in history:
            if other["outcome"] == "Serving" and (other["name"], other["version"]) != (current["name"], current["version"]):
                other.update(outcome="Replaced", at=now)
    if want is not None and rolled_back:
        e = _find(history, want.name, want.version)
        if e is not None and e["outcome"] == "Published":
            e.update(outcome="RolledBack", at=now, reason=rolled_back[:1000])
    return history[-keep:]
