"""The controller's ordering rules: keys coalesce, a resource is never reconciled by two workers at
once, a change that comes during a reconcile is not lost, requeues keep the earliest wake-up,
failures back off; and the Events a status change posts.

These are orderings of the work queue and the cache in one process (pure asyncio); the real-server
tests (test_operator, test_status_writes, test_operator_scale) run the same controller against
kube-apiserver."""

from __future__ import annotations

import asyncio

import pytest

from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import controller, reconciler, status
from scorestream.operator.cache import Cache, Key, owner_key
from scorestream.operator.conditions import Reason
from scorestream.operator.settings import OperatorConfig
from scorestream.operator.workqueue import Backoff, Priority, ShutDown, WorkQueue


def resource(name: str, rv: str = "1", generation: int = 1) -> dict:
    return {"apiVersion": s.API_VERSION, "kind": s.KIND,
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "resourceVersion": rv,
                         "generation": generation}, "spec": {}}


async def test_a_burst_of_adds_is_one_key_and_a_key_in_work_goes_to_no_second_worker():
    q: WorkQueue[str] = WorkQueue()
    for _ in range(10):
        q.add("a")
    q.add("b")
    assert len(q) == 2
    first = await q.get()
    q.add(first)  # changed while being reconciled: not handed out now ...
    assert await q.get() == "b" and len(q) == 0
    q.done("b")
    assert len(q) == 0
    q.done(first)  # ... but again once its reconcile is done
    assert len(q) == 1 and await q.get() == "a"


async def test_a_requeue_keeps_the_earliest_wake_up():
    q: WorkQueue[str] = WorkQueue()
    q.add_after("a", 0.2)
    q.add_after("a", 30)  # later: the 0.2 s wake-up stands
    q.add_after("a", 0.05)  # earlier: replaces it
    assert await asyncio.wait_for(q.get(), 1) == "a"
    q.done("a")
    await asyncio.sleep(0.3)
    assert len(q) == 0, "the replaced wake-up did not fire as well"
    q.add_after("a", 0.1)
    q.add("a")
    assert await q.get() == "a"  # handed out before its wake-up: the wake-up is dropped
    q.done("a")
    await asyncio.sleep(0.2)
    assert len(q) == 0


async def test_a_changed_key_goes_before_the_polls_queued_ahead_of_it():
    waited: list[tuple[str, float]] = []
    q: WorkQueue[str] = WorkQueue(on_wait=lambda p, s: waited.append((p.name, s)))
    for name in ("p1", "p2", "p3"):
        q.add(name, Priority.POLL)
    await asyncio.sleep(0.05)
    q.add("changed")
    q.add("p2")  # a change to a key waiting for its poll promotes it, once
    q.add("p1", Priority.POLL)  # a poll of a key waiting for a poll: still one entry
    assert len(q) == 4
    assert [await q.get() for _ in range(4)] == ["changed", "p2", "p1", "p3"]
    # Each key's wait is told as it is taken, at the priority it was taken at, from when it was
    # first queued (a promotion keeps that time).
    assert [p for p, _ in waited] == ["CHANGE", "CHANGE", "POLL", "POLL"]
    assert waited[0][1] < 0.05 <= min(s for _, s in waited[1:])
    assert len(q) == 0
    for name in ("p1", "p2", "p3", "changed"):
        q.done(name)
    # A wake-up keeps the earlier time and the higher priority of the two asked for.
    q.add_after("a", 0.05, Priority.POLL)
    q.add_after("b", 0.05, Priority.POLL)
    q.add_after("b", 30)  # a change due later: the earlier wake-up stands, as a change
    await asyncio.sleep(0.1)
    assert await q.get() == "b" and await q.get() == "a"
    # Changed while being reconciled: queued again at done(), as a change.
    q.add("c", Priority.POLL)
    q.add("b", Priority.POLL)
    q.add("b")
    q.done("b")
    assert await q.get() == "b" and await q.get() == "c"


async def test_failures_back_off_exponentially_and_success_resets():
    q: WorkQueue[str] = WorkQueue(Backoff(first=0.5, cap=4))
    assert [q.retry("a") for _ in range(5)] == [0.5, 1, 2, 4, 4]
    q.forget("a")
    assert q.retry("a") == 0.5
    q.shut_down()


async def test_shut_down_wakes_waiting_workers():
    q: WorkQueue[str] = WorkQueue()
    waiting = asyncio.ensure_future(q.get())
    await asyncio.sleep(0)
    q.shut_down()
    with pytest.raises(ShutDown):
        await asyncio.wait_for(waiting, 1)


