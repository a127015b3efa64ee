"""One reconcile of one ModelServing, level-triggered: read it and its world from the watch cache
and the job, decide, change what differs, record the status.

`reconcile(ctx, key)` is all the controller (handlers.py) calls, for whatever woke the key: an
event of the resource, of a child or of its driver pod, or the delay the last reconcile asked for.
It does not know which: it compares what should be with what is. Everything that decides lives in
desired.py, status.py, rollout.py, scaling.py and upgrade.py; this module observes and applies.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
from pydantic import ValidationError

from scorestream import naming
from scorestream.operator import clock, conditions, control, desired, events, images, kafkabound, metrics, \
    models_route, observer, publish, rollout, scaling, status, strimzi, upgrade
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.api.v1alpha1.modelserving import ModelServingSpec
from scorestream.operator.cache import Cache, Key
from scorestream.operator.conditions import Reason
from scorestream.operator.jobwatch import JobWatch
from scorestream.operator.kube import Conflict, Kube, KubeError, NotOwned, contains
from scorestream.operator.settings import OperatorConfig

LOG = logging.getLogger(__name__)
Body = dict[str, Any]  # a Kubernetes object as the API server returns it


@dataclass
class Context:
    """What every reconcile shares: the API client, the watch cache, the Event recorder and the
    operator's configuration."""

    kube: Kube
    config: OperatorConfig
    cache: Cache = field(default_factory=Cache)
    events: events.Recorder = field(init=False)
    topics: observer.TopicsChecks = field(init=False)
    secrets: observer.SecretReads = field(init=False)
    settings: desired.Settings = field(init=False)
    # uid -> the rollout id published (or being published) by this process: where the status
    # saying it was sent could not be written, the next reconcile must not send it twice.
    published: dict[str, str] = field(default_factory=dict, init=False)
    # uid -> (the inputs of desired.desired_state, the objects it rendered from them)
    rendered: dict[str, tuple[str, list[Body]]] = field(default_factory=dict, init=False)
    # The KafkaTopic version the cluster serves (strimzi.kafka_topic_api_version), asked once; asked
    # again where a request for it is refused as not found (Strimzi upgraded under the operator).
    kafka_topic_api: str | None = field(default=None, init=False)
    _jobs: aiohttp.ClientSession | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.topics = observer.TopicsChecks(ttl=self.config.topics_recheck)
        self.secrets = observer.SecretReads(self.kube, ttl=self.config.secrets_recheck)
        self.events = events.Recorder(self.kube)
        self.settings = desired.Settings.of(self.config)

    def forget(self, key: Key, uid: str | None) -> None:
        """A resource deleted: what this process remembers of it goes with it."""
        if uid:
            self.published.pop(uid, None)
            self.rendered.pop(uid, None)
        metrics.forget(key.namespace, key.name)

    def desired(self, body: Body, seen: desired.Observations) -> list[Body]:
        """desired.desired_state, rendered again only where its inputs changed: it is a pure
        function of them, and most reconciles (the job's poll) would render what the last one did."""
        meta = body["metadata"]
        inputs = json.dumps([meta["name"], meta["namespace"], meta.get("uid"), body.get("spec"),
                             dataclasses.asdict(seen)], sort_keys=True)
        held = self.rendered.get(_uid(meta))
        if held is not None and held[0] == inputs:
            return held[1]
        objects = desired.desired_state(body, seen, self.settings)
        self.rendered[_uid(meta)] = (inputs, objects)
        return objects

    @property
    def jobs(self) -> aiohttp.ClientSession:
        """The client of every job's HTTP answers (observer.job_session), made in the running loop."""
        if self._jobs is None:
            self._jobs = observer.job_session()
        return self._jobs

    async def job_report(self, endpoint: str) -> status.JobReport:
        """What the job at `endpoint` answers: asked by a reconcile, and by the controller's poll
        of a settled resource's job (jobwatch.py)."""
        return await observer.job_report(endpoint, session=self.jobs)

    async def close(self) -> None:
        await self.events.close()
        await self.kube.close()
        if self._jobs is not None:
            await self._jobs.close()


