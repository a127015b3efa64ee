"""What a model rollout does next, as a pure function of the spec, the last status and the job's report.

Immediate: publish spec.model as the serving model. Canary and Shadow: publish it as the
candidate (key `<dataType>/candidate`), let the job score with it, and judge its figures against
the serving model's; a canary that passes is promoted (published as the serving model, then the
candidate key is cleared), a candidate that fails is withdrawn (a tombstone on its key). A shadow
is never promoted here: the user promotes it by switching to Immediate.

Each step is recorded in status (the rollout id published, the rollout's phase), so a decision is
taken once; the reconciler only carries the plan out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, Protocol

from scorestream import naming
from scorestream.api.descriptor import CandidateRole, ModelDescriptor
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.api.v1alpha1.controls import rollback_version
from scorestream.config import duration_seconds
from scorestream.operator import clock, publish

Verdict = Literal["wait", "promote", "rollback"]


class Named(Protocol):
    """A model version, wherever it is written: spec.model, a status entry, the job's report."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...


class Measured(Named, Protocol):
    """A version the job runs, with its figures (None: not reported)."""

    @property
    def records(self) -> int | None: ...

    @property
    def errors(self) -> int | None: ...

    @property
    def mean_ms(self) -> float | None: ...

    @property
    def prediction_drift(self) -> float | None: ...


def same(a: Named | None, b: Named | None) -> bool:
    """The same name and version."""
    return a is not None and b is not None and (a.name, str(a.version)) == (b.name, str(b.version))


@dataclass(frozen=True)
class Figures:
    """One version's figures as the job reports them: records scored, records failed, mean time."""

    records: int = 0
    errors: int = 0
    mean_ms: float | None = None
    prediction_drift: float | None = None  # PSI of its predictions against its baseline

    @classmethod
    def of(cls, run: Measured | None) -> Figures:
        if run is None:
            return cls()
        return cls(run.records or 0, run.errors or 0, run.mean_ms, run.prediction_drift)


def judge(rules: s.AnalysisSpec, current: Figures, candidate: Figures, elapsed: float,
          promote_after: float | None) -> tuple[Verdict, str]:
    """The verdict on a candidate and why. `promote_after` None: never promote (a shadow)."""
    attempts = candidate.records + candidate.errors
    # Fail fast: errors that exceed the allowance even if every record up to minRecords succeeds.
    allowed = rules.max_error_rate * max(attempts, rules.min_records)
    if candidate.errors > allowed:
        return "rollback", (f"{candidate.errors} of {attempts} records failed ({candidate.errors / attempts:.2%}), "
                            f"more than maxErrorRate {rules.max_error_rate:.2%}")
    if attempts < rules.min_records:
        return "wait", f"{attempts} of minRecords {rules.min_records} records scored"
    if candidate.mean_ms is not None and current.mean_ms:
        ratio = candidate.mean_ms / current.mean_ms
        if ratio > rules.max_latency_ratio:
            return "rollback", (f"mean scoring time {candidate.mean_ms:.4f} ms is {ratio:.2f}x the serving model's "
                                f"{current.mean_ms:.4f} ms, more than maxLatencyRatio {rules.max_latency_ratio:g}")
    drift = candidate.prediction_drift
    if rules.max_drift is not None and drift is not None and drift > rules.max_drift:
        return "rollback", (f"its predictions drifted from its baseline: PSI {drift:.3f}, more than maxDrift "
                            f"{rules.max_drift:g}")
    rate = candidate.errors / attempts
    summary = f"{attempts} records, {rate:.2%} failed"
    if candidate.mean_ms is not None and current.mean_ms:
        summary += f", {candidate.mean_ms / current.mean_ms:.2f}x the serving model's mean scoring time"
    if rules.max_drift is not None and drift is not None:
        summary += f", prediction drift PSI {drift:.3f}"
    if promote_after is None:
        return "wait", f"{summary}; a shadow is promoted by setting strategy Immediate"
    if elapsed < promote_after:
        return "wait", f"{summary}; promoting after {promote_after:.0f}s ({elapsed:.0f}s so far)"
    return "promote", summary


@dataclass(frozen=True)
class Plan:
    """What to send to the models topic now; all None: nothing."""

    publish: ModelDescriptor | None = None  # a serving model or a candidate
    rollout_id: str | None = None  # of `publish`
    withdraw: bool = False  # a tombstone on the candidate key, after `publish`
    verdict: Verdict | None = None  # promote/rollback: what the analysis decided
    reason: str = ""  # why (the verdict's reason, or the analysis' progress)
    ends: str | None = None  # a withdrawal: the rollout id of the trial it ends

    @property
    def token(self) -> str | None:
        """Identifies the step, so a process never sends the same step twice."""
        if self.publish is not None:
            return self.rollout_id
        return f"withdraw:{self.ends}" if self.withdraw else None