def test_the_cache_keeps_the_newer_version_and_says_what_is_news():
    cache = Cache()
    assert cache.put(resource("a", "5"))
    assert not cache.put(resource("a", "5")), "the watch event of the operator's own write"
    assert not cache.put(resource("a", "4")), "an older version does not replace a newer one"
    assert cache.resource(Key("ml", "a"))["metadata"]["resourceVersion"] == "5"
    made_again = resource("a", "2")
    made_again["metadata"]["uid"] = "uid-a2"
    assert cache.put(made_again), "another object of the same name"
    child = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "a-job", "namespace": "ml", "uid": "c", "resourceVersion": "9",
        "ownerReferences": [{"kind": s.KIND, "name": "a", "controller": True, "uid": "uid-a2"}]}}
    assert owner_key(child) == Key("ml", "a")
    cache.put(child)
    cache.delete(child)
    assert cache.get("v1", "ConfigMap", "ml", "a-job") is None


@pytest.fixture
def turns(monkeypatch):
    """reconciler.reconcile replaced by a slow step that records when it ran; returns the
    recording and the controller (2 workers)."""
    record: list[tuple[str, Key]] = []

    async def slow(ctx, key):
        record.append(("start", key))
        await asyncio.sleep(0.05)
        record.append(("end", key))
        return reconciler.Next(60.0)

    monkeypatch.setattr(reconciler, "reconcile", slow)
    ctx = reconciler.Context(kube=None, config=OperatorConfig(allNamespaces=True))  # the stand-in reconcile calls nothing
    made = controller.Controller(ctx, workers=2, debounce=0)
    return record, made


def overlapped(record) -> bool:
    running: dict[Key, int] = {}
    for what, key in record:
        running[key] = running.get(key, 0) + (1 if what == "start" else -1)
        if running[key] > 1:
            return True
    return False


async def test_ten_events_in_a_burst_make_one_reconcile_and_one_resource_is_never_reconciled_twice_at_once(turns):
    record, ctl = turns
    ctl.start()
    for rv in range(1, 11):
        ctl.resource_event("MODIFIED", resource("a", str(rv)))
    ctl.resource_event("MODIFIED", resource("b"))
    await asyncio.sleep(0.02)  # both workers busy, one with each resource
    for rv in range(11, 15):  # changes during a's reconcile: one more reconcile after it
        ctl.resource_event("MODIFIED", resource("a", str(rv)))
    await asyncio.sleep(0.3)
    await ctl.stop()
    starts = [key for what, key in record if what == "start"]
    assert starts.count(Key("ml", "a")) == 2 and starts.count(Key("ml", "b")) == 1
    assert record[:2] == [("start", Key("ml", "a")), ("start", Key("ml", "b"))], "different resources at once"
    assert not overlapped(record)


def leading(debounce: float = 0) -> controller.Controller:
    """A controller that leads, with no worker: what its events queue stays in its queue."""
    ctl = controller.Controller(reconciler.Context(kube=None, config=OperatorConfig(allNamespaces=True)),
                                workers=0, debounce=debounce)
    ctl.start()
    return ctl


async def test_a_childs_event_queues_its_owner_and_the_operators_own_write_queues_nothing():
    ctl = leading()
    child = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {
        "name": "a-driver", "namespace": "ml", "uid": "c", "resourceVersion": "3",
        "ownerReferences": [{"kind": s.KIND, "name": "a", "controller": True, "uid": "uid-a"}]}}
    ctl.ctx.cache.put(child)  # as the operator's apply stored its answer
    ctl.child_event("MODIFIED", child)
    assert len(ctl.queue) == 0
    ctl.child_event("DELETED", child)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b-driver-0", "namespace": "ml", "uid": "p",
                                                          "resourceVersion": "4",
                                                          "labels": {"scorestream.dev/modelserving": "b"}}}
    ctl.child_event("MODIFIED", pod)
    assert {await ctl.queue.get(), await ctl.queue.get()} == {Key("ml", "a"), Key("ml", "b")}