def _uid(meta: Body) -> str:
    """What a resource is known by in this process (its name only where it has no uid: tests)."""
    return meta.get("uid") or f"{meta['namespace']}/{meta['name']}"


def next_look(config: OperatorConfig, spec: Body, new: status.Status, driver_ready: bool = True,
              now: float | None = None) -> float:
    """Seconds until the resource is looked at again with nothing having changed: the job's poll
    (HTTP to the driver, not the API server). While a rollout waits for the job's confirmation,
    it is looked at more often, so the time to ModelReady is bounded by this poll; a shadow, which
    may run for days, at the observer's pace. Not while the driver is on its way: only a running
    driver can confirm, and its pod's events wake the resource when it is up.

    While the driver pod is not ready (`driver_ready`: as the watch cache holds it now) and the
    resource waits for it, nothing is polled: the pod's events wake the resource (made, ready,
    restarted; its readiness is the job's /readyz), and time only ends an upgrade (upgradeTimeout)
    or renews the status (the resync). A thousand resources made at once were otherwise each
    reconciled every observeInterval while their pods were being made, ahead of the pods that
    had become ready."""
    ready = conditions.find(new.conditions, "Ready")
    if ready is not None and ready.status != "True" and ready.reason in WAITING_FOR_THE_DRIVER and not driver_ready:
        left = upgrade.time_left(spec.get("upgradeTimeout") or DEFAULT_UPGRADE_TIMEOUT, new.upgrade,
                                 time.time() if now is None else now)
        return max(config.observe_interval, min(resync(config), math.inf if left is None else left))
    if ready is not None and ready.reason in DRIVER_ON_ITS_WAY:
        return config.observe_interval
    if _model_awaited(spec, new, MODEL_CONFIRMING):
        return config.rollout_poll
    return config.observe_interval


# Ready's reasons while the driver pod is missing or not ready yet (status._job_health).
DRIVER_ON_ITS_WAY = frozenset({Reason.DRIVER_CREATING, Reason.DRIVER_STARTING})
# ... or while its job answers that it is not ready yet.
WAITING_FOR_THE_DRIVER = DRIVER_ON_ITS_WAY | {Reason.JOB_NOT_READY}
DEFAULT_UPGRADE_TIMEOUT = s.ModelServingSpec.model_fields["upgrade_timeout"].default
# ModelReady's reasons while the job is to confirm a model published (looked at every rolloutPoll) ...
MODEL_CONFIRMING = frozenset({Reason.ROLLING_OUT, Reason.CANARY_ANALYSIS})
# ... or while a model is on its way or on trial: time moves them on.
MODEL_IN_FLIGHT = MODEL_CONFIRMING | {Reason.SHADOW_ANALYSIS}


def _model_awaited(spec: Body, new: status.Status, reasons: frozenset[Reason]) -> bool:
    """Whether ModelReady's reason is one of `reasons`, or no model is served yet of the spec's."""
    model = conditions.find(new.conditions, "ModelReady")
    reason = model.reason if model is not None else None
    return reason in reasons or (reason == Reason.NO_MODEL and bool(spec.get("model")))


def settled(spec: Body, new: status.Status) -> bool:
    """Nothing in flight that time alone moves on: Ready, neither progressing nor degraded, no model
    on its way or on trial, no autoscaler (its cool-downs are time). Such a resource is woken by a
    change only (a watch event, its job answering otherwise: jobwatch.py) or the resync."""
    def holds(ctype: s.ConditionType) -> bool:
        found = conditions.find(new.conditions, ctype)
        return found is not None and found.status == "True"

    return holds("Ready") and not holds("Progressing") and not holds("Degraded") \
        and not _model_awaited(spec, new, MODEL_IN_FLIGHT) and not spec.get("autoscaling")


