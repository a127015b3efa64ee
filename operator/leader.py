"""One active operator among replicas: a `coordination.k8s.io/v1` Lease in the operator's
namespace, held as client-go's leaderelection (and so controller-runtime) holds it.

A replica waits until it holds the Lease, then runs kopf; meanwhile a thread of its own renews
the Lease every `retry` seconds. A renewal that has not succeeded for `renew_deadline` seconds
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
import http.server
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
    duration: float = 15.0
    renew_deadline: float = 10.0
    retry: float = 2.0
    clock: Callable[[], float] = time.monotonic
    # What this replica saw last of the Lease, and when (its clock) it last changed.
    _seen: tuple[Any, ...] | None = field(default=None, init=False)
    _seen_at: float = field(default=0.0, init=False)
    holder: str = field(default="", init=False)  # the holder the last read found

    def _observe(self, spec: dict[str, Any]) -> bool:
        """Record what the Lease says; True if its holder has let it lapse (unchanged for `duration`)."""
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        now = self.clock()
        if record != self._seen:
            self._seen, self._seen_at = record, now
        held_for = spec.get("leaseDurationSeconds") or self.duration
        return now - self._seen_at >= held_for

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

    async def acquire(self) -> None:
        """Wait until this replica holds the Lease."""
        said = False
        while True:
            try:
                if await self.try_acquire_or_renew():
                    LOG.info("leading: holding Lease %s/%s as %s", self.namespace, self.name, self.identity)
                    return
            except Exception as e:  # noqa: BLE001 - the API server may be away; keep trying
                LOG.warning("cannot take part in the election: %s", e)
            if not said:
                LOG.info("following: Lease %s/%s is held by %s; waiting", self.namespace, self.name,
                         (self._seen or ("?",))[0])
                said = True
            await asyncio.sleep(self.retry)

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


class _Following(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200 if self.path.startswith("/healthz") else 404)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"following\n")

    def log_message(self, *args: Any) -> None:  # the probes' requests are not news
        pass


def lead(make_kube: Callable[[], Any], namespace: str, name: str, duration: float, renew_deadline: float,
         retry: float, serve: Callable[[], None], on_lost: Callable[[], None], health_port: int | None = None) -> None:
    """Wait for the Lease, then `serve()` (blocking: kopf) while a thread renews it; `on_lost()`
    if it is lost. The Lease is released when `serve` returns. While it waits, `health_port`
    answers /healthz (kopf's liveness endpoint is not up yet): a follower is alive, not stuck."""
    me = identity()
    health = None
    if health_port:
        health = http.server.ThreadingHTTPServer(("0.0.0.0", health_port), _Following)
        threading.Thread(target=health.serve_forever, name="following-healthz", daemon=True).start()

    async def elected() -> None:
        kube = await make_kube()
        try:
            await Election(kube, namespace, name, me, duration, renew_deadline, retry).acquire()
        finally:
            await kube.close()

    asyncio.run(elected())
    if health is not None:  # the port is kopf's from now on
        health.shutdown()
        health.server_close()
    stop = threading.Event()
    lost = threading.Event()

    def renew() -> None:
        async def run() -> None:
            kube = await make_kube()
            election = Election(kube, namespace, name, me, duration, renew_deadline, retry)
            try:
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

    renewer = threading.Thread(target=renew, name="lease-renewer", daemon=True)
    renewer.start()
    try:
        serve()
    finally:
        stop.set()
        if not lost.is_set():
            renewer.join(retry + 10)
