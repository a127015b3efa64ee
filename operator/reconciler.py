"""One reconcile: observe, apply the desired objects, take the rollout's and scaling's next steps,
record the status, tell users what changed.

Called by the kopf handlers for create/update/resume (a spec change: the desired objects are
applied), by the timers (they observe and record; they apply only objects an observation changed)
and when a child object is deleted or edited (a repair: the children only, no status). Everything
that decides lives in desired.py, status.py, rollout.py, scaling.py and upgrade.py.
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

from scorestream import naming
from scorestream.operator import clock, conditions, control, desired, images, kafkabound, metrics, models_route, \
    observer, publish, rollout, scaling, status, strimzi, upgrade
from scorestream.operator.kube import Conflict, Kube, KubeError, NotOwned
from scorestream.operator import spec as s
from scorestream.operator.settings import OperatorConfig
from scorestream.operator.spec import ModelServingSpec


Body = dict[str, Any]  # a Kubernetes object as the API server returns it


@dataclass(frozen=True)
class Child:
    """A child object's event: the object, and whether it was deleted."""

    body: Body
    deleted: bool


@dataclass
class Context:
    """What every reconcile shares: the API client and the operator's configuration."""

    kube: Kube
    config: OperatorConfig
    topics: observer.TopicsChecks = field(init=False)
    # uid -> the rollout id published (or being published) by this process: where the status
    # saying it was sent could not be written, the next reconcile must not send it twice.
    published: dict[str, str] = field(default_factory=dict, init=False)
    # uid -> the digest of the desired objects this process last applied in full.
    applied: dict[str, str] = field(default_factory=dict, init=False)
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

    def forget(self, uid: str) -> None:
        """A resource deleted: what this process remembers of it goes with it."""
        self.published.pop(uid, None)
        self.applied.pop(uid, None)

    async def close(self, timeout: float = 10.0) -> None:
        """Let reconciles in flight finish (kopf may still run a timer while it cleans up), then
        close the client."""
        running = [t for t in self._running if t is not asyncio.current_task()]
        if running:
            await asyncio.wait(running, timeout=timeout)
        await self.kube.close()


def _uid(meta: Body) -> str:
    """What a resource is known by in this process (its name only where it has no uid: tests)."""
    return meta.get("uid") or f"{meta['namespace']}/{meta['name']}"


# A status write refused because the resource changed since it was read (409): read it again,
# decide again, write again; a resource changing this often is tried again at the next trigger.
MAX_STATUS_WRITES = 4


async def reconcile(ctx: Context, body: Body, logger: logging.Logger | Any, trigger: str,
                    child: Child | None = None) -> status.Status | None:
    """Reconcile the resource `body` names and write its new status; returns that status, or None
    where the resource is gone (or the trigger was a child, whose repair writes no status).
    Reconciles of one resource run one after the other, whichever handler calls; of different
    resources, at once.

    Each reads the resource afresh and writes its status with the resourceVersion it read: the
    body a kopf handler is given may predate a status written since (a timer's body is from the
    last watch event), and so may the whole operator during a leader hand-over. A status
    computed from an older one would undo the steps recorded since (a canary's figures and its
    Promoting step, say); the API server refuses it with 409, and the turn is taken again."""
    meta = body["metadata"]
    uid = _uid(meta)
    task = asyncio.current_task()
    ctx._running.add(task)
    try:
        async with ctx.turns(uid):
            for attempt in range(1, MAX_STATUS_WRITES + 1):
                current = await ctx.kube.get(s.API_VERSION, s.KIND, meta["namespace"], meta["name"])
                if current is None or current["metadata"].get("uid") != meta.get("uid", current["metadata"].get("uid")):
                    return None  # deleted, or deleted and made again (its own events reconcile that one)
                previous = status.parse(current.get("status"))
                new = await _timed(ctx, current, previous, logger, trigger, child)
                if new is None or trigger == "child":
                    return None  # a child's repair: its transitions come with the next reconcile
                try:
                    await _record(ctx, current, previous, new)
                except Conflict:
                    if attempt == MAX_STATUS_WRITES:
                        raise
                    logger.info("status of %s/%s changed since it was read (%s); reading it again",
                                meta["namespace"], meta["name"], trigger)
                    continue
                return new
            return None
    finally:
        ctx._running.discard(task)