async def test_only_what_a_reconcile_reads_of_a_child_or_driver_pod_queues_its_owner():
    ctl = leading()
    child = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {
        "name": "a-driver", "namespace": "ml", "uid": "c", "resourceVersion": "3",
        "ownerReferences": [{"kind": s.KIND, "name": "a", "controller": True, "uid": "uid-a"}]},
        "spec": {"replicas": 1}, "status": {"replicas": 0}}
    ctl.ctx.cache.put(child)
    ctl.child_event("MODIFIED", {**child, "metadata": {**child["metadata"], "resourceVersion": "4"},
                                 "status": {"replicas": 1, "readyReplicas": 1}})  # its controller's
    assert len(ctl.queue) == 0
    ctl.child_event("MODIFIED", {**child, "metadata": {**child["metadata"], "resourceVersion": "5"},
                                 "spec": {"replicas": 0}})  # someone else's edit: repaired
    assert await ctl.queue.get() == Key("ml", "a")

    def pod(rv: str, **status):
        return {"apiVersion": "v1", "kind": "Pod", "status": status, "metadata": {
            "name": "b-driver-0", "namespace": "ml", "uid": "p", "resourceVersion": rv,
            "labels": {"scorestream.dev/modelserving": "b"}}}

    running = {"containerStatuses": [{"name": "driver", "ready": False, "restartCount": 0, "state": {}}]}
    ctl.ctx.cache.put(pod("6", phase="Pending", **running))
    ctl.child_event("MODIFIED", pod("7", phase="Running", podIP="198.18.0.9", **running))  # the kubelet's
    assert len(ctl.queue) == 0
    ready = {"containerStatuses": [{**running["containerStatuses"][0], "ready": True}]}
    ctl.child_event("MODIFIED", pod("8", phase="Running", **ready))
    assert await ctl.queue.get() == Key("ml", "b")


async def test_a_follower_queues_nothing_and_on_leading_takes_what_changed_first_the_rest_spread():
    ctl = controller.Controller(reconciler.Context(kube=None, config=OperatorConfig(allNamespaces=True,
                                                                                    observeInterval=3)),
                                workers=0, debounce=0)
    handled = {**resource("a"), "status": {"observedGeneration": 1}}
    ctl.resource_event(None, handled)  # the watch's listing: kopf gives it no type
    ctl.resource_event(None, {**resource("b"), "status": {"observedGeneration": 1}})
    ctl.resource_event(None, resource("c", generation=2))  # a change the last leader had not handled
    ctl.resource_event("MODIFIED", {**handled, "metadata": {**handled["metadata"], "resourceVersion": "2",
                                                             "annotations": {"x": "y"}}})  # changed meanwhile
    assert len(ctl.queue) == 0, "a follower reconciles nothing"
    ctl.start()
    first = {await ctl.queue.get(), await ctl.queue.get()}
    assert first == {Key("ml", "a"), Key("ml", "c")}
    waited = asyncio.get_running_loop().time()
    assert await ctl.queue.get() == Key("ml", "b")
    assert 0.5 < asyncio.get_running_loop().time() - waited <= 3.5, "the rest within one observe interval"


async def test_events_within_the_debounce_of_the_first_make_one_turn(monkeypatch):
    ctl = leading(debounce=0.5)  # far longer than the burst, also on a loaded machine
    started = asyncio.get_running_loop().time()
    for rv in range(1, 6):
        ctl.resource_event("MODIFIED", resource("a", str(rv)))
        await asyncio.sleep(0.015)
    assert asyncio.get_running_loop().time() - started < 0.5, "the burst outlasted the debounce"
    assert len(ctl.queue) == 0, "not before the debounce"
    assert await asyncio.wait_for(ctl.queue.get(), 2) == Key("ml", "a")
    ctl.queue.done(Key("ml", "a"))
    await asyncio.sleep(0.6)
    assert len(ctl.queue) == 0, "one turn for the five"


async def test_a_failing_reconcile_is_retried_after_a_back_off(monkeypatch):
    calls = []

    async def failing(ctx, key):
        calls.append(asyncio.get_running_loop().time())
        raise RuntimeError("the API server said no")

    monkeypatch.setattr(reconciler, "reconcile", failing)
    ctl = controller.Controller(reconciler.Context(kube=None, config=OperatorConfig(allNamespaces=True)), workers=1,
                                debounce=0)
    ctl.queue.backoff = Backoff(first=0.1, cap=1)
    ctl.start()
    ctl.resource_event("ADDED", resource("a"))
    await asyncio.sleep(0.45)
    await ctl.stop()
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert len(calls) == 3 and 0.09 < gaps[0] < gaps[1], gaps


