"""One reconcile: apply the desired objects, observe, compute status, tell users what changed.

Called by the kopf handlers for create/update/resume, by the periodic observer timer, and when a
child object is deleted or edited. Everything that decides lives in desired.py and status.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import kopf
from pydantic import ValidationError

from scorestream.operator import control, desired, images, metrics, observer, publish, rollout, scaling, status, upgrade
from scorestream.operator.kube import Kube, KubeError, NotOwned
from scorestream.operator import spec as s
from scorestream.operator.settings import OperatorConfig
from scorestream.operator.spec import ModelServingSpec


@dataclass
class Context:
    """What every reconcile shares: the API client and the operator's configuration."""

    kube: Kube
    config: OperatorConfig
    topics: observer.TopicsChecks = field(init=False)
    # uid -> the rollout id published (or being published) by this process: where the status
    # saying it was sent could not be written, the next reconcile must not send it twice.
    published: dict[str, str] = field(default_factory=dict, init=False)
    _running: set[asyncio.Task] = field(default_factory=set, init=False)
    # Weak: a resource's lock lives while a reconcile of it runs or waits, and no longer.
    _turns: weakref.WeakValueDictionary[str, asyncio.Lock] = field(default_factory=weakref.WeakValueDictionary,
                                                                   init=False)

    def __post_init__(self) -> None:
        self.topics = observer.TopicsChecks(ttl=self.config.topics_recheck)

    def turns(self, uid: str) -> asyncio.Lock:
        """One resource's reconciles, taken one at a time: kopf runs the update handler, the
        timers and the children's event handlers of one resource concurrently, and two
        reconciles at once would apply, publish and scale from the same stale status."""
        turns = self._turns.get(uid)
        if turns is None:
            turns = self._turns[uid] = asyncio.Lock()
        return turns

    async def close(self, timeout: float = 10.0) -> None:
        """Let reconciles in flight finish (kopf may still run a timer while it cleans up), then
        close the client."""
        running = [t for t in self._running if t is not asyncio.current_task()]
        if running:
            await asyncio.wait(running, timeout=timeout)
        await self.kube.close()