async def _timed(ctx: Context, current: Body, previous: status.Status, logger: logging.Logger | Any,
                 trigger: str, child: Child | None) -> status.Status | None:
    started, outcome = time.monotonic(), "error"
    try:
        new = await _reconcile(ctx, current, previous, logger, trigger, child)
        outcome = new.phase if new is not None else "repaired"
        return new
    finally:
        metrics.RECONCILES.labels(trigger, outcome).inc()
        metrics.RECONCILE_SECONDS.labels(trigger).observe(time.monotonic() - started)


async def _record(ctx: Context, current: Body, previous: status.Status, new: status.Status) -> None:
    """Write the status (where it changed) as of the resourceVersion read, then tell users what
    changed: only a status written is announced."""
    meta = current["metadata"]
    written = status.wire(new)
    if new != previous:
        await ctx.kube.patch_status(s.API_VERSION, s.KIND, meta["namespace"], meta["name"],
                                    status.merge_patch(current.get("status"), written),
                                    resource_version=meta.get("resourceVersion"))
    metrics.record_status(meta["namespace"], meta["name"], written)
    for t in status.transitions(previous.conditions, new.conditions):
        if t.reason in conditions.REFUSALS:
            continue  # _refused announced it
        (kopf.warn if t.warning else kopf.info)(current, reason=t.reason, message=t.message[:1000])


def _admit(ctx: Context, body: Body, previous: status.Status) -> tuple[Body, ModelServingSpec] | status.Refusal:
    """The resource as the operator runs it (its runtime image filled in), or why it will not run
    it: an invalid spec, or an image refused before anything is applied (a running driver keeps the
    configuration it has)."""
    generation = body["metadata"].get("generation", 0)
    try:
        spec = ModelServingSpec.model_validate(body.get("spec") or {})
    except ValidationError as e:
        return status.invalid_spec(generation, e)
    verdict = images.decide(spec, ctx.config.runtime_image, ctx.config.allowed_images)
    if verdict.image is None:
        return status.Refusal(generation, verdict.reason, verdict.message)
    body = images.with_image(body, verdict.image)
    return body, ModelServingSpec.model_validate(body["spec"])


def _refused(body: Body, previous: status.Status, refusal: status.Refusal) -> None:
    """Its Warning, once: when the reason or message is new."""
    said = conditions.find(previous.conditions, "Degraded")
    if said is None or said.reason != refusal.reason or said.message != refusal.message:
        kopf.warn(body, reason=refusal.reason, message=refusal.message[:1000])