def test_the_next_look_is_the_rollout_poll_while_a_rollout_waits_else_the_observe_interval():
    config = OperatorConfig(allNamespaces=True, observeInterval=10, rolloutPoll=1)

    def with_model_ready(reason):
        return s.ModelServingStatus(conditions=[s.Condition(type="ModelReady", status="False", reason=reason,
                                                            lastTransitionTime="2026-01-01T00:00:00Z")])

    assert reconciler.next_look(config, {}, with_model_ready(Reason.CANARY_ANALYSIS)) == 1
    assert reconciler.next_look(config, {"model": {"name": "m"}}, with_model_ready(Reason.NO_MODEL)) == 1
    assert reconciler.next_look(config, {}, with_model_ready(Reason.NO_MODEL)) == 10
    assert reconciler.next_look(config, {}, s.ModelServingStatus()) == 10
    # The driver on its way: its pod's events wake the resource, nothing to poll meanwhile.
    starting = with_model_ready(Reason.NO_MODEL)
    starting.conditions.append(s.Condition(type="Ready", status="False", reason=Reason.DRIVER_STARTING,
                                           lastTransitionTime="2026-01-01T00:00:00Z"))
    assert reconciler.next_look(config, {"model": {"name": "m"}}, starting) == 10
    # ... and while its pod is not ready, the pod's events are what wakes it: the resync, or the
    # end of an upgrade's upgradeTimeout where that comes first.
    assert reconciler.next_look(config, {"model": {"name": "m"}}, starting, driver_ready=False) == 150
    upgrading = starting.model_copy(update={"upgrade": s.UpgradeStatus(
        generation=2, phase="Upgrading", startedAt="2026-01-01T00:00:00Z")})
    t0 = 1767225600.0  # 2026-01-01T00:00:00Z
    assert reconciler.next_look(config, {"upgradeTimeout": "2m"}, upgrading, driver_ready=False, now=t0 + 60) == 60
    assert reconciler.next_look(config, {}, upgrading, driver_ready=False, now=t0 + 590) == 10
    ready = with_model_ready(Reason.SERVING)
    ready.conditions.append(s.Condition(type="Ready", status="True", reason=Reason.SERVING,
                                        lastTransitionTime="2026-01-01T00:00:00Z"))
    assert reconciler.next_look(config, {}, ready, driver_ready=False) == 10


def test_a_ready_resource_with_nothing_in_flight_is_settled_and_resynced_seldom():
    config = OperatorConfig(allNamespaces=True, observeInterval=10, topicsRecheck=60)

    def with_conditions(*conds):
        return s.ModelServingStatus(conditions=[
            s.Condition(type=t, status=v, reason=r, lastTransitionTime="2026-01-01T00:00:00Z") for t, v, r in conds])

    ready = ("Ready", "True", Reason.SERVING)
    serving, calm, healthy = ("ModelReady", "True", Reason.SERVING), ("Progressing", "False", Reason.STABLE), \
        ("Degraded", "False", Reason.HEALTHY)
    model = {"model": {"name": "m"}}
    assert reconciler.settled(model, with_conditions(ready, serving, calm, healthy))
    assert reconciler.settled({}, with_conditions(ready, ("ModelReady", "False", Reason.NO_MODEL), calm, healthy)), \
        "no spec.model: a model from the models topic changes the job's answer"
    for in_flight in [("ModelReady", "False", Reason.NO_MODEL), ("ModelReady", "False", Reason.ROLLING_OUT),
                      ("ModelReady", "False", Reason.CANARY_ANALYSIS), ("ModelReady", "False", Reason.SHADOW_ANALYSIS),
                      ("Progressing", "True", Reason.UPGRADING), ("Degraded", "True", Reason.KAFKA_UNREACHABLE),
                      ("Ready", "False", Reason.JOB_NOT_READY)]:
        conds = {c[0]: c for c in (ready, serving, calm, healthy)} | {in_flight[0]: in_flight}
        assert not reconciler.settled(model, with_conditions(*conds.values())), in_flight
    assert not reconciler.settled({**model, "autoscaling": {"maxReplicas": 4}},
                                  with_conditions(ready, serving, calm, healthy)), "its cool-downs are time"
    assert reconciler.resync(config) == 150, "within half the time its status series are taken for stale"
    assert reconciler.resync(config.model_copy(update={"observe_interval": 600})) == 600