def invalid_spec_status(body: dict[str, Any], error: ValidationError, now: str | None = None) -> dict[str, Any]:
    gen = body.get("metadata", {}).get("generation", 0)
    message = "; ".join(f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
    conditions = [{"type": t, "status": st, "reason": "InvalidSpec", "message": message,
                   "lastTransitionTime": now or status._now(), "observedGeneration": gen}
                  for t, st in (("Ready", "False"), ("ModelReady", "False"), ("Progressing", "False"),
                                ("Degraded", "True"))]
    return {"observedGeneration": gen, "phase": "Failed", "conditions": conditions}


def refused_status(body: dict[str, Any], reason: str, message: str, now: str | None = None) -> dict[str, Any]:
    """The status of a resource the operator will not run (its image): Degraded with the reason,
    not Ready; what the status said besides (model history, the last stable spec) is kept, and
    a condition already saying the same keeps its transition time."""
    previous = dict(body.get("status") or {})
    gen = body.get("metadata", {}).get("generation", 0)
    before = {c.get("type"): c for c in previous.get("conditions", [])}
    conditions = []
    for ctype, cstatus in (("Ready", "False"), ("Progressing", "False"), ("Degraded", "True")):
        old = before.get(ctype) or {}
        same = old.get("status") == cstatus and old.get("reason") == reason
        conditions.append({"type": ctype, "status": cstatus, "reason": reason, "message": message,
                           "lastTransitionTime": old["lastTransitionTime"] if same else (now or status._now()),
                           "observedGeneration": gen})
    conditions += [c for c in previous.get("conditions", []) if c.get("type") not in ("Ready", "Progressing", "Degraded")]
    return {**previous, "observedGeneration": gen, "phase": "Failed", "conditions": conditions}


async def reconcile(ctx: Context, body: dict[str, Any], logger: logging.Logger | Any,
                    trigger: str) -> dict[str, Any] | None:
    """Reconcile the resource `body` names and write its new status; returns that status, or None
    where the resource is gone. Reconciles of one resource run one after the other, whichever
    handler calls; of different resources, at once.

    Each reads the resource afresh and writes its status before the next starts. The body a
    kopf handler is given may predate a status the reconcile before it wrote (a timer's body is
    from the last watch event; kopf would patch a returned status only after the handler
    returned), and a status computed from an older one undoes the steps recorded since: a
    canary's figures and its Promoting step, say."""
    meta = body["metadata"]
    task = asyncio.current_task()
    ctx._running.add(task)
    try:
        async with ctx.turns(meta.get("uid") or f"{meta['namespace']}/{meta['name']}"):
            current = await ctx.kube.get(s.API_VERSION, s.KIND, meta["namespace"], meta["name"])
            if current is None or current["metadata"].get("uid") != meta.get("uid", current["metadata"].get("uid")):
                return None  # deleted, or deleted and made again (its own events reconcile that one)
            started, outcome = time.monotonic(), "error"
            try:
                new = await _reconcile(ctx, current, logger, trigger)
                outcome = new.get("phase", "unknown")
            finally:
                metrics.RECONCILES.labels(trigger, outcome).inc()
                metrics.RECONCILE_SECONDS.labels(trigger).observe(time.monotonic() - started)
            # A child's repair writes no status: its transitions come with the next reconcile.
            if trigger != "child":
                if new != current.get("status"):
                    await ctx.kube.patch_status(s.API_VERSION, s.KIND, meta["namespace"], meta["name"],
                                                status.merge_patch(current.get("status"), new))
                metrics.record_status(meta["namespace"], meta["name"], new)
            return new
    finally:
        ctx._running.discard(task)


async def _reconcile(ctx: Context, body: dict[str, Any], logger: logging.Logger | Any,
                     trigger: str) -> dict[str, Any]:
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    previous = dict(body.get("status") or {})
    try:
        spec = ModelServingSpec.model_validate(body.get("spec") or {})
    except ValidationError as e:
        new = invalid_spec_status(body, e)
        if previous.get("phase") != "Failed":
            kopf.warn(body, reason="InvalidSpec", message=new["conditions"][0]["message"][:1000])
        return new
    # Before anything is applied: a refused image creates and updates nothing (a running driver
    # keeps the configuration it has).
    verdict = images.decide(spec, ctx.config.runtime_image, ctx.config.allowed_images)
    if verdict.image is None:
        new = refused_status(body, verdict.reason, verdict.message)
        degraded = next((c for c in previous.get("conditions", []) if c.get("type") == "Degraded"), {})
        if degraded.get("reason") != verdict.reason or degraded.get("message") != verdict.message:
            kopf.warn(body, reason=verdict.reason, message=verdict.message[:1000])
        return new
    body = images.with_image(body, verdict.image)
    spec = ModelServingSpec.model_validate(body["spec"])

    observed = status.Observed(generation=meta.get("generation", 0), spec=spec,
                               controls=previous.get("controls"))
    run = not spec.suspend
    props: dict[str, str] | None = None
    if run and (ctx.config.manage_topics or spec.model):
        try:
            props = await observer.kafka_client_properties(ctx.kube, namespace, spec)
        except LookupError as e:
            observed.topics_error = str(e)
    partitions: int | None = None
    if ctx.config.manage_topics and run and props is not None:
        report = await ctx.topics.check(spec, props)
        observed.data_topic_exists, observed.topics_error = report.data_topic_exists, report.error
        partitions = report.data_partitions
        if report.created:
            kopf.info(body, reason="TopicsCreated", message=", ".join(report.created))
        # No driver until the data topic exists: it would only crash-loop.
        run = report.data_topic_exists is not False

    names = desired.Names(name, namespace)
    observed.driver = await observer.driver_state(ctx.kube, names)
    if observed.driver.exists or ctx.config.endpoint_template:
        observed.job = await observer.job_report(observer.endpoint_of(names, ctx.config.endpoint_template))

    # A changed job configuration that did not become ready in time: run the last stable spec.
    verdict = upgrade.assess(name, namespace, spec, body.get("spec") or {}, observed.generation, previous,
                             observed.driver.config_hash, observed.driver.ready and observed.job.ready,
                             time.time(), status._now())
    observed.last_stable, observed.upgrade = verdict.last_stable, verdict.upgrade
    if verdict.event and trigger != "child":
        (kopf.warn if verdict.event[0] == "UpgradeRolledBack" else kopf.info)(
            body, reason=verdict.event[0], message=verdict.event[1][:1000])
    seen = desired.Observations(data_topic_missing=observed.data_topic_exists is False, stable_spec=verdict.run_spec)
    try:
        # Before the driver that mounts it; made once, never rendered (it is random).
        if await control.ensure_secret(ctx.kube, meta):
            logger.info("created Secret %s/%s (the job's control token)", namespace, names.control_secret)
        for obj in desired.desired_state(body, seen, desired.Settings.of(ctx.config)):
            result = await ctx.kube.apply(obj)
            if result == "created":
                logger.info("created %s", observer.summary(obj))
            elif result == "patched" and trigger in ("timer", "child"):
                kopf.warn(body, reason="DriftRepaired", message=f"{observer.summary(obj)} was changed or deleted; restored")
    except (KubeError, NotOwned) as e:
        observed.apply_error = str(e)

    if spec.model and run and props is not None and trigger != "child":
        await _roll_model(ctx, body, spec, props, previous, observed)
    if run and trigger != "child":
        await _scale(ctx, body, spec, names, previous, observed, partitions)
    new = status.compute(name, namespace, observed, previous)
    if trigger != "child":  # a child's repair does not patch status: its transitions come with the next one
        _post_transitions(body, previous, new)
    return new


async def _roll_model(ctx: Context, body: dict[str, Any], spec: ModelServingSpec, props: dict[str, str],
                      previous: dict[str, Any], observed: status.Observed) -> None:
    """Take the rollout's next step (rollout.plan decides it): publish spec.model as the serving
    model or as a candidate, promote or withdraw a candidate."""
    meta = body["metadata"]
    uid = meta.get("uid", f"{meta['namespace']}/{meta['name']}")
    prev_model = previous.get("model") or {}
    observed.published = prev_model.get("published")
    job = observed.job
    # A job that does not answer, or is still restoring, serves what it served last time (a
    # restart restores it): a change then is still a trial, not a first model.
    current = job.serving.get(spec.data_type) or prev_model.get("current")
    history = [dict(e) for e in prev_model.get("history", [])]
    # A control request (the promote/abort/rollback-to annotations) not handled yet comes first.
    asked = rollout.manual(spec, previous, rollout.Requests.of(meta.get("annotations")), status._now())
    step = asked.step or rollout.plan(spec, previous, current, job.candidates.get(spec.data_type),
                                      status.rejection(observed, history), time.time())
    observed.plan = step
    if asked.step is None:
        _handled(body, observed, asked)  # nothing to send: the request (if any) is answered now
    if step.token is None:
        return
    # Sent already by this process (the timer and the update handler reconcile concurrently and
    # both see a status without it): the status is computed as if sent, nothing is sent twice.
    already = step.token == ctx.published.get(uid)
    ctx.published[uid] = step.token
    if not already:
        try:
            if step.publish is not None:
                await asyncio.to_thread(publish.publish, spec.kafka, props, step.publish, step.rollout_id,
                                        meta["namespace"], meta["name"])
            if step.withdraw:
                await asyncio.to_thread(publish.withdraw, spec.kafka, props, spec.data_type, meta["namespace"],
                                        meta["name"])
        except Exception as e:  # PublishError, KafkaException: reported, retried by the next reconcile
            ctx.published.pop(uid, None)
            observed.publish_error = str(e)[:1000]
            observed.plan = None
            return  # a control request stays unhandled: the next reconcile tries it again
    if asked.step is not None:
        observed.pinned_now = asked.pinned
        _handled(body, observed, asked, post=not already)
    d = step.publish
    if d is not None:
        observed.published, observed.published_now = step.rollout_id, True
    if already:
        return
    metrics.ROLLOUT_STEPS.labels(step.verdict or ("candidate" if d is not None and d.candidate else
                                                  "publish" if d is not None else "withdraw")).inc()
    if d is not None:
        role = f" as a {d.candidate.strategy.lower()} candidate" if d.candidate else ""
        kopf.info(body, reason="ModelPublished",
                  message=f"{d.label} published to {spec.kafka.models_topic}{role} (rollout {step.rollout_id})")
    if step.verdict == "promote":
        kopf.info(body, reason="CandidatePromoted", message=f"{spec.model.name} {spec.model.version}: {step.reason}"[:1000])
    elif step.withdraw:
        kopf.warn(body, reason="CandidateRolledBack" if step.verdict else "CandidateWithdrawn",
                  message=f"{spec.data_type} candidate withdrawn: {step.reason}"[:1000])


def _handled(body: dict[str, Any], observed: status.Observed, asked: rollout.Manual, post: bool = True) -> None:
    """Record a control request as handled (status.controls), with its Event."""
    observed.controls = asked.handled or None
    if asked.event and post:
        reason, message, warning = asked.event
        (kopf.warn if warning else kopf.info)(body, reason=reason, message=message[:1000])


async def _scale(ctx: Context, body: dict[str, Any], spec: ModelServingSpec, names: desired.Names,
                 previous: dict[str, Any], observed: status.Observed, partitions: int | None) -> None:
    """Ask the job for the executors scaling.plan decides: live where its cluster manager can,
    else by restarting the driver from its checkpoint (the ConfigMap has the new total)."""
    job = observed.job
    step = scaling.plan(spec, previous, job, partitions, time.time())
    live = job.live_scaling is not False
    message = step.message
    before = previous.get("scaling") or {}
    if step.capped and (not before.get("capped") or before.get("target") != step.target):
        kopf.warn(body, reason="ReplicasCapped", message=step.message[:1000])
    auto_before = (previous.get("autoscaling") or {}).get("replicas")
    if step.autoscaling and step.autoscaling["replicas"] != auto_before and auto_before is not None:
        kopf.info(body, reason="Autoscaled", message=step.autoscaling["reason"][:1000])
    if live and step.ask:
        try:
            answer = await observer.scale_executors(observer.endpoint_of(names, ctx.config.endpoint_template),
                                                    step.target, await control.token(ctx.kube, names))
            message = f"{step.message}; asked live (running then: {answer.running})"
            kopf.info(body, reason="Scaled", message=f"{job.executor_target} -> {step.target} executors, live")
        except Exception as e:  # unreachable, or refused: asked again at the next observation
            message = f"{step.message}; asking the job failed: {e}"[:1000]
    elif not live and job.reachable and job.executor_target != spec.replicas and observed.driver.exists \
            and not observed.driver.terminating:
        # No live changes here (local mode): a graceful restart picks the new total up.
        await ctx.kube.delete("v1", "Pod", names.namespace, names.driver_pod)
        message = f"restarting the driver for {spec.replicas} executor(s): its cluster manager cannot change them live"
        kopf.info(body, reason="RestartedToScale", message=message)
    elif before.get("target") == step.target and before.get("message"):
        message = before["message"]
    observed.scaling = {"target": step.target if live else spec.replicas, "mode": "Live" if live else "Restart",
                        "capped": step.capped, "message": message}
    observed.autoscaling = step.autoscaling


def _post_transitions(body: dict[str, Any], previous: dict[str, Any], new: dict[str, Any]) -> None:
    for t in status.transitions(previous, new):
        (kopf.warn if t.warning else kopf.info)(body, reason=t.reason, message=t.message[:1000])