def resync(config: OperatorConfig) -> float:
    """Seconds between reconciles of a settled resource (controller-runtime's SyncPeriod): what no
    watch and no job answer shows (its topics, once topicsRecheck has passed) is looked at again,
    and its status series are renewed before metrics.STALE_AFTER takes them for a deleted
    resource's."""
    return max(config.observe_interval, metrics.STALE_AFTER / 2)


@dataclass(frozen=True)
class Next:
    """When a resource is looked at again with nothing having changed; for a settled one, the job
    the controller polls meanwhile (jobwatch.py)."""

    after: float
    job: JobWatch | None = None


# Events are taken together for this long after the first: a burst of edits (a Helm upgrade, an
# Argo CD sync, a script patching in a loop) and the child events of one change make one reconcile,
# and a burst of up to twice this long at most two.
DEBOUNCE = 0.5


async def reconcile(ctx: Context, key: Key) -> Next | None:
    """Reconcile the resource `key` names as the cache holds it and write its new status with the
    resourceVersion read; returns when it should be looked at again, or None where it is gone.

    A status write refused because the resource changed since (409) is not retried here: the
    newer version is read into the cache and the key looked at again after the debounce, as the
    edit's own event would have it, so that the rest of a burst comes along. A status computed from
    an older one would undo the steps recorded since (a canary's figures and its Promoting step,
    say)."""
    body = ctx.cache.resource(key)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None  # the garbage collector takes the children
    uid = body["metadata"].get("uid")
    try:
        previous = status.parse(body.get("status"))
        new, job = await _timed(ctx, body, previous)
        try:
            await _record(ctx, body, previous, new)
        except Conflict:
            LOG.info("status of %s changed since it was read; reading it again", key)
            fresh = await ctx.kube.get(s.API_VERSION, s.KIND, key.namespace, key.name)
            if fresh is not None and _held(ctx, key, uid):
                ctx.cache.put(fresh)
            return Next(DEBOUNCE)
        if not _held(ctx, key, uid):
            return None
        spec = body.get("spec") or {}
        if job is not None and settled(spec, new):
            return Next(resync(ctx.config), job)
        names = naming.Names(key.name, key.namespace)
        driver = observer.driver_state(ctx.cache.get("v1", "Pod", names.namespace, names.driver_pod))
        return Next(next_look(ctx.config, spec, new, driver_ready=driver.ready))
    finally:
        if not _held(ctx, key, uid):
            # Deleted while this turn awaited the API server: its DELETED event forgot the resource
            # before this turn remembered it again (its status series, its rendered objects).
            ctx.forget(key, uid)


def _held(ctx: Context, key: Key, uid: str | None) -> bool:
    """Whether the cache still holds this resource: the same object, not one made since of its name."""
    body = ctx.cache.resource(key)
    return body is not None and body["metadata"].get("uid") == uid


async def _timed(ctx: Context, body: Body, previous: status.Status) -> tuple[status.Status, JobWatch | None]:
    started, outcome = time.monotonic(), "error"
    try:
        new, job = await _reconcile(ctx, body, previous)
        outcome = new.phase
        return new, job
    finally:
        metrics.RECONCILES.labels("queue", outcome).inc()
        metrics.RECONCILE_SECONDS.labels("queue").observe(time.monotonic() - started)


async def _record(ctx: Context, body: Body, previous: status.Status, new: status.Status) -> None:
    """Write the status (where it changed) as of the resourceVersion read, then tell users what
    changed: only a status written is announced."""
    meta = body["metadata"]
    written = status.wire(new)
    if new != previous:
        answer = await ctx.kube.patch_status(s.API_VERSION, s.KIND, meta["namespace"], meta["name"],
                                             status.merge_patch(body.get("status"), written),
                                             resource_version=meta.get("resourceVersion"))
        if answer is not None and _held(ctx, Key(meta["namespace"], meta["name"]), meta.get("uid")):
            ctx.cache.put(answer)  # not where the resource's DELETED event came meanwhile
    metrics.record_status(meta["namespace"], meta["name"], written)
    for t in status.transitions(previous.conditions, new.conditions):
        if t.reason in conditions.REFUSALS:
            continue  # _refused announced it
        (ctx.events.warn if t.warning else ctx.events.info)(body, t.reason, t.message)


