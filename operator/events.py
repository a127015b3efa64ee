"""Kubernetes Events about a ModelServing (`kubectl describe ms` shows them), posted in the background.

A reconcile asks for an Event and goes on: a few tasks post them, so a slow or failing API server
delays no reconcile, and the queue is bounded (the oldest is dropped, and said so in the log), so
a flood of transitions cannot fill the operator's memory. Each Event carries the time it was asked
for, which `kubectl describe` orders by: posting them side by side loses no order a reader sees.
kopf posts its Events from the handlers' own context, which the operator's workers do not run in;
this is the same POST.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

from scorestream.operator import clock
from scorestream.operator.kube import Kube, KubeError, path

LOG = logging.getLogger(__name__)
COMPONENT = "scorestream-operator"
MAX_MESSAGE = 1000
MAX_QUEUED = 1000
# POSTs at once. One at a time, a loaded API server took ~7 a second: 1,000 resources created at
# once asked for ~8,000 Events, and the queue dropped most of them and drained for minutes.
POSTERS = 4
DROPPED_LOG_SECONDS = 60.0  # at most one log line this often about dropped Events


def event(body: dict[str, Any], type_: str, reason: str, message: str, now: str) -> dict[str, Any]:
    """The core/v1 Event about `body` (a ModelServing)."""
    meta = body["metadata"]
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "name": meta["name"],
                           "namespace": meta["namespace"], "uid": meta.get("uid")},
        "type": type_, "reason": reason, "message": message[:MAX_MESSAGE],
        "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }


class Recorder:
    def __init__(self, kube: Kube, max_queued: int = MAX_QUEUED, posters: int = POSTERS) -> None:
        self.kube = kube
        self._queue: collections.deque[dict[str, Any]] = collections.deque(maxlen=max_queued)
        self._more = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self.posters = posters
        self._posting = 0  # POSTs in flight: close() waits for them too
        self.dropped = 0
        self._dropped_logged, self._dropped_at = 0, float("-inf")

    def info(self, body: dict[str, Any], reason: str, message: str) -> None:
        self._post(body, "Normal", reason, message)

    def warn(self, body: dict[str, Any], reason: str, message: str) -> None:
        self._post(body, "Warning", reason, message)

    def _post(self, body: dict[str, Any], type_: str, reason: str, message: str) -> None:
        loop = asyncio.get_running_loop()
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1
            if loop.time() - self._dropped_at >= DROPPED_LOG_SECONDS:
                LOG.warning("more than %d Events waiting to be posted: the oldest dropped (%d since the last"
                            " such line)", self._queue.maxlen, self.dropped - self._dropped_logged)
                self._dropped_logged, self._dropped_at = self.dropped, loop.time()
        self._queue.append(event(body, type_, reason, message, clock.now_text()))
        self._more.set()
        if not self._tasks:
            self._tasks = [loop.create_task(self._run(), name=f"events-{i}") for i in range(self.posters)]

    async def _run(self) -> None:
        while True:
            while self._queue:
                ev = self._queue.popleft()
                self._posting += 1
                try:
                    status, data = await self.kube.request("POST", path("v1", "Event", ev["metadata"]["namespace"]), ev)
                    if status >= 300:
                        raise KubeError(status, data.get("message", ""))
                except Exception as e:  # an Event is a courtesy: the status says the same
                    LOG.warning("could not post the Event %s about %s/%s: %s", ev["reason"],
                                ev["metadata"]["namespace"], ev["involvedObject"]["name"], e)
                finally:
                    self._posting -= 1
            self._more.clear()
            await self._more.wait()

    async def close(self, timeout: float = 5.0) -> None:
        """Post what is queued (for at most `timeout` seconds), then stop."""
        if not self._tasks:
            return
        deadline = asyncio.get_running_loop().time() + timeout
        while (self._queue or self._posting) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