async def _reconcile(ctx: Context, body: Body, previous: status.Status, logger: logging.Logger | Any,
                     trigger: str, child: Child | None = None) -> status.Status | None:
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    admitted = _admit(ctx, body, previous)
    if isinstance(admitted, status.Refusal):
        if trigger != "child":
            _refused(body, previous, admitted)
            return status.compute(name, namespace, admitted, previous)
        return None  # refused: its children are left as they are
    body, spec = admitted
    if trigger == "child":
        if not meta.get("deletionTimestamp"):  # else garbage collection takes the children
            await _repair(ctx, body, child, logger)
        return None
    observed = status.Observed(generation=meta.get("generation", 0), spec=spec, controls=previous.controls)
    # All of this reconcile's Kafka calls together: an unreachable broker costs it this much at most.
    kafka = kafkabound.Deadline(ctx.config.kafka_timeout)
    models, partitions, run = await _observe(ctx, body, spec, observed, kafka)
    # A changed job configuration that did not become ready in time: run the last stable spec.
    verdict = upgrade.assess(name, namespace, spec, body.get("spec") or {}, observed.generation, previous,
                             observed.driver.config_hash, observed.driver.ready and observed.job.ready,
                             time.time(), clock.now_text())
    observed.last_stable, observed.upgrade = verdict.last_stable, verdict.upgrade
    if verdict.event:
        (kopf.warn if verdict.event[0] == "UpgradeRolledBack" else kopf.info)(
            body, reason=verdict.event[0], message=verdict.event[1][:1000])
    seen = desired.Observations(data_topic_missing=observed.data_topic_exists is False, stable_spec=verdict.run_spec,
                                kafka_waiting=status.holds_driver(observed))
    try:
        await _apply(ctx, body, desired.desired_state(body, seen, desired.Settings.of(ctx.config)), logger, trigger)
    except (KubeError, NotOwned) as e:
        observed.apply_error = str(e)
    if spec.model and run and models is not None:
        await _roll_model(ctx, body, spec, models, previous, observed, kafka)
    if run:
        await _scale(ctx, body, spec, naming.Names(name, namespace), previous, observed, partitions)
    return status.compute(name, namespace, observed, previous)


async def _observe(ctx: Context, body: Body, spec: ModelServingSpec, observed: status.Observed,
                   kafka: kafkabound.Deadline) -> tuple[models_route.Route | None, int | None, bool]:
    """The topics, the driver pod and the job, into `observed`; returns where and as whom model
    messages are published (None: the Kafka settings are unusable), the data topic's partitions,
    and whether the job should run."""
    meta = body["metadata"]
    run = not spec.suspend
    props: dict[str, str] | None = None
    models: models_route.Route | None = None
    if run and (ctx.config.manage_topics or spec.model or strimzi.secrets_named(spec.kafka)):
        try:
            props = await observer.kafka_client_properties(ctx.kube, meta["namespace"], spec)
            models = models_route.route(spec.kafka, meta["namespace"], models_route.Assignment.of(ctx.config), props,
                                        ctx.config.models_kafka)
        except strimzi.CredentialsError as e:
            observed.credentials_error = str(e)
        except LookupError as e:
            observed.topics_error = str(e)
    partitions: int | None = None
    if ctx.config.manage_topics and run and props is not None and models is not None:
        report = await ctx.topics.check(spec, props, models, kafka)
        observed.data_topic_exists, observed.topics_error = report.data_topic_exists, report.error
        observed.kafka_unreachable = report.unreachable
        partitions = report.data_partitions
        if report.created:
            kopf.info(body, reason="TopicsCreated", message=", ".join(report.created))
        # No driver until the data topic exists: it would only crash-loop.
        run = report.data_topic_exists is not False
        if spec.kafka.strimzi_topics and report.data_topic_exists:
            observed.topics_waiting, failing = await _strimzi_topics(ctx, body, spec, report.data_partitions or 1,
                                                                     models.topic)
            observed.topics_error = observed.topics_error or failing
            run = run and observed.topics_waiting is None
    names = naming.Names(meta["name"], meta["namespace"])
    observed.driver = await observer.driver_state(ctx.kube, names)
    if observed.driver.exists or ctx.config.endpoint_template:
        observed.job = await observer.job_report(observer.endpoint_of(names, ctx.config.endpoint_template))
    return models, partitions, run


async def _strimzi_topics(ctx: Context, body: Body, spec: ModelServingSpec, partitions: int,
                          models_topic: str) -> tuple[str | None, str | None]:
    """Make the KafkaTopics (spec.kafka.strimziTopics) and read them back: (why the driver waits
    for them, what is wrong with them meanwhile: strimzi.waiting_for). The ModelServing's own are
    applied; a shared models topic's is made once."""
    meta = body["metadata"]
    current: dict[str, Any] = {}
    try:
        for obj, owned in strimzi.kafka_topics(spec.kafka, meta["namespace"], desired.owner_reference(meta),
                                               partitions, naming.labels(meta["name"], "topic"), models_topic):
            if owned:
                await ctx.kube.apply(obj)
            else:
                await ctx.kube.create(obj)
            name = obj["metadata"]["name"]
            current[name] = await ctx.kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], name)
    except (KubeError, NotOwned) as e:
        return f"cannot make the KafkaTopics: {e}", None
    return strimzi.waiting_for(current)


