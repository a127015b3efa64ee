"""Status as a pure function of what was observed: phase, conditions, served model, lag.

The reconciler gathers an `Observation` and the `Outcome` of its steps (or, where nothing could
run, a `Refusal`); this module decides what they mean, on the typed status (`ModelServingStatus`):
the previous status is parsed once when a reconcile starts, and only `wire` turns the result into
the subresource's JSON. Conditions are set as apimachinery sets them (conditions.set_condition).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scorestream import naming
from scorestream.api import job_http
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import clock, desired, publish, rollout, upgrade
from scorestream.operator.conditions import BENIGN_FALSE, CRASH_REASONS, Reason, analysis, crash_reason, \
    set_condition
from scorestream.operator.conditions import find as find_condition
from scorestream.operator.rollout import same

LOG = logging.getLogger(__name__)
Status = s.ModelServingStatus
Entry = s.ModelHistoryEntry
CONDITION_TYPES: tuple[s.ConditionType, ...] = ("Ready", "ModelReady", "Progressing", "Degraded")


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


class Running(BaseModel):
    """A version the job runs (serving, or on trial as a candidate), with its figures."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, coerce_numbers_to_str=True)

    name: str
    version: str
    since: float | str | None = None
    records: int | None = None
    errors: int | None = None
    mean_ms: float | None = Field(None, alias="meanMs")
    strategy: str | None = None  # a candidate's
    percent: float | None = None
    agreement: float | None = None  # a shadow's
    mean_abs_diff: float | None = Field(None, alias="meanAbsDiff")
    prediction_drift: float | None = Field(None, alias="predictionDrift")  # PSI against its baseline


class JobReport(BaseModel):
    """What the job's HTTP endpoint says (None fields: it did not answer)."""

    reachable: bool = False
    error: str | None = None  # it answered, but outside its contract: what was wrong
    ready: bool = False
    ready_reason: str = ""
    serving: dict[str, Running] = Field(default_factory=dict)  # by dataType
    candidates: dict[str, Running] = Field(default_factory=dict)  # by dataType
    lag: int | None = None
    executors: int | None = None
    rejected: list[job_http.Rejection] = Field(default_factory=list)
    executor_target: int | None = None  # the executors the job was asked for
    live_scaling: bool | None = None  # whether its cluster manager changes executors live
    input_rate: float | None = None  # records/s arriving on the data topic
    per_executor_rate: float | None = None  # records per busy second of one executor
    kafka_errors: list[job_http.KafkaError] = Field(default_factory=list)  # the cluster's, as the job finds them


@dataclass(frozen=True)
class Observation:
    """What one reconcile read, before it did anything: Kafka's topics, the driver pod, the job."""

    generation: int
    spec: s.ModelServingSpec
    data_topic_exists: bool | None = None  # None: not checked (broker unreachable)
    topics_error: str | None = None
    credentials_error: str | None = None  # a Secret or key spec.kafka.tls/authentication names is missing
    topics_waiting: str | None = None  # the KafkaTopics not Ready yet (spec.kafka.strimziTopics)
    kafka_unreachable: bool = False  # ... because the brokers did not answer in time
    driver: DriverState = field(default_factory=DriverState)
    job: JobReport = field(default_factory=JobReport)


@dataclass(frozen=True)
class Outcome:
    """What one reconcile did about it: each step (upgrade, apply, rollout, scaling) returns a new
    Outcome with its own part."""

    apply_error: str | None = None
    published: str | None = None  # the rollout id the models topic has for spec.model
    published_now: bool = False  # ... and it was published by this reconcile
    publish_error: str | None = None
    plan: rollout.Plan | None = None  # the rollout step taken by this reconcile (sent, or nothing to send)
    scaling: s.ScalingStatus | None = None  # as decided and carried out
    autoscaling: s.AutoscalingStatus | None = None
    last_stable: s.StableSpec | None = None
    upgrade: s.UpgradeStatus | None = None
    controls: s.ControlsStatus | None = None  # the control requests handled
    pinned_now: s.PinnedModel | None = None  # set by a rollback taken now