async def test_a_settled_job_is_polled_outside_the_queue_and_its_key_queued_when_it_answers_otherwise():
    from scorestream.operator.jobwatch import JobWatch, JobWatches

    answers = {"a": status.JobReport(reachable=True, ready=True), "b": status.JobReport(reachable=True, ready=True)}
    polled: list[str] = []

    async def poll(endpoint):
        polled.append(endpoint)
        return answers[endpoint]

    changed: list[str] = []
    jobs: JobWatches[str] = JobWatches(poll, changed.append, every=0.05, concurrency=1)
    runner = asyncio.ensure_future(jobs.run())
    for key in ("a", "b"):
        jobs.watch(key, JobWatch(key, answers[key]))
    await asyncio.sleep(0.18)
    assert changed == [] and polled.count("a") >= 2 and polled.count("b") >= 2, polled
    answers["a"] = status.JobReport(reachable=True, ready=False)
    await asyncio.sleep(0.1)
    assert changed == ["a"] and len(jobs) == 1, "queued once, then no longer polled"
    jobs.unwatch("b")  # reconciled: the reconcile asks the job itself
    polled.clear()
    await asyncio.sleep(0.12)
    assert polled == []
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)


async def test_a_field_the_new_status_drops_is_removed():
    assert status.merge_patch({"upgrade": {"phase": "Upgrading"}, "phase": "Running"}, {"phase": "Running"}) \
        == {**{k: None for k in status.STATUS_FIELDS if k != "phase"}, "phase": "Running"}


def test_events_are_posted_for_changed_conditions_warnings_only_for_failures():
    def cond(ctype, st, reason, message=""):
        return s.Condition(type=ctype, status=st, reason=reason, message=message, lastTransitionTime="2026-01-01T00:00:00Z")

    before = [cond("Ready", "False", Reason.DRIVER_STARTING), cond("Progressing", "True", Reason.ROLLING_OUT),
              cond("Degraded", "False", Reason.HEALTHY)]
    settled = [cond("Ready", "True", Reason.SERVING), cond("Progressing", "False", Reason.STABLE),
               cond("Degraded", "False", Reason.HEALTHY)]
    assert status.transitions(before, settled) == [status.Transition(False, "Serving", "Ready=True"),
                                                   status.Transition(False, "Stable", "Progressing=False")]
    failing = [cond("Ready", "False", Reason.DRIVER_FAILING, "CrashLoopBackOff"),
               cond("Progressing", "False", Reason.DRIVER_FAILING, "CrashLoopBackOff"),
               cond("Degraded", "True", Reason.DRIVER_FAILING, "CrashLoopBackOff")]
    assert all(t.warning for t in status.transitions(settled, failing))
    assert status.transitions(failing, failing) == []


async def test_a_reconcile_past_its_budget_is_given_up_and_the_worker_takes_the_next(monkeypatch):
    """One tenant's slow turn (a broker, a job or an API server that hangs) holds one worker for
    reconcileTimeout at most, and the resource says so in a Warning Event."""
    done = []

    async def hangs_for_a(ctx, key):
        if key.name == "a":
            await asyncio.sleep(3600)
        done.append(key)
        return reconciler.Next(60.0)

    monkeypatch.setattr(reconciler, "reconcile", hangs_for_a)
    config = OperatorConfig(allNamespaces=True, reconcileTimeout=5)
    ctl = controller.Controller(reconciler.Context(kube=None, config=config), workers=1, debounce=0)
    warned = []
    ctl.ctx.events.warn = lambda body, reason, message: warned.append((body["metadata"]["name"], reason))
    ctl.ctx.config = config.model_copy(update={"reconcile_timeout": 0.1})  # below the setting's floor, for the test
    ctl.start()
    ctl.resource_event("ADDED", resource("a"))
    ctl.resource_event("ADDED", resource("b"))
    await asyncio.sleep(0.4)
    await ctl.stop()
    assert done == [Key("ml", "b")] and warned == [("a", "ReconcileTimedOut")]


async def test_events_are_posted_side_by_side_and_a_flood_is_logged_once(caplog):
    from scorestream.operator import events

    class SlowKube:
        def __init__(self):
            self.in_flight = self.most = self.posted = 0

        async def request(self, method, url, body=None):
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            await asyncio.sleep(0.01)
            self.in_flight -= 1
            self.posted += 1
            return 201, {}

    kube = SlowKube()
    recorder = events.Recorder(kube, max_queued=100)
    body = {"apiVersion": "scorestream.dev/v1alpha1", "kind": "ModelServing",
            "metadata": {"name": "a", "namespace": "ml", "uid": "u"}}
    with caplog.at_level("WARNING"):
        for i in range(300):  # far more than the queue holds, before any is posted
            recorder.info(body, "Tested", str(i))
    await recorder.close(timeout=10)
    assert kube.most == events.POSTERS
    assert recorder.dropped == 200 and kube.posted == 100
    assert len([r for r in caplog.records if "Events waiting" in r.getMessage()]) == 1