async def _apply(ctx: Context, body: Body, objects: list[Body], logger: logging.Logger | Any, trigger: str) -> None:
    """Apply the desired objects: on a change of the spec (create, update, resume), and on a
    timer only where they differ from what this process applied last (an observation changed
    them: the data topic came, an upgrade failed). A timer does not apply the same objects again:
    a child changed by someone else is repaired by its own event (`_repair`)."""
    meta = body["metadata"]
    uid = _uid(meta)
    digest = desired.digest(objects)
    if trigger == "timer" and ctx.applied.get(uid) == digest:
        return
    ctx.applied.pop(uid, None)  # until all of them are applied
    # Before the driver that mounts it; made once, never rendered (it is random).
    if await control.ensure_secret(ctx.kube, meta):
        logger.info("created Secret %s/%s (the job's control token)", meta["namespace"],
                    naming.Names(meta["name"], meta["namespace"]).control_secret)
    for obj in objects:
        if await ctx.kube.apply(obj) == "created":
            logger.info("created %s", observer.summary(obj))
    ctx.applied[uid] = digest


async def _repair(ctx: Context, body: Body, child: Child | None, logger: logging.Logger | Any) -> None:
    """A child deleted or edited by someone else: apply the desired objects again if it differs
    from what the last reconcile rendered (its recorded observations: a child's event must not
    undo a reconcile's choices)."""
    if child is None:
        return
    seen = status.recorded(body)
    settings = desired.Settings.of(ctx.config)
    if not desired.drifted(body, child.body, seen, deleted=child.deleted, settings=settings):
        return
    try:
        for obj in desired.desired_state(body, seen, settings):
            result = await ctx.kube.apply(obj)
            if result == "patched":
                kopf.warn(body, reason="DriftRepaired", message=f"{observer.summary(obj)} was changed or deleted; restored")
            elif result == "created":
                logger.info("created %s", observer.summary(obj))
    except (KubeError, NotOwned) as e:  # reported by the next reconcile, which applies them too
        logger.warning("repairing the children of %s/%s failed: %s", body["metadata"]["namespace"],
                       body["metadata"]["name"], e)


async def _roll_model(ctx: Context, body: Body, spec: ModelServingSpec, models: models_route.Route,
                      previous: status.Status, observed: status.Observed, kafka: kafkabound.Deadline) -> None:
    """Take the rollout's next step (rollout.plan decides it): publish spec.model as the serving
    model or as a candidate, promote or withdraw a candidate."""
    meta = body["metadata"]
    uid = _uid(meta)
    before = previous.model
    observed.published = before.published
    job = observed.job
    # A job that does not answer, or is still restoring, serves what it served last time (a
    # restart restores it): a change then is still a trial, not a first model.
    current = job.serving.get(spec.data_type) or \
        (status.Running(name=before.current.name, version=before.current.version) if before.current else None)
    # A control request (the promote/abort/rollback-to annotations) not handled yet comes first.
    asked = rollout.manual(spec, previous, rollout.Requests.of(meta.get("annotations")), clock.now_text())
    step = asked.step or rollout.plan(spec, previous, current, job.candidates.get(spec.data_type),
                                      status.rejection(observed, before.history), time.time())
    observed.plan = step
    if asked.step is None:
        _handled(body, observed, asked)  # nothing to send: the request (if any) is answered now
    if step.token is None:
        return
    # Sent already by this process, and the status saying so was not written (its write was
    # refused with 409, or failed): the status is computed as if sent, nothing is sent twice.
    already = step.token == ctx.published.get(uid)
    ctx.published[uid] = step.token
    if not already:
        try:
            if observed.kafka_unreachable:  # the topic check just now waited for it in vain
                raise kafkabound.KafkaUnreachable(f"not sent: {observed.topics_error}")
            if step.publish is not None:
                await kafkabound.call(kafka, "publishing the model", publish.publish, models, step.publish,
                                      step.rollout_id, meta["namespace"], meta["name"])
            if step.withdraw:
                await kafkabound.call(kafka, "withdrawing the candidate", publish.withdraw, models, spec.data_type,
                                      meta["namespace"], meta["name"])
        except Exception as e:  # PublishError, KafkaException, KafkaUnreachable: reported, retried by the next reconcile
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
                  message=f"{d.label} published to {models.topic}{role} (rollout {step.rollout_id})")
    if step.verdict == "promote":
        kopf.info(body, reason="CandidatePromoted", message=f"{spec.model.name} {spec.model.version}: {step.reason}"[:1000])
    elif step.withdraw:
        kopf.warn(body, reason="CandidateRolledBack" if step.verdict else "CandidateWithdrawn",
                  message=f"{spec.data_type} candidate withdrawn: {step.reason}"[:1000])