@dataclass(frozen=True)
class Observed(Outcome, Observation):
    """An Observation and its Outcome together, as `compute` reads them."""

    @classmethod
    def of(cls, seen: Observation, done: Outcome) -> "Observed":
        return cls(**{f.name: getattr(seen, f.name) for f in fields(Observation)},
                   **{f.name: getattr(done, f.name) for f in fields(Outcome)})


@dataclass(frozen=True)
class Refusal:
    """A resource the operator will not run (an invalid spec, a refused image): nothing was
    applied or observed, and what the status said besides stands."""

    generation: int
    reason: Reason
    message: str


@dataclass(frozen=True)
class Finding:
    """One condition's verdict."""

    status: Literal["True", "False"]
    reason: Reason
    message: str = ""


@dataclass(frozen=True)
class Health:
    phase: s.Phase
    ready: Finding
    progressing: Finding
    degraded: Finding


def invalid_spec(generation: int, error: ValidationError) -> Refusal:
    message = "; ".join(f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
    return Refusal(generation, Reason.INVALID_SPEC, message)


# --- reading and writing the subresource --------------------------------------------------------

def parse(raw: Mapping[str, Any] | None) -> Status:
    """The status as written. A field that does not read as this release's schema (written by
    another release) is dropped, not the whole status: the rest (the model history) stays."""
    raw = raw or {}
    try:
        return Status.model_validate(raw)
    except ValidationError:
        kept = {}
        for key, value in raw.items():
            try:
                Status.model_validate({key: value})
            except ValidationError as e:
                LOG.warning("status.%s does not read as this release's status, and is rewritten: %s", key, e)
                continue
            kept[key] = value
        return Status.model_validate(kept)


def wire(status: Status) -> dict[str, Any]:
    """The status subresource's JSON."""
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


STATUS_FIELDS = [f.alias or name for name, f in Status.model_fields.items()]


def merge_patch(before: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that turns status `before` into `new`: a merge patch keeps what it
    does not name, so a field `new` no longer has (an upgrade that ended) is removed by name."""
    return {**{k: None for k in {*STATUS_FIELDS, *(before or {})} if k not in new}, **new}


# --- the status -----------------------------------------------------------------------------------

def compute(name: str, namespace: str, observed: Observed | Refusal, previous: Status | None,
            now: str | None = None) -> Status:
    """The status for what was observed."""
    now = now or clock.now_text()
    previous = previous or Status()
    if isinstance(observed, Refusal):
        return _refused(observed, previous, now)
    health = phase_and_health(observed)
    model, model_ready = model_status(observed, previous.model, now)
    findings = {"Ready": health.ready, "ModelReady": model_ready, "Progressing": health.progressing,
                "Degraded": health.degraded}
    job = observed.job
    spec = observed.spec
    return Status(
        observedGeneration=observed.generation,
        phase=health.phase,
        conditions=_conditions(previous.conditions, findings, observed.generation, now),
        reason=not_ready_reason(findings),
        replicas=(job.executors or 0) if job.reachable else 0,
        selector=naming.selector_string(name),
        model=model,
        consumerGroups=s.ConsumerGroups.model_validate(desired.consumer_groups(name, namespace)),
        lag=job.lag,
        driver=naming.Names(name, namespace).endpoint,
        scaling=observed.scaling or previous.scaling,
        autoscaling=observed.autoscaling if spec.autoscaling else None,
        lastStableSpec=observed.last_stable,
        upgrade=observed.upgrade,
        controls=observed.controls,
    )


def _conditions(before: list[s.Condition], findings: Mapping[s.ConditionType, Finding], generation: int,
                now: str) -> list[s.Condition]:
    conditions = before
    for ctype, f in findings.items():
        conditions = set_condition(conditions, ctype, f.status, f.reason, f.message, generation, now)
    order = {t: i for i, t in enumerate(CONDITION_TYPES)}
    return sorted(conditions, key=lambda c: order[c.type])


def _refused(refusal: Refusal, previous: Status, now: str) -> Status:
    """Ready, Progressing False and Degraded True with the refusal's reason; an invalid spec says
    so in ModelReady too (a refused image keeps it: the job may still serve its model)."""
    fails = Finding("False", refusal.reason, refusal.message)
    findings = {"Ready": fails, "Progressing": fails, "Degraded": Finding("True", refusal.reason, refusal.message)}
    if refusal.reason == Reason.INVALID_SPEC:
        findings["ModelReady"] = fails
    return previous.model_copy(update={
        "observed_generation": refusal.generation, "phase": "Failed", "reason": not_ready_reason(findings),
        "conditions": _conditions(previous.conditions, findings, refusal.generation, now)})


# --- phase, Ready, Progressing, Degraded ------------------------------------------------------------

def phase_and_health(observed: Observed) -> Health:
    """The phase and the Ready, Progressing and Degraded conditions: the job's health, then a job
    upgrade's and the topics' say on it."""
    health = _job_health(observed)
    up = None if observed.apply_error or observed.spec.suspend else observed.upgrade
    if up is not None and up.phase == "Failed":
        health = Health(health.phase, health.ready, Finding("False", Reason.UPGRADE_ROLLED_BACK, up.message),
                        Finding("True", Reason.UPGRADE_FAILED, up.message))
    elif up is not None and up.phase == "Upgrading":
        health = Health(health.phase, health.ready, Finding("True", Reason.UPGRADING, up.message), health.degraded)
    if observed.topics_error and health.degraded.status == "False":
        health = Health(health.phase, health.ready, health.progressing,
                        Finding("True", Reason.KAFKA_UNREACHABLE if observed.kafka_unreachable
                                else Reason.TOPICS_UNAVAILABLE, observed.topics_error))
    waiting = kafka_wait(observed)
    if waiting and not holds_driver(observed) and health.degraded.status == "False":
        health = Health(health.phase, health.ready, health.progressing, Finding("True", *waiting))
    if health.degraded.status == "True" and health.phase == "Pending":
        # the phase column must not say Pending while something is wrong
        health = Health("Degraded", health.ready, health.progressing, health.degraded)
    return health


def kafka_wait(observed: Observation) -> tuple[Reason, str] | None:
    """What the driver waits for on the Kafka side, with the message saying it: a Secret
    spec.kafka names is missing (the pod would not start), or its KafkaTopics are not Ready."""
    if observed.credentials_error:
        return Reason.KAFKA_CREDENTIALS_MISSING, observed.credentials_error
    if observed.topics_waiting:
        return Reason.TOPICS_NOT_READY, observed.topics_waiting
    return None


def holds_driver(observed: Observation) -> bool:
    """Whether the driver is held back for what it waits for on the Kafka side (`kafka_wait`). A
    driver already running keeps running: its pod keeps the Secret it mounted, and its topics were
    there when it started; the resource says Degraded instead."""
    return kafka_wait(observed) is not None and not (observed.driver.exists and not observed.driver.terminating)


def not_ready_reason(findings: Mapping[s.ConditionType, Finding]) -> str:
    """Why the resource is not ready, in one word (a column of `kubectl get ms`): Degraded's
    reason while it is True, else Ready's while that is False; empty when ready."""
    if findings["Degraded"].status == "True":
        return str(findings["Degraded"].reason)
    return str(findings["Ready"].reason) if findings["Ready"].status != "True" else ""


def _failing(phase: s.Phase, reason: Reason, message: str, degraded: Reason | None = None) -> Health:
    fails = Finding("False", reason, message)
    return Health(phase, fails, fails, Finding("True", degraded or reason, message))


# The topics the job writes: while one is short of in-sync replicas, the job cannot make progress.
WRITTEN_ROLES = ("output", "deadLetter", "internal")


def under_replicated(job: JobReport) -> tuple[bool, str] | None:
    """Whether the job reports topics with fewer in-sync replicas than their min.insync.replicas:
    (whether one is a topic it writes, what it says), or None."""
    short = [e for e in job.kafka_errors if e.code == "NOT_ENOUGH_REPLICAS"]
    if not short:
        return None
    return any(e.role in WRITTEN_ROLES for e in short), "; ".join(e.message for e in short)[:1000]


def _job_health(observed: Observed) -> Health:
    spec, driver, job = observed.spec, observed.driver, observed.job
    crashing = driver.waiting_reason in CRASH_REASONS or (driver.restarts >= 3 and not driver.ready)
    if observed.apply_error:
        return _failing("Failed", Reason.APPLY_FAILED, observed.apply_error)
    if spec.suspend:
        return Health("Suspended", Finding("False", Reason.SUSPENDED,
                                           "spec.suspend is true: the job is stopped and keeps its position"),
                      Finding("False", Reason.SUSPENDED), Finding("False", Reason.SUSPENDED))
    if observed.data_topic_exists is False:
        msg = f"data topic {spec.kafka.data_topic!r} does not exist on {spec.kafka.bootstrap_servers}; retrying"
        return Health("Pending", Finding("False", Reason.DATA_TOPIC_MISSING, msg),
                      Finding("True", Reason.DATA_TOPIC_MISSING, msg), Finding("False", Reason.DATA_TOPIC_MISSING, msg))
    if holds_driver(observed) and observed.credentials_error:
        return Health("Pending", Finding("False", Reason.KAFKA_CREDENTIALS_MISSING, observed.credentials_error),
                      Finding("False", Reason.KAFKA_CREDENTIALS_MISSING, observed.credentials_error),
                      Finding("True", Reason.KAFKA_CREDENTIALS_MISSING, observed.credentials_error))
    if holds_driver(observed):
        return Health("Pending", Finding("False", Reason.TOPICS_NOT_READY, observed.topics_waiting),
                      Finding("True", Reason.TOPICS_NOT_READY, observed.topics_waiting),
                      Finding("False", Reason.TOPICS_NOT_READY, observed.topics_waiting))
    if crashing:
        msg = f"driver pod restarted {driver.restarts} times"
        if driver.last_termination:
            msg += f"; last termination: {driver.last_termination}"
        return _failing("Degraded", Reason.DRIVER_FAILING, msg, degraded=crash_reason(driver.waiting_reason))
    if job.error:
        # Another release's job, most likely: its figures cannot be trusted for any decision.
        return _failing("Degraded", Reason.JOB_ANSWER_INVALID, job.error)
    short = under_replicated(job)
    if short is not None and short[0]:
        # Its writes are refused until the replicas are back: it serves nothing meanwhile, and
        # loses nothing (what is not written is not committed). A restart would not help.
        return _failing("Degraded", Reason.NOT_ENOUGH_REPLICAS, short[1])
    if driver.ready and job.ready:
        if short is not None:  # its reads go on; another producer's writes to the topic do not
            return Health("Running", Finding("True", Reason.SERVING, "the job is scoring records"),
                          Finding("False", Reason.STABLE), Finding("True", Reason.NOT_ENOUGH_REPLICAS, short[1]))
        return Health("Running", Finding("True", Reason.SERVING, "the job is scoring records"),
                      Finding("False", Reason.STABLE), Finding("False", Reason.HEALTHY))
    if not driver.exists:
        reason, msg = Reason.DRIVER_CREATING, "the driver pod does not exist yet"
    elif not job.reachable:
        reason, msg = Reason.DRIVER_STARTING, "the driver's endpoint does not answer yet"
    else:
        reason, msg = Reason.JOB_NOT_READY, job.ready_reason or "the job is not ready"
    return Health("Pending", Finding("False", reason, msg), Finding("True", reason, msg),
                  Finding("False", Reason.HEALTHY))


# --- the model: what serves, its history, the trial, ModelReady ------------------------------------

def model_status(observed: Observed, previous: s.ModelStatus, now: str) -> tuple[s.ModelStatus, Finding]:
    """status.model and the ModelReady condition."""
    spec = observed.spec
    want = spec.model
    current = served(observed)
    pinned = observed.pinned_now or still_pinned(previous.pinned, spec)
    history = _published(observed, previous.history, now)
    trial = trial_status(observed, previous.rollout, current, now)
    rolled_back = rejection(observed, history)
    if not rolled_back and trial and trial.phase == "RolledBack" and want and same(trial.candidate, want):
        rolled_back = trial.message
    finding = model_ready(spec, current, pinned, trial, rolled_back, observed.publish_error)
    history = _held_back(_history(history, current, want, rolled_back, now), pinned, want, now)
    model = s.ModelStatus(current=current, desired=s.ServedModel(name=want.name, version=want.version) if want else None,
                          published=observed.published if want else None, history=history, rollout=trial,
                          pinned=pinned)
    return model, finding


def served(observed: Observation) -> s.ServedModel | None:
    """The model the job reports it serves for spec.dataType."""
    run = observed.job.serving.get(observed.spec.data_type)
    return s.ServedModel(name=run.name, version=run.version, since=clock.from_job(run.since)) if run else None


def model_ready(spec: s.ModelServingSpec, current: s.ServedModel | None, pinned: s.PinnedModel | None,
                trial: s.RolloutStatus | None, rolled_back: str | None, publish_error: str | None) -> Finding:
    want = spec.model
    if spec.suspend:
        return Finding("False", Reason.SUSPENDED)
    if want is None:
        return Finding("True", Reason.SERVING, f"serving {current.name} {current.version}") if current else \
            Finding("False", Reason.NO_MODEL, f"no model for dataType {spec.data_type!r} on the models topic yet")
    if pinned and not same(pinned, want):
        serving = f"serving {current.name} {current.version}" if current else "waiting for the job"
        return Finding("False", Reason.ROLLED_BACK_BY_REQUEST,
                       f"rolled back to {pinned.name} {pinned.version} by request ({serving}); "
                       f"spec.model {want.name} {want.version} is not served until spec.model changes")
    if publish_error:
        return Finding("False", Reason.PUBLISH_FAILED, publish_error)
    if rolled_back and not same(current, want):
        keeps = f"; still serving {current.name} {current.version}" if current else ""
        return Finding("False", Reason.ROLLED_BACK, f"{want.name} {want.version} was rolled back: {rolled_back}{keeps}")
    if trial and trial.phase == "Analyzing" and same(trial.candidate, want) and not same(current, want):
        share = f" on {trial.percent:g}% of records" if trial.percent else " on every record, unwritten"
        serving = f"; serving {current.name} {current.version}" if current else ""
        return Finding("False", analysis(trial.strategy),
                       f"{trial.strategy.lower()} {want.name} {want.version}{share}: {trial.message}{serving}")
    if same(current, want):
        return Finding("True", Reason.SERVING, f"serving {want.name} {want.version}")
    if current:
        return Finding("False", Reason.ROLLING_OUT,
                       f"serving {current.name} {current.version}, rolling out {want.name} {want.version}")
    return Finding("False", Reason.NO_MODEL, f"waiting for {want.name} {want.version} to serve")


def still_pinned(pinned: s.PinnedModel | None, spec: s.ModelServingSpec) -> s.PinnedModel | None:
    """A rollback by request holds while spec.model is the one it held back."""
    if not pinned:
        return None
    main_id = publish.rollout_id(publish.descriptor(spec)) if spec.model else None
    return pinned if pinned.overrides == main_id else None


def find(history: list[Entry], model: rollout.Named) -> Entry | None:
    """A version's entry in the model history (each version has at most one)."""
    return next((e for e in reversed(history) if same(e, model)), None)


def _replace(history: list[Entry], old: Entry, **update: Any) -> list[Entry]:
    new = old.model_copy(update=update)
    return [new if e is old else e for e in history]


def _published(observed: Observed, history: list[Entry], now: str) -> list[Entry]:
    """The history with what this reconcile published (a version published again moves to the end)."""
    want = observed.spec.model
    plan = observed.plan
    sent = plan.publish if plan and plan.publish else want
    if not (observed.published_now and want and sent is not None):
        return history
    again = find(history, sent)
    kept = rollout.kept_model(want) if same(sent, want) else (again.model if again else None)
    return [*(e for e in history if e is not again),
            Entry(name=sent.name, version=sent.version, outcome="Published", at=now, model=kept)]


def _history(history: list[Entry], current: s.ServedModel | None, want: s.ModelSpec | None,
             rolled_back: str | None, now: str, keep: int = 10) -> list[Entry]:
    """The bounded record of versions: what serves is Serving, what served before is Replaced, a
    published version the job rejected is RolledBack."""
    if current:
        e = find(history, current)
        if e is None:
            history = [*history, Entry(name=current.name, version=current.version, outcome="Serving",
                                       at=current.since or now)]
        elif e.outcome != "Serving":
            history = _replace(history, e, outcome="Serving", at=current.since or now, reason=None)
        history = [e.model_copy(update={"outcome": "Replaced", "at": now})
                   if e.outcome == "Serving" and not same(e, current) else e for e in history]
    if want is not None and rolled_back:
        e = find(history, want)
        if e is not None and e.outcome == "Published":
            history = _replace(history, e, outcome="RolledBack", at=now, reason=rolled_back[:1000])
    return history[-keep:]


def _held_back(history: list[Entry], pinned: s.PinnedModel | None, want: s.ModelSpec | None,
               now: str) -> list[Entry]:
    """spec.model, once the job no longer serves it after a rollback by request, is RolledBack."""
    held = find(history, want) if pinned and want and not same(pinned, want) else None
    if held is not None and held.outcome in ("Replaced", "Published"):
        return _replace(history, held, outcome="RolledBack", at=now,
                        reason=f"rolled back to {pinned.name} {pinned.version} by request")
    return history


def rejection(observed: Observation, history: list[Entry]) -> str | None:
    """Why the job rejected the desired model since it was last published, if it did."""
    want = observed.spec.model
    if want is None:
        return None
    entry = find(history, want)
    if entry is None:
        return None
    if entry.outcome == "RolledBack":
        return entry.reason or "rejected"
    published_at = clock.seconds(entry.at)
    label = f"{want.name}:{want.version}"
    for r in reversed(observed.job.rejected):
        # The job's clock and ours agree within a second or so; a rejection from before this
        # publication is about an earlier artifact of the same version.
        if r.model == label and r.dataType in (observed.spec.data_type, None) and r.at >= published_at - 2:
            return r.reason
    return None


# --- the trial (status.model.rollout) -------------------------------------------------------------

def trial_status(observed: Observed, previous: s.RolloutStatus | None, current: s.ServedModel | None,
                 now: str) -> s.RolloutStatus | None:
    """status.model.rollout: the last canary or shadow, its phase and figures."""
    # The figures first: a verdict reached on this observation ends the trial with the figures it
    # was judged on, not with those of the last status written while it ran.
    trial = _trial_step(observed, None if previous is None else _with_figures(previous, observed), now)
    if trial is None:
        return None
    trial = _with_figures(trial, observed)
    # The candidate serves only once promoted: Promoted even where the Promoting step was never
    # recorded (a job that confirmed before the status saying it was sent was written).
    if trial.phase in ("Analyzing", "Promoting") and same(current, trial.candidate):
        trial = trial.model_copy(update={"phase": "Promoted"})
    return trial


def _trial_step(observed: Observed, trial: s.RolloutStatus | None, now: str) -> s.RolloutStatus | None:
    """The trial as this reconcile's rollout step leaves it: started, judged, or as it was."""
    spec, plan = observed.spec, observed.plan
    want = spec.model
    if plan and plan.publish is not None and plan.publish.candidate is not None and want:
        canary = spec.rollout.strategy == "Canary"
        trial = s.RolloutStatus(strategy=spec.rollout.strategy, phase="Analyzing", startedAt=now,
                                percent=spec.rollout.canary.percent if canary else None,
                                candidate=s.VersionFigures(name=want.name, version=want.version),
                                message="published; waiting for the job to install it")
    if trial is None or not plan or trial.phase != "Analyzing":
        return trial
    if plan.verdict == "promote":
        return trial.model_copy(update={"phase": "Promoting", "message": f"promoted: {plan.reason}"})
    if plan.verdict == "rollback":
        return trial.model_copy(update={"phase": "RolledBack", "message": plan.reason})
    if plan.publish is not None and plan.publish.candidate is None:
        # strategy Immediate while the trial ran: the user promotes it, or replaces it (a
        # rollback by request publishes another version: the trial ends with it)
        if want and same(trial.candidate, want) and same(plan.publish, want):
            return trial.model_copy(update={"phase": "Promoting", "message": "promoted by strategy Immediate"})
        return trial.model_copy(update={"phase": "RolledBack", "message": plan.reason or "replaced by spec.model"})
    if plan.withdraw:
        return trial.model_copy(update={"phase": "RolledBack", "message": f"withdrawn: {plan.reason}"})
    if plan.reason:
        return trial.model_copy(update={"message": plan.reason})
    return trial


def _figures(base: s.VersionFigures | None, run: Running) -> s.VersionFigures:
    """A version's figures as status holds them, updated with what the job reports now."""
    known = {k: v for k, v in (("records", run.records), ("errors", run.errors), ("mean_ms", run.mean_ms),
                               ("prediction_drift", run.prediction_drift)) if v is not None}
    if base is None:
        return s.VersionFigures(name=run.name, version=run.version, **known)
    return base.model_copy(update=known)


def _with_figures(trial: s.RolloutStatus, observed: Observed) -> s.RolloutStatus:
    """The trial with the job's figures for its candidate and the serving model, while it runs."""
    data_type = observed.spec.data_type
    candidate = observed.job.candidates.get(data_type)
    if trial.phase not in ("Analyzing", "Promoting") or not same(candidate, trial.candidate):
        return trial
    run = observed.job.serving.get(data_type)
    return trial.model_copy(update={
        "candidate": _figures(trial.candidate, candidate),
        "agreement": trial.agreement if candidate.agreement is None else candidate.agreement,
        "mean_abs_diff": trial.mean_abs_diff if candidate.mean_abs_diff is None else candidate.mean_abs_diff,
        "current": _figures(None, run) if run else trial.current})


# --- what others read of a status -------------------------------------------------------------------

@dataclass(frozen=True)
class Transition:
    """An Event to post: a condition that changed status or reason."""

    warning: bool
    reason: str
    message: str


def transitions(previous: list[s.Condition], new: list[s.Condition]) -> list[Transition]:
    """What users must see of a status change: each condition that changed, a Warning where it
    fails (Degraded=True, or another condition False for a failing reason)."""
    before = {c.type: c for c in previous}
    out = []
    for cond in new:
        old = before.get(cond.type)
        if old and old.status == cond.status and old.reason == cond.reason:
            continue
        failing = cond.status == "True" if cond.type == "Degraded" else \
            cond.status == "False" and cond.reason not in BENIGN_FALSE
        out.append(Transition(failing, cond.reason, f"{cond.type}={cond.status}: {cond.message}".rstrip(": ")))
    return out


def recorded(body: Mapping[str, Any]) -> desired.Observations:
    """What the resource's status says its last reconcile rendered from: for drift repair, which
    runs between reconciles and must not undo their choices."""
    status, generation = parse(body.get("status")), body["metadata"].get("generation", 0)
    ready = find_condition(status.conditions, "Ready")
    return desired.Observations(data_topic_missing=ready is not None and ready.reason == Reason.DATA_TOPIC_MISSING,
                                kafka_waiting=ready is not None and ready.reason in (
                                    Reason.KAFKA_CREDENTIALS_MISSING, Reason.TOPICS_NOT_READY),
                                stable_spec=upgrade.runs_instead(status, generation))