def _admit(ctx: Context, body: Body, previous: status.Status) -> tuple[Body, ModelServingSpec] | status.Refusal:
    """The resource as the operator runs it (its runtime image filled in), or why it will not run
    it: an invalid spec, or an image refused before anything is applied (a running driver keeps the
    configuration it has)."""
    generation = body["metadata"].get("generation", 0)
    try:
        spec = ModelServingSpec.model_validate(body.get("spec") or {})
    except ValidationError as e:
        return status.invalid_spec(generation, e)
    models_topics = models_route.Assignment.of(ctx.config).refusal(spec.kafka)
    if models_topics is not None:
        return status.Refusal(generation, Reason.INVALID_SPEC, models_topics)
    verdict = images.decide(spec, ctx.config.runtime_image, ctx.config.allowed_images)
    if verdict.image is None:
        return status.Refusal(generation, verdict.reason, verdict.message)
    body = images.with_image(body, verdict.image)
    return body, ModelServingSpec.model_validate(body["spec"])


def _refused(ctx: Context, body: Body, previous: status.Status, refusal: status.Refusal) -> None:
    """Its Warning, once: when the reason or message is new."""
    said = conditions.find(previous.conditions, "Degraded")
    if said is None or said.reason != refusal.reason or said.message != refusal.message:
        ctx.events.warn(body, refusal.reason, refusal.message)


async def _reconcile(ctx: Context, body: Body, previous: status.Status
                     ) -> tuple[status.Status, JobWatch | None]:
    """The new status, and the job as this turn read it (None: not read)."""
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    admitted = _admit(ctx, body, previous)
    if not isinstance(admitted, status.Refusal):
        # A tenant's samples parsed off the event loop, once per content; one that does not parse
        # makes the spec invalid.
        bad_sample = await publish.prepare(admitted[1])
        if bad_sample is not None:
            admitted = status.Refusal(meta.get("generation", 0), Reason.INVALID_SPEC, bad_sample)
    if isinstance(admitted, status.Refusal):
        _refused(ctx, body, previous, admitted)
        return status.compute(name, namespace, admitted, previous), None  # its children are left as they are
    body, spec = admitted
    # All of this reconcile's Kafka calls together: an unreachable broker costs it this much at most.
    kafka = kafkabound.Deadline(ctx.config.kafka_timeout)
    seen, models, partitions, run, job = await _observe(ctx, body, spec, kafka)
    # A changed job configuration that did not become ready in time: run the last stable spec.
    verdict = upgrade.assess(upgrade.Submitted(name, namespace, spec, body.get("spec") or {}, seen.generation),
                             previous, upgrade.Running(seen.driver.config_hash, seen.driver.ready and seen.job.ready),
                             time.time())
    done = status.Outcome(last_stable=verdict.last_stable, upgrade=verdict.upgrade, controls=previous.controls)
    if verdict.event:
        (ctx.events.warn if verdict.event[0] == "UpgradeRolledBack" else ctx.events.info)(body, *verdict.event)
    rendered_for = desired.Observations(data_topic_missing=seen.data_topic_exists is False,
                                        stable_spec=verdict.run_spec, kafka_waiting=status.holds_driver(seen))
    try:
        await _apply(ctx, body, ctx.desired(body, rendered_for))
    except (KubeError, NotOwned) as e:
        done = replace(done, apply_error=str(e))
    if spec.model and run and models is not None:
        done = await _roll_model(ctx, body, spec, models, previous, seen, done, kafka)
    if run:
        done = await _scale(ctx, body, spec, naming.Names(name, namespace), previous, seen, done, partitions)
    return status.compute(name, namespace, status.Observed.of(seen, done), previous), job