def candidate_descriptor(spec: s.ModelServingSpec) -> ModelDescriptor:
    r = spec.rollout
    percent = r.canary.percent if r.strategy == "Canary" else 0.0
    return publish.descriptor(spec).model_copy(update={"candidate": CandidateRole(strategy=r.strategy, percent=percent)})


def plan(spec: s.ModelServingSpec, previous: s.ModelServingStatus, current: Measured | None,
         candidate: Measured | None, rejection: str | None, now: float) -> Plan:
    """`previous`: the last status; `current`/`candidate`: what the job serves (None: nothing, or
    the job did not answer); `rejection`: why the job rejected the published model, if it did."""
    want = spec.model
    if want is None:
        return Plan()
    model = previous.model
    published = model.published
    main = publish.descriptor(spec)
    main_id = publish.rollout_id(main)
    strategy = spec.rollout.strategy
    pinned = model.pinned
    if pinned and pinned.overrides == main_id:
        # Rolled back by request: spec.model waits until it changes (as a failed upgrade does).
        return Plan(reason=f"rolled back to {pinned.version} by request; spec.model {want.version} "
                           "is not served until spec.model changes")
    # Nothing serves yet (a new resource), or the model already serves: nothing to compare with.
    if strategy == "Immediate" or not current or same(current, want):
        if published != main_id and not same(current, want):
            # The candidate key is cleared too, even where the job drops a candidate that became
            # the serving model by itself: a restart must not restore an old trial.
            return Plan(publish=main, rollout_id=main_id, withdraw=bool(candidate or model.rollout))
        if candidate:  # spec.model went back to the serving model during a trial: end the trial
            return Plan(withdraw=True, reason="the candidate is no longer spec.model", ends=published)
        return Plan()
    cand = candidate_descriptor(spec)
    cand_id = publish.rollout_id(cand)
    if published == main_id:
        return Plan()  # promoted: waiting for the job to serve it
    if published != cand_id:
        return Plan(publish=cand, rollout_id=cand_id)
    trial = model.rollout
    if trial is None or trial.phase != "Analyzing":
        return Plan()  # rolled back: not retried until the spec changes
    if rejection:
        return Plan(withdraw=True, verdict="rollback", reason=f"the job rejected it: {rejection}", ends=cand_id)
    if not same(candidate, want):
        return Plan(reason="waiting for the job to install the candidate")
    rules = spec.rollout.canary if strategy == "Canary" else spec.rollout.shadow
    promote_after = duration_seconds(spec.rollout.canary.promote_after) if strategy == "Canary" else None
    verdict, why = judge(rules, Figures.of(current), Figures.of(candidate),
                         now - clock.seconds(trial.started_at), promote_after)
    if verdict == "promote":
        return Plan(publish=main, rollout_id=main_id, withdraw=True, verdict="promote", reason=why)
    if verdict == "rollback":
        return Plan(withdraw=True, verdict="rollback", reason=why, ends=cand_id)
    return Plan(reason=why)


# --- manual controls (the promote, abort and rollback-to annotations) ----------------------------

MAX_KEPT_MODEL = 4096  # bytes of spec.model's JSON kept in a history entry for a later rollback


@dataclass(frozen=True)
class Requests:
    """The control annotations' values on the resource (None: absent)."""

    promote: str | None = None
    abort: str | None = None
    rollback_to: str | None = None

    @classmethod
    def of(cls, annotations: dict[str, str] | None) -> Requests:
        a = annotations or {}
        return cls(a.get(naming.PROMOTE_ANNOTATION) or None, a.get(naming.ABORT_ANNOTATION) or None,
                   a.get(naming.ROLLBACK_ANNOTATION) or None)


@dataclass(frozen=True)
class Manual:
    """What one control request does: the step to take instead of `plan`'s (None: none), the
    status.controls to record, a pin to record, and the Event to post."""

    handled: s.ControlsStatus | None  # status.controls
    step: Plan | None = None
    pinned: s.PinnedModel | None = None  # status.model.pinned, when a rollback is taken now
    event: tuple[str, str, bool] | None = None  # (reason, message, warning)


def kept_model(want: s.ModelSpec) -> s.ModelSpec | None:
    """spec.model as a history entry keeps it for a later rollback, if it is small enough."""
    kept = want.model_dump(mode="json", by_alias=True, exclude_none=True)
    return want if len(json.dumps(kept)) <= MAX_KEPT_MODEL else None