async def test_a_resource_deleted_during_its_reconcile_leaves_nothing_behind(monkeypatch):
    """The DELETED event arrives while the turn awaits the API server (the write of its status):
    what the turn remembers after it (the status series, the rendered objects, the write's answer
    in the cache) goes too, or every deleted resource would leave a series and memory behind."""
    from scorestream.operator import metrics

    class Kube:
        async def patch_status(self, api_version, kind, namespace, name, patch, resource_version=None):
            ctl.resource_event("DELETED", gone)  # the watch's event, during the write
            return {**gone, "metadata": {**gone["metadata"], "resourceVersion": "3"}, "status": patch}

    async def rendering(ctx, body, previous):
        ctx.rendered[body["metadata"]["uid"]] = ("inputs", [])
        return status.parse({"phase": "Running"}), None

    monkeypatch.setattr(reconciler, "_reconcile", rendering)
    ctl = controller.Controller(reconciler.Context(kube=Kube(), config=OperatorConfig(allNamespaces=True)), workers=0)
    gone = resource("a")
    ctl.ctx.cache.put(gone)
    assert await reconciler.reconcile(ctl.ctx, Key("ml", "a")) is None
    assert ctl.ctx.cache.resource(Key("ml", "a")) is None and ctl.ctx.rendered == {}
    assert not [x for family in metrics.STATUS.collect() for x in family.samples
                if (x.labels["namespace"], x.labels["name"]) == ("ml", "a")]


async def test_a_creates_children_are_applied_in_two_rounds_the_statefulset_after_what_its_pods_need():
    """Eight requests one after another made a create's reconcile cost eight round trips (seconds
    each on a busy API server, where a thousand are made at once): the children go at once, then
    the RoleBinding (checked against its Role) and the StatefulSet (whose pods mount and run as the
    rest). A failure is raised after the others have ended, their writes kept."""
    from scorestream.operator.kube import KubeError

    class Kube:
        def __init__(self, failing: str | None = None):
            self.log: list[tuple[str, str]] = []
            self.failing = failing

        async def _call(self, kind: str) -> None:
            self.log.append(("start", kind))
            await asyncio.sleep(0.02)
            self.log.append(("end", kind))
            if kind == self.failing:
                raise KubeError(500, "refused")

        async def create(self, obj):
            await self._call(obj["kind"])
            return True

        async def apply(self, obj, current=None):
            await self._call(obj["kind"])
            return "created", {**obj, "metadata": {**obj["metadata"], "resourceVersion": "1"}}

    def child(api_version: str, kind: str) -> dict:
        return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "a-x", "namespace": "ml"}}

    body = resource("a")
    children = [child("v1", "ConfigMap"), child("v1", "ServiceAccount"), child("rbac.authorization.k8s.io/v1", "Role"),
                child("rbac.authorization.k8s.io/v1", "RoleBinding"), child("v1", "Service"),
                child("networking.k8s.io/v1", "NetworkPolicy"), child("apps/v1", "StatefulSet")]
    ctx = reconciler.Context(kube=Kube(), config=OperatorConfig(allNamespaces=True))
    await reconciler._apply(ctx, body, children)
    log = ctx.kube.log
    first = {"Secret", "ConfigMap", "ServiceAccount", "Role", "Service", "NetworkPolicy"}
    assert {k for _, k in log[:6]} == first and all(e == "start" for e, _ in log[:6])  # at once
    last_of_first = max(i for i, (e, k) in enumerate(log) if e == "end" and k in first)
    assert min(i for i, (e, k) in enumerate(log) if e == "start" and k in reconciler.LAST) > last_of_first
    assert all(ctx.cache.get(c["apiVersion"], c["kind"], "ml", "a-x") for c in children)

    ctx = reconciler.Context(kube=Kube(failing="Role"), config=OperatorConfig(allNamespaces=True))
    with pytest.raises(KubeError):
        await reconciler._apply(ctx, body, children)
    assert ("start", "StatefulSet") not in ctx.kube.log
    assert ctx.cache.get("v1", "ConfigMap", "ml", "a-x") is not None  # kept: not applied again next turn