async def _observe(ctx: Context, body: Body, spec: ModelServingSpec, kafka: kafkabound.Deadline
                   ) -> tuple[status.Observation, models_route.Route | None, int | None, bool, JobWatch | None]:
    """The topics, the driver pod and the job; with where and as whom model messages are published
    (None: the Kafka settings are unusable), the data topic's partitions, whether the job should
    run, and where the job was asked (None: it was not)."""
    meta = body["metadata"]
    run = not spec.suspend
    topics: dict[str, Any] = {}  # the Observation's Kafka fields, as far as they were read
    props: dict[str, str] | None = None
    models: models_route.Route | None = None
    if run and (ctx.config.manage_topics or spec.model or strimzi.secrets_named(spec.kafka)):
        try:
            props = await observer.kafka_client_properties(ctx.secrets, meta["namespace"], spec)
            models = models_route.route(spec.kafka, meta["namespace"], models_route.Assignment.of(ctx.config), props,
                                        ctx.config.models_kafka)
        except strimzi.CredentialsError as e:
            topics["credentials_error"] = str(e)
        except LookupError as e:
            topics["topics_error"] = str(e)
        if props is None:  # a Secret or key missing or unusable: read again at the next look, not in secretsRecheck
            ctx.secrets.forget(meta["namespace"])
    partitions: int | None = None
    if ctx.config.manage_topics and run and props is not None and models is not None:
        report = await ctx.topics.check(spec, props, models, kafka)
        topics.update(data_topic_exists=report.data_topic_exists, topics_error=report.error,
                      kafka_unreachable=report.unreachable)
        if report.error:  # perhaps a credential rotated since its Secret was read
            ctx.secrets.forget(meta["namespace"])
        partitions = report.data_partitions
        if report.created:
            ctx.events.info(body, "TopicsCreated", ", ".join(report.created))
        # No driver until the data topic exists: it would only crash-loop.
        run = report.data_topic_exists is not False
        if spec.kafka.strimzi_topics and report.data_topic_exists:
            waiting, failing = await _strimzi_topics(ctx, body, spec, report.data_partitions or 1, models.topic)
            topics.update(topics_waiting=waiting, topics_error=report.error or failing)
            run = run and waiting is None
    names = naming.Names(meta["name"], meta["namespace"])
    driver = observer.driver_state(ctx.cache.get("v1", "Pod", names.namespace, names.driver_pod))
    asked: JobWatch | None = None
    job = status.JobReport()
    if driver.exists or ctx.config.endpoint_template:
        endpoint = observer.endpoint_of(names, ctx.config.endpoint_template)
        job = await ctx.job_report(endpoint)
        asked = JobWatch(endpoint, job)
    seen = status.Observation(generation=meta.get("generation", 0), spec=spec, driver=driver, job=job, **topics)
    return seen, models, partitions, run, asked


async def _strimzi_topics(ctx: Context, body: Body, spec: ModelServingSpec, partitions: int,
                          models_topic: str) -> tuple[str | None, str | None]:
    """Make the KafkaTopics (spec.kafka.strimziTopics) and read them back: (why the driver waits
    for them, what is wrong with them meanwhile: strimzi.waiting_for). The ModelServing's own are
    applied; a shared models topic's is made once."""
    meta = body["metadata"]
    current: dict[str, Any] = {}
    try:
        api_version = await _kafka_topic_api(ctx)
        for obj, owned in strimzi.kafka_topics(spec.kafka, meta["namespace"], desired.owner_reference(meta),
                                               partitions, naming.labels(meta["name"], "topic"), models_topic,
                                               api_version):
            if owned:
                await ctx.kube.apply(obj)
            else:
                await ctx.kube.create(obj)
            name = obj["metadata"]["name"]
            current[name] = await ctx.kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], name)
    except (KubeError, NotOwned) as e:
        if isinstance(e, KubeError) and e.status == 404:
            ctx.kafka_topic_api = None
        return f"cannot make the KafkaTopics: {e}", None
    return strimzi.waiting_for(current)