@dataclass(frozen=True)
class _Asked:
    """What a control request is judged on."""

    spec: s.ModelServingSpec
    model: s.ModelStatus
    handled: dict[str, str]  # the request ids handled before (status.controls' promote, abort, rollbackTo)
    cand_id: str | None  # spec.model's candidate rollout id, under a Canary or Shadow strategy
    now: str

    @property
    def on_trial(self) -> bool:
        trial = self.model.rollout
        return self.spec.model is not None and self.cand_id is not None and self.model.published == self.cand_id \
            and trial is not None and trial.phase == "Analyzing"

    @property
    def label(self) -> str:
        want = self.spec.model
        return f"{want.name} {want.version}" if want else ""

    def done(self, key: str, value: str, message: str, step: Plan | None = None, warn: bool = False,
             pinned: s.PinnedModel | None = None, reason: str = "") -> Manual:
        controls = s.ControlsStatus.model_validate({**self.handled, key: value, "message": message,
                                                    "acted": step is not None})
        return Manual(controls, step, pinned,
                      (reason or ("ControlIgnored" if step is None else "ControlApplied"), message, warn))


def manual(spec: s.ModelServingSpec, previous: s.ModelServingStatus, requests: Requests, now: str) -> Manual:
    """The first control request not yet handled (abort, promote, rollback-to, in this order; the
    others at the next reconcile), as a pure function of the spec and the last status. A request
    that cannot be carried out is handled too, with an Event saying why: it is not retried."""
    before = previous.controls
    handled = before.model_dump(by_alias=True, exclude_none=True, include={"promote", "abort", "rollback_to"}) \
        if before else {}
    want = spec.model
    cand_id = publish.rollout_id(candidate_descriptor(spec)) if want and spec.rollout.strategy != "Immediate" else None
    asked = _Asked(spec, previous.model, handled, cand_id, now)
    if requests.abort and requests.abort != handled.get("abort"):
        return _abort(asked, requests.abort)
    if requests.promote and requests.promote != handled.get("promote"):
        return _promote(asked, requests.promote)
    if requests.rollback_to and requests.rollback_to != handled.get("rollbackTo"):
        return _rollback_to(asked, requests.rollback_to)
    return Manual(before)  # nothing new: the last answer stays


def _abort(asked: _Asked, value: str) -> Manual:
    if not asked.on_trial:
        return asked.done("abort", value, "abort asked for, but no candidate is on trial", warn=True)
    why = f"aborted by request ({naming.ABORT_ANNOTATION}={value})"
    return asked.done("abort", value, f"{asked.spec.data_type} candidate {asked.label} {why}",
                      Plan(withdraw=True, verdict="rollback", reason=why, ends=asked.cand_id), reason="CandidateAborted")


def _promote(asked: _Asked, value: str) -> Manual:
    if not asked.on_trial:
        return asked.done("promote", value, "promote asked for, but no candidate is on trial", warn=True)
    main = publish.descriptor(asked.spec)
    why = f"promoted by request ({naming.PROMOTE_ANNOTATION}={value})"
    return asked.done("promote", value, f"{asked.label} {why}",
                      Plan(publish=main, rollout_id=publish.rollout_id(main), withdraw=True, verdict="promote",
                           reason=why), reason="CandidatePromotedByRequest")


def _rollback_to(asked: _Asked, value: str) -> Manual:
    spec, model, want = asked.spec, asked.model, asked.spec.model
    history = model.history
    version = rollback_version(value, history)
    entry = next((e for e in reversed(history) if e.version == version), None)
    if entry is None:
        known = ", ".join(e.version for e in history) or "none"
        return asked.done("rollbackTo", value, f"rollback to {version!r} asked for, but status.model.history has no "
                          f"such version (it has: {known})", warn=True)
    if entry.model is None:
        return asked.done("rollbackTo", value, f"rollback to {version!r} asked for, but its spec.model was not kept "
                          "(it did not come from spec.model, or was larger than "
                          f"{MAX_KEPT_MODEL} bytes): set spec.model to it instead", warn=True)
    old = entry.model
    if want is not None and same(old, want) and not model.pinned:
        return asked.done("rollbackTo", value, f"rollback to {version!r} asked for, but it is spec.model already",
                          warn=True)
    # Verification already passed when this version was first rolled out: it is not re-run.
    d = publish.descriptor(spec.model_copy(update={"model": old.model_copy(update={"verification": None})}))
    why = f"rolled back to {old.name} {old.version} by request ({naming.ROLLBACK_ANNOTATION}={value})"
    main_id = publish.rollout_id(publish.descriptor(spec)) if want else None
    trial = model.rollout
    return asked.done("rollbackTo", value, why,
                      Plan(publish=d, rollout_id=publish.rollout_id(d),
                           withdraw=trial is not None and trial.phase == "Analyzing", verdict=None, reason=why),
                      pinned=s.PinnedModel(name=old.name, version=old.version, overrides=main_id, at=asked.now),
                      reason="RolledBackByRequest")
