"""The jobs of settled resources, polled outside the work queue: a source of events like a watch.

A resource that is Ready with nothing in flight costs no reconcile while its job answers as it did:
its job is asked every `observeInterval` here, and its key is queued only where the answer differs
from the one its last reconcile saw (a job no longer ready, a model swapped from the models topic,
lag that moved). controller-runtime's `source.Channel` fed by a poller: the reconcile itself stays
level-triggered and reads the job again. What is in flight (a driver starting, a rollout, an
upgrade) is looked at by the reconcile's own requeue instead (reconciler.next_look).

One task polls every watched job, at most `concurrency` at once, so a thousand settled resources
are a thousand heap entries, not a thousand tasks; an answer that takes long holds one slot.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Generic, Hashable, TypeVar

from scorestream.operator import metrics
from scorestream.operator.status import JobReport

LOG = logging.getLogger(__name__)
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class JobWatch:
    """A settled resource's job: where it answers and what its last reconcile read there."""

    endpoint: str
    seen: JobReport


class JobWatches(Generic[K]):
    def __init__(self, poll: Callable[[str], Awaitable[JobReport]], changed: Callable[[K], None], every: float,
                 concurrency: int = 16) -> None:
        self._poll, self._changed, self.every = poll, changed, every
        self._watched: dict[K, tuple[int, JobWatch]] = {}  # key -> (its token, what it watches)
        self._due: list[tuple[float, int, K]] = []  # (when, token, key); a token no longer watched: stale
        self._tokens = itertools.count()
        self._slots = asyncio.Semaphore(concurrency)
        self._wake = asyncio.Event()
        self._polls: set[asyncio.Task] = set()

    def __len__(self) -> int:
        return len(self._watched)

    def watch(self, key: K, job: JobWatch) -> None:
        """Poll `key`'s job from one interval on, until it answers otherwise or `unwatch`."""
        token = next(self._tokens)
        self._watched[key] = (token, job)
        heapq.heappush(self._due, (asyncio.get_running_loop().time() + self.every, token, key))
        self._wake.set()

    def unwatch(self, key: K) -> None:
        """The resource is being reconciled, or gone: its poll in flight, if any, is disregarded."""
        self._watched.pop(key, None)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                self._wake.clear()
                now = loop.time()
                while self._due and self._due[0][0] <= now:
                    _, token, key = heapq.heappop(self._due)
                    if self._current(key, token):
                        await self._slots.acquire()  # at most `concurrency` polls in flight
                        task = loop.create_task(self._look(key, token))
                        self._polls.add(task)
                        task.add_done_callback(self._polls.discard)
                # Stale entries dropped from the top; past them, sleep until the next one is due.
                while self._due and not self._current(self._due[0][2], self._due[0][1]):
                    heapq.heappop(self._due)
                wait = self._due[0][0] - loop.time() if self._due else None
                try:
                    await asyncio.wait_for(self._wake.wait(), wait)
                except TimeoutError:
                    pass
        finally:
            for task in self._polls:
                task.cancel()
            await asyncio.gather(*self._polls, return_exceptions=True)

    def _current(self, key: K, token: int) -> bool:
        held = self._watched.get(key)
        return held is not None and held[0] == token

    async def _look(self, key: K, token: int) -> None:
        try:
            report = await self._poll(self._watched[key][1].endpoint)
        except Exception:
            LOG.exception("polling the job of %s failed", key)
            report = None
        finally:
            self._slots.release()
        if not self._current(key, token):
            return  # reconciled or gone meanwhile: that reconcile read the job itself
        same = report is not None and report == self._watched[key][1].seen
        metrics.JOB_POLLS.labels("same" if same else "changed").inc()
        if same:
            heapq.heappush(self._due, (asyncio.get_running_loop().time() + self.every, token, key))
            self._wake.set()
            return
        del self._watched[key]
        self._changed(key)
