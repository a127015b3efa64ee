"""The controller: watch events fill the cache and queue keys; a bounded pool of workers reconciles them.

controller-runtime's shape. An event only stores its object and queues the key of the
ModelServing it concerns (the resource itself, the owner of a child, the resource a driver pod
runs); the work queue coalesces keys and never hands one to two workers at once; a worker calls
`reconciler.reconcile(key)` and queues the key again after the delay it returns (the job's poll),
or after a back-off where it failed; a key queued for a change goes before those queued by time
(workqueue.Priority). A settled resource's job is polled outside the queue (jobwatch.py), its key
queued only where the job answers otherwise. Nothing runs per resource but what is queued: a thousand
resources at rest are a thousand pending wake-ups, not a thousand timers or tasks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from scorestream import naming
from scorestream.operator import metrics, observer, reconciler
from scorestream.operator.cache import Key, owner_key
from scorestream.operator.jobwatch import JobWatches
from scorestream.operator.kube import KubeError, path
from scorestream.operator.workqueue import Priority, ShutDown, WorkQueue

LOG = logging.getLogger(__name__)
Body = dict[str, Any]

MANAGED = {"app.kubernetes.io/managed-by": "scorestream-operator"}
# Only the driver pods: the executors' are the job's (Spark's) own.
DRIVER_PODS = {**MANAGED, "app.kubernetes.io/component": "driver"}
# (apiVersion, kind) of every child the operator renders; their events repair them.
CHILD_KINDS = [("v1", "ConfigMap"), ("v1", "ServiceAccount"), ("v1", "Service"),
               ("rbac.authorization.k8s.io/v1", "Role"), ("rbac.authorization.k8s.io/v1", "RoleBinding"),
               ("apps/v1", "StatefulSet"), ("networking.k8s.io/v1", "NetworkPolicy")]


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def pod_key(pod: Body) -> Key | None:
    """The ModelServing a driver pod runs (its StatefulSet, not the resource, owns it)."""
    meta = pod.get("metadata", {})
    name = (meta.get("labels") or {}).get(naming.MODELSERVING_LABEL)
    return Key(meta.get("namespace", ""), name) if name else None


def driver_changed(held: Body | None, new: Body) -> bool:
    """Whether a driver pod's event changes what a reconcile reads of it (observer.driver_state):
    the kubelet's and the scheduler's other writes (conditions, IPs, start times) do not."""
    return held is None or observer.driver_state(held) != observer.driver_state(new)


def _content(body: Body) -> Body:
    meta = {k: v for k, v in body.get("metadata", {}).items() if k not in ("resourceVersion", "managedFields")}
    return {**{k: v for k, v in body.items() if k != "status"}, "metadata": meta}


def child_changed(held: Body | None, new: Body) -> bool:
    """Whether a child's event changes more than its status: a reconcile compares what it renders
    with a child's content, never with the status its controller writes (a StatefulSet's replica
    counts, say)."""
    return held is None or _content(held) != _content(new)


def _waited(priority: Priority, seconds: float) -> None:
    metrics.QUEUE_SECONDS.labels(priority.name.lower()).observe(seconds)


class Controller:
    def __init__(self, ctx: reconciler.Context, workers: int, debounce: float = reconciler.DEBOUNCE) -> None:
        self.ctx = ctx
        self.queue: WorkQueue[Key] = WorkQueue(on_wait=_waited)
        metrics.QUEUE_DEPTH.set_function(lambda: len(self.queue))
        self.jobs: JobWatches[Key] = JobWatches(ctx.job_report, self.queue.add, ctx.config.observe_interval)
        self.workers, self.debounce = workers, debounce
        self._tasks: list[asyncio.Task] = []
        self._job_polls: asyncio.Task | None = None
        # Until `start`: the keys whose objects changed meanwhile (a follower's, who leads later).
        self._following: set[Key] | None = set()

    # --- the event source's side ---------------------------------------------------------------

    def resource_event(self, type_: str | None, body: Body) -> None:
        """A ModelServing's watch event."""
        meta = body.get("metadata", {})
        key = Key(meta.get("namespace", ""), meta.get("name", ""))
        if type_ == "DELETED":
            self.ctx.cache.delete(body)
            self.queue.drop(key)
            self.jobs.unwatch(key)
            self.ctx.forget(key, meta.get("uid"))
            if self._following is not None:
                self._following.discard(key)
        elif self.ctx.cache.put(body):
            self._queue(key, type_)

    def child_event(self, type_: str | None, body: Body) -> None:
        """A watch event of a child or a driver pod: its resource is looked at where the change is
        one a reconcile reads (a deleted or edited child repaired, a crash-looping driver
        reported), not for every status a controller or the kubelet writes on the way."""
        pod = body.get("kind") == "Pod"
        key = pod_key(body) if pod else owner_key(body)
        meta = body.get("metadata", {})
        held = self.ctx.cache.get(body.get("apiVersion", ""), body.get("kind", ""), meta.get("namespace", ""),
                                  meta.get("name", ""))
        if type_ == "DELETED":
            self.ctx.cache.delete(body)
        elif not self.ctx.cache.put(body):
            return  # the operator's own write, stored already
        elif not (driver_changed(held, body) if pod else child_changed(held, body)):
            return
        if key is not None:
            self._queue(key, type_)

    def _queue(self, key: Key, type_: str | None) -> None:
        if self._following is None:
            self.queue.add_after(key, self.debounce)
        elif type_ is not None:  # a change; kopf gives the objects of a watch's (re)listing no type
            self._following.add(key)

    async def prime(self, namespaces: list[str] | None) -> None:
        """List the children and driver pods into the cache before the first reconcile (an
        informer's initial sync): a reconcile must not take a child it has not seen yet for a
        missing one. `namespaces`: None for all."""
        kinds = [(a, k, MANAGED) for a, k in CHILD_KINDS] + [("v1", "Pod", DRIVER_PODS)]
        for api_version, kind, labels in kinds:
            for ns in namespaces if namespaces is not None else [None]:
                url = path(api_version, kind, ns)
                status, data = await self.ctx.kube.request("GET", f"{url}?labelSelector={_selector(labels)}")
                if status >= 300:
                    raise KubeError(status, data.get("message", ""))
                list_kind = data.get("kind", "").removesuffix("List") or kind
                for item in data.get("items", []):
                    item.setdefault("apiVersion", data.get("apiVersion", api_version))
                    item.setdefault("kind", list_kind)
                    self.ctx.cache.put(item)

    # --- the workers ---------------------------------------------------------------------------

    def start(self) -> None:
        """Reconcile from now on: what changed while this replica followed (its watches filled the
        cache) at once, the rest within one observe interval, as the last leader looked at them."""
        changed, self._following = self._following or set(), None
        keys = list(self.ctx.cache.resources())
        spread = self.ctx.config.observe_interval
        for i, key in enumerate(keys):
            body = self.ctx.cache.resource(key) or {}
            handled = body.get("metadata", {}).get("generation") == (body.get("status") or {}).get("observedGeneration")
            if key in changed or not handled:
                self.queue.add(key)
            else:
                self.queue.add_after(key, spread * (i + 1) / len(keys), Priority.POLL)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._work(), name=f"reconcile-worker-{i}") for i in range(self.workers)]
        self._job_polls = loop.create_task(self.jobs.run(), name="job-polls")

    async def stop(self, timeout: float = 10.0) -> None:
        """Let the reconciles in flight finish (for at most `timeout` seconds), then stop."""
        self.queue.shut_down()
        if self._job_polls is not None:
            self._job_polls.cancel()
            await asyncio.gather(self._job_polls, return_exceptions=True)
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _work(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            self.jobs.unwatch(key)  # this turn asks the job itself
            started = time.monotonic()
            budget = self.ctx.config.reconcile_timeout
            try:
                async with asyncio.timeout(budget):
                    turn = await reconciler.reconcile(self.ctx, key)
                LOG.debug("reconciled %s in %.3f s; next: %s", key, time.monotonic() - started, turn)
            except TimeoutError:
                # One resource's turn never holds a worker longer than this: the others proceed.
                retry = self.queue.retry(key)
                LOG.warning("reconciling %s took over %.0f s: given up, retrying in %.1f s", key, budget, retry)
                body = self.ctx.cache.resource(key)
                if body is not None:
                    self.ctx.events.warn(body, "ReconcileTimedOut",
                                         f"a reconcile took over {budget:.0f} s (reconcileTimeout) and was given up;"
                                         f" retrying in {retry:.0f} s")
            except asyncio.CancelledError:
                raise
            except Exception:
                # Unexpected: logged whole, and tried again after a back-off that grows with
                # each failure, so a resource that always fails costs little.
                LOG.exception("reconciling %s failed; retrying in %.1f s", key, self.queue.retry(key))
            else:
                self.queue.forget(key)
                if turn is None:
                    self.queue.drop(key)
                else:
                    self.queue.add_after(key, turn.after, Priority.POLL)
                    if turn.job is not None:
                        self.jobs.watch(key, turn.job)
            finally:
                self.queue.done(key)