async def _kafka_topic_api(ctx: Context) -> str:
    """The KafkaTopic version to make them in: asked of the cluster once, kept only once it named
    Strimzi's group (a Strimzi installed after the operator is found at the next turn)."""
    if ctx.kafka_topic_api is None:
        served = await ctx.kube.served_versions(strimzi.KAFKA_TOPIC_GROUP)
        if not served:
            return strimzi.kafka_topic_api_version(served)
        ctx.kafka_topic_api = strimzi.kafka_topic_api_version(served)
    return ctx.kafka_topic_api


def _current(cache: Cache, wanted: Body) -> bool:
    """Whether the watch cache holds `wanted` as desired: every field the operator renders has the
    value it renders (the server's defaults and others' fields aside)."""
    meta = wanted["metadata"]
    held = cache.get(wanted["apiVersion"], wanted["kind"], meta["namespace"], meta["name"])
    return held is not None and contains(held, wanted)


async def _apply(ctx: Context, body: Body, objects: list[Body]) -> None:
    """Apply the desired objects that differ from what the cache holds: made, changed by someone
    else, deleted, or rendered differently since (a spec change, an observation such as the data
    topic appearing). An object the cache holds as desired costs no request."""
    stale = [obj for obj in objects if not _current(ctx.cache, obj)]
    if not stale:
        return
    # Each group's requests at once, the groups in turn: a create's eight requests cost two round
    # trips, not eight (on a busy API server, the difference between seconds and tenths of one).
    # The control Secret (made once, never rendered: it is random) and the objects the driver's pods
    # need are there before its StatefulSet; a RoleBinding only after its Role (the API server checks
    # a binding against the rules of the Role it names).
    first = [obj for obj in stale if obj["kind"] not in LAST]
    await _together([_ensure_secret(ctx, body), *(_apply_one(ctx, body, obj) for obj in first)])
    await _together([_apply_one(ctx, body, obj) for obj in stale if obj["kind"] in LAST])


# Applied once the rest are: what the driver pod mounts and runs as exists when its StatefulSet does.
LAST = frozenset({"StatefulSet", "RoleBinding"})


async def _together(calls: list) -> None:
    """Await all of `calls` at once; the first failure is raised once every call has ended (the
    others' writes are in the cache: the next turn does not repeat them)."""
    failures = [r for r in await asyncio.gather(*calls, return_exceptions=True) if isinstance(r, BaseException)]
    if failures:
        raise failures[0]


async def _ensure_secret(ctx: Context, body: Body) -> None:
    meta = body["metadata"]
    if await control.ensure_secret(ctx.kube, meta):
        LOG.info("created Secret %s/%s (the job's control token)", meta["namespace"],
                 naming.Names(meta["name"], meta["namespace"]).control_secret)