def _handled(body: Body, observed: status.Observed, asked: rollout.Manual, post: bool = True) -> None:
    """Record a control request as handled (status.controls), with its Event."""
    observed.controls = asked.handled
    if asked.event and post:
        reason, message, warning = asked.event
        (kopf.warn if warning else kopf.info)(body, reason=reason, message=message[:1000])


async def _scale(ctx: Context, body: Body, spec: ModelServingSpec, names: naming.Names,
                 previous: status.Status, observed: status.Observed, partitions: int | None) -> None:
    """Ask the job for the executors scaling.plan decides: live where its cluster manager can,
    else by restarting the driver from its checkpoint (the ConfigMap has the new total)."""
    job = observed.job
    step = scaling.plan(spec, previous, job, partitions, time.time())
    live = job.live_scaling is not False
    message = step.message
    before = previous.scaling
    if step.capped and (before is None or not before.capped or before.target != step.target):
        kopf.warn(body, reason="ReplicasCapped", message=step.message[:1000])
    auto_before = previous.autoscaling.replicas if previous.autoscaling else None
    if step.autoscaling and step.autoscaling.replicas != auto_before and auto_before is not None:
        kopf.info(body, reason="Autoscaled", message=step.autoscaling.reason[:1000])
    if live and step.ask:
        try:
            answer = await observer.scale_executors(observer.endpoint_of(names, ctx.config.endpoint_template),
                                                    step.target, await control.token(ctx.kube, names))
            message = f"{step.message}; asked live (running then: {answer.running})"
            kopf.info(body, reason="Scaled", message=f"{job.executor_target} -> {step.target} executors, live")
        except LookupError as e:  # the control Secret is gone: the next turn applies everything, it included
            ctx.applied.pop(_uid(body["metadata"]), None)
            message = f"{step.message}; asking the job failed: {e}"[:1000]
        except Exception as e:  # unreachable, or refused: asked again at the next observation
            message = f"{step.message}; asking the job failed: {e}"[:1000]
    elif not live and job.reachable and job.executor_target != spec.replicas and observed.driver.exists \
            and not observed.driver.terminating:
        # No live changes here (local mode): a graceful restart picks the new total up.
        await ctx.kube.delete("v1", "Pod", names.namespace, names.driver_pod)
        message = f"restarting the driver for {spec.replicas} executor(s): its cluster manager cannot change them live"
        kopf.info(body, reason="RestartedToScale", message=message)
    elif before is not None and before.target == step.target and before.message:
        message = before.message
    observed.scaling = s.ScalingStatus(target=step.target if live else spec.replicas, mode="Live" if live else "Restart",
                                       capped=step.capped, message=message)
    observed.autoscaling = step.autoscaling
