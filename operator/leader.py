"""One active operator among replicas: a `coordination.k8s.io/v1` Lease in the operator's
namespace, held as client-go's leaderelection (and so controller-runtime) holds it.

Every replica runs kopf from the start, so its watches keep its cache warm; only the holder of
the Lease reconciles (controller-runtime's manager runs its caches on every replica and its
controllers on the leader alone). A thread of its own waits for the Lease, says so (`on_lead`),
then renews it every `retry` seconds. A renewal that has not succeeded for `renew_deadline` seconds
means the Lease may be another's by now: the process exits at once (the pod restarts as a
follower), rather than serve beside a new leader. A follower takes a Lease over when it has seen
it unchanged (same holder, same renewTime) for `duration` seconds on its own clock, never by
comparing the holder's timestamps with its clock, so clock skew between nodes does not matter.
Writes are optimistic (the resourceVersion read), so of two followers taking over one wins.
On a graceful stop the leader releases the Lease (holder emptied): a follower takes over at its
next try, not after `duration`.

Why not kopf's peering: it needs cluster-scoped CRDs (ClusterKopfPeering) and their RBAC even
for an operator of one namespace, and replicas of one priority all freeze instead of electing
one; a Lease is what the rest of Kubernetes uses, visible with `kubectl get lease`.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from scorestream.operator.kube import Kube

API_VERSION = "coordination.k8s.io/v1"
LOG = logging.getLogger("scorestream.operator.leader")


def _micro_time(at: float | None = None) -> str:
    """A Lease's MicroTime: RFC 3339 with microseconds, UTC."""
    t = datetime.datetime.fromtimestamp(time.time() if at is None else at, datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Election:
    """This replica's part in the election for one Lease."""

    kube: Kube
    namespace: str
    name: str
    identity: str
    duration: float
    renew_deadline: float
    retry: float
    clock: Callable[[], float] = time.monotonic
    # What this replica saw last of the Lease, and when (its clock) it last changed.
    _seen: tuple[Any, ...] | None = field(default=None, init=False)
    _seen_at: float = field(default=0.0, init=False)
    _held_for: float = field(default=0.0, init=False)
    holder: str = field(default="", init=False)  # the holder the last read found

    def _observe(self, spec: dict[str, Any]) -> bool:
        """Record what the Lease says; True if its holder has let it lapse (unchanged for `duration`)."""
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        now = self.clock()
        if record != self._seen:
            self._seen, self._seen_at = record, now
        self._held_for = spec.get("leaseDurationSeconds") or self.duration
        return now - self._seen_at >= self._held_for

    def lapses_in(self) -> float:
        """Seconds until the Lease, as last seen, has lapsed (on this replica's clock)."""
        return self._seen_at + self._held_for - self.clock()

    async def try_acquire_or_renew(self) -> bool:
        """One try: True if this replica holds the Lease now."""
        path = f"/apis/{API_VERSION}/namespaces/{self.namespace}/leases"
        status, current = await self.kube.request("GET", f"{path}/{self.name}")
        now = _micro_time()
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration),
                "acquireTime": now, "renewTime": now, "leaseTransitions": 0}
        if status == 404:
            body = {"apiVersion": API_VERSION, "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
            status, _ = await self.kube.request("POST", path, body)
            return status < 300
        if status >= 300:
            raise LeaseError(f"reading Lease {self.namespace}/{self.name}: {status} {current.get('message', '')}")
        old = current.get("spec") or {}
        holder = self.holder = old.get("holderIdentity") or ""
        lapsed = self._observe(old)
        if holder and holder != self.identity and not lapsed:
            return False
        if holder == self.identity:
            spec.update(acquireTime=old.get("acquireTime") or now, leaseTransitions=old.get("leaseTransitions") or 0)
        else:
            spec["leaseTransitions"] = (old.get("leaseTransitions") or 0) + 1
        body = {**current, "spec": spec}  # with its resourceVersion: another's write in between wins
        status, _ = await self.kube.request("PUT", f"{path}/{self.name}", body)
        if status < 300:
            self._seen, self._seen_at = None, self.clock()
            return True
        return False

    async def acquire(self, stop: threading.Event) -> bool:
        """Wait until this replica holds the Lease (True), or `stop` is set (False). It tries again
        every `retry` s, and at the moment the Lease, as last seen, lapses: a takeover does not wait
        for the next of its tries."""
        said = False
        while not stop.is_set():
            try:
                if await self.try_acquire_or_renew():
                    LOG.info("leading: holding Lease %s/%s as %s", self.namespace, self.name, self.identity)
                    return True
            except Exception as e:  # noqa: BLE001 - the API server may be away; keep trying
                LOG.warning("cannot take part in the election: %s", e)
            if not said:
                LOG.info("following: Lease %s/%s is held by %s; waiting", self.namespace, self.name,
                         (self._seen or ("?",))[0])
                said = True
            wait = min(self.retry, self.lapses_in()) if self._seen else self.retry
            await asyncio.to_thread(stop.wait, max(0.05, wait))
        return False

    async def keep(self, stop: threading.Event) -> bool:
        """Renew every `retry` s until `stop` is set (True), or until no renewal has succeeded for
        `renew_deadline` s (False: the Lease is lost)."""
        renewed = self.clock()
        while not stop.is_set():
            try:
                async with asyncio.timeout(max(0.5, self.renew_deadline - (self.clock() - renewed))):
                    ok = await self.try_acquire_or_renew()
            except Exception as e:  # noqa: BLE001 - timeouts, the API server away: retried until the deadline
                LOG.warning("renewing Lease %s/%s failed: %s", self.namespace, self.name, e or type(e).__name__)
                ok = False
            if ok:
                renewed = self.clock()
            elif self.holder not in ("", self.identity) or self.clock() - renewed >= self.renew_deadline:
                return False  # another holds it now, or it may by now
            await asyncio.to_thread(stop.wait, self.retry)
        return True

    async def release(self) -> None:
        """Give the Lease up (holder emptied) if this replica still holds it."""
        path = f"/apis/{API_VERSION}/namespaces/{self.namespace}/leases/{self.name}"
        status, current = await self.kube.request("GET", path)
        if status >= 300 or (current.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        spec = {**current["spec"], "holderIdentity": "", "renewTime": _micro_time(), "leaseDurationSeconds": 1}
        await self.kube.request("PUT", path, {**current, "spec": spec})


class LeaseError(RuntimeError):
    pass


def identity() -> str:
    """This replica's name in the Lease: its pod's (the chart's POD_NAME), else host and pid."""
    return os.environ.get("POD_NAME") or f"{os.uname().nodename}-{os.getpid()}"


def lead(make_kube: Callable[[], Any], namespace: str, name: str, duration: float, renew_deadline: float,
         retry: float, serve: Callable[[], None], on_lead: Callable[[], None], on_lost: Callable[[], None]) -> None:
    """`serve()` (blocking: kopf) at once, while a thread waits for the Lease, calls `on_lead()`
    once it holds it, and renews it; `on_lost()` if it is lost. The Lease is released when `serve`
    returns."""
    me = identity()
    stop = threading.Event()
    lost = threading.Event()

    def elect_and_renew() -> None:
        async def run() -> None:
            kube = await make_kube()
            election = Election(kube, namespace, name, me, duration, renew_deadline, retry)
            try:
                if not await election.acquire(stop):
                    return
                on_lead()
                if not await election.keep(stop):
                    lost.set()
                    LOG.error("lost Lease %s/%s (held by %s, or not renewed for %g s): stopping, to restart"
                              " as a follower", namespace, name, election.holder or "nobody", renew_deadline)
                    on_lost()
                    return
                await election.release()
            finally:
                await kube.close()

        asyncio.run(run())

    elector = threading.Thread(target=elect_and_renew, name="lease-elector", daemon=True)
    elector.start()
    try:
        serve()
    finally:
        stop.set()
        if not lost.is_set():
            elector.join(retry + 10)