async def _apply_one(ctx: Context, body: Body, obj: Body) -> None:
    held = ctx.cache.get(obj["apiVersion"], obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
    fixed = desired.immutable_changes(held, obj) if held is not None else []
    if fixed:
        await _make_anew(ctx, body, held, obj, fixed)
        return
    result, written = await ctx.kube.apply(obj, current=held)
    ctx.cache.put(written)
    if result == "created":
        LOG.info("created %s", observer.summary(obj))
    elif result == "patched" and _drifted(ctx, body, held):
        ctx.events.warn(body, "DriftRepaired", f"{observer.summary(obj)} was changed; restored")


async def _make_anew(ctx: Context, body: Body, held: Body, wanted: Body, fixed: list[str]) -> None:
    """A child whose rendering changed in `fixed`, fields no update may change (a StatefulSet's
    podManagementPolicy, rendered otherwise by an older operator): deleted with its pods and
    volume claims orphaned, so the driver keeps running; its DELETED event brings the next turn,
    which makes it anew, and the new StatefulSet adopts the pod (the same template: not rolled)."""
    if held["metadata"].get("deletionTimestamp"):
        return  # on its way out: the garbage collector is taking its owner references off
    if await ctx.kube.orphan(held, wanted):
        fields = ", ".join(fixed)
        LOG.info("deleting %s to make it anew (%s), its pods left running", observer.summary(held), fields)
        ctx.events.info(body, "ChildRecreated", f"{observer.summary(held)} is made anew for a change of {fields}, "
                                                "which cannot be updated; its pods keep running")


def _drifted(ctx: Context, body: Body, held: Body | None) -> bool:
    """Whether a child was changed by someone else rather than rendered anew: the spec is the one
    the status last recorded, and the child differs from what that status's observations render
    too (a new observation, such as the data topic appearing, is not drift)."""
    if held is None or body["metadata"].get("generation") != (body.get("status") or {}).get("observedGeneration"):
        return False
    return desired.drifted(body, held, status.recorded(body), deleted=False, settings=ctx.settings)


async def _roll_model(ctx: Context, body: Body, spec: ModelServingSpec, models: models_route.Route,
                      previous: status.Status, seen: status.Observation, done: status.Outcome,
                      kafka: kafkabound.Deadline) -> status.Outcome:
    """Take the rollout's next step (rollout.plan decides it): publish spec.model as the serving
    model or as a candidate, promote or withdraw a candidate."""
    meta = body["metadata"]
    uid = _uid(meta)
    before = previous.model
    done = replace(done, published=before.published)
    job = seen.job
    # A job that does not answer, or is still restoring, serves what it served last time (a
    # restart restores it): a change then is still a trial, not a first model.
    current = job.serving.get(spec.data_type) or \
        (status.Running(name=before.current.name, version=before.current.version) if before.current else None)
    # A control request (the promote/abort/rollback-to annotations) not handled yet comes first.
    asked = rollout.manual(spec, previous, rollout.Requests.of(meta.get("annotations")), clock.now_text())
    step = asked.step or rollout.plan(spec, previous, current, job.candidates.get(spec.data_type),
                                      status.rejection(seen, before.history), time.time())
    done = replace(done, plan=step)
    if asked.step is None:
        done = _handled(ctx, body, done, asked)  # nothing to send: the request (if any) is answered now
    if step.token is None:
        return done
    # Sent already by this process, and the status saying so was not written (its write was
    # refused with 409, or failed): the status is computed as if sent, nothing is sent twice.
    already = step.token == ctx.published.get(uid)
    ctx.published[uid] = step.token
    if not already:
        try:
            if seen.kafka_unreachable:  # the topic check just now waited for it in vain
                raise kafkabound.KafkaUnreachable(f"not sent: {seen.topics_error}")
            if step.publish is not None:
                await kafkabound.call(kafka, "publishing the model", publish.publish, models, step.publish,
                                      step.rollout_id, meta["namespace"], meta["name"])
            if step.withdraw:
                await kafkabound.call(kafka, "withdrawing the candidate", publish.withdraw, models, spec.data_type,
                                      meta["namespace"], meta["name"])
        except Exception as e:  # PublishError, KafkaException, KafkaUnreachable: reported, retried by the next reconcile
            ctx.published.pop(uid, None)
            ctx.secrets.forget(meta["namespace"])  # perhaps a credential rotated since its Secret was read
            # A control request stays unhandled: the next reconcile tries it again.
            return replace(done, publish_error=str(e)[:1000], plan=None)
    if asked.step is not None:
        done = _handled(ctx, body, replace(done, pinned_now=asked.pinned), asked, post=not already)
    d = step.publish
    if d is not None:
        done = replace(done, published=step.rollout_id, published_now=True)
    if already:
        return done
    metrics.ROLLOUT_STEPS.labels(step.verdict or ("candidate" if d is not None and d.candidate else
                                                  "publish" if d is not None else "withdraw")).inc()
    if d is not None:
        role = f" as a {d.candidate.strategy.lower()} candidate" if d.candidate else ""
        ctx.events.info(body, "ModelPublished", f"{d.label} published to {models.topic}{role} (rollout {step.rollout_id})")
    if step.verdict == "promote":
        ctx.events.info(body, "CandidatePromoted", f"{spec.model.name} {spec.model.version}: {step.reason}")
    elif step.withdraw:
        ctx.events.warn(body, "CandidateRolledBack" if step.verdict else "CandidateWithdrawn",
                        f"{spec.data_type} candidate withdrawn: {step.reason}")
    return done


def _handled(ctx: Context, body: Body, done: status.Outcome, asked: rollout.Manual,
             post: bool = True) -> status.Outcome:
    """Record a control request as handled (status.controls), with its Event."""
    if asked.event and post:
        reason, message, warning = asked.event
        (ctx.events.warn if warning else ctx.events.info)(body, reason, message)
    return replace(done, controls=asked.handled)


async def _scale(ctx: Context, body: Body, spec: ModelServingSpec, names: naming.Names,
                 previous: status.Status, seen: status.Observation, done: status.Outcome,
                 partitions: int | None) -> status.Outcome:
    """Ask the job for the executors scaling.plan decides: live where its cluster manager can,
    else by restarting the driver from its checkpoint (the ConfigMap has the new total)."""
    job = seen.job
    step = scaling.plan(spec, previous, job, partitions, time.time())
    live = job.live_scaling is not False
    message = step.message
    before = previous.scaling
    # What status.scaling.target records: a restart starts the job at spec.replicas.
    recorded = step.target if live else spec.replicas
    if step.capped and (before is None or not before.capped or before.target != recorded):
        ctx.events.warn(body, "ReplicasCapped", step.message)
    auto_before = previous.autoscaling.replicas if previous.autoscaling else None
    if step.autoscaling and step.autoscaling.replicas != auto_before and auto_before is not None:
        ctx.events.info(body, "Autoscaled", step.autoscaling.reason)
    if live and step.ask:
        try:
            answer = await observer.scale_executors(observer.endpoint_of(names, ctx.config.endpoint_template),
                                                    step.target, await control.token(ctx.kube, names),
                                                    session=ctx.jobs)
            message = f"{step.message}; asked live (running then: {answer.running})"
            ctx.events.info(body, "Scaled", f"{job.executor_target} -> {step.target} executors, live")
        except LookupError as e:  # the control Secret is gone or unusable: made again where gone
            message = f"{step.message}; asking the job failed: {e}"[:1000]
            try:
                await control.ensure_secret(ctx.kube, body["metadata"])
            except (KubeError, NotOwned) as made:  # one of its name that is not ours: said, not adopted
                message = f"{message}; {made}"[:1000]
        except Exception as e:  # unreachable, or refused: asked again at the next observation
            message = f"{step.message}; asking the job failed: {e}"[:1000]
    elif not live and job.reachable and job.executor_target != spec.replicas and seen.driver.exists \
            and not seen.driver.terminating:
        # No live changes here (local mode): a graceful restart picks the new total up.
        await ctx.kube.delete("v1", "Pod", names.namespace, names.driver_pod)
        message = f"restarting the driver for {spec.replicas} executor(s): its cluster manager cannot change them live"
        ctx.events.info(body, "RestartedToScale", message)
    elif before is not None and before.target == step.target and before.message:
        message = before.message
    return replace(done, scaling=s.ScalingStatus(target=recorded,
                                                 mode="Live" if live else "Restart", capped=step.capped,
                                                 message=message),
                   autoscaling=step.autoscaling)
