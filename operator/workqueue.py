"""A coalescing, per-key work queue: client-go's `workqueue` for asyncio.

Watch events and time only *add* a key; workers `get` keys and reconcile them. The guarantees
controller-runtime's controllers rest on:

- a key waiting is queued once, however often it is added (ten events in a burst: one reconcile);
- a key being processed is handed to no second worker; added meanwhile, it is queued again once
  `done` is called, so the change that came during the reconcile is not lost;
- `add_after` keeps, per key, only the earliest pending wake-up (a requeue never piles up timers),
  and a key handed out drops its pending wake-up: the worker asks for its next one when done;
- `retry` backs a failing key off exponentially (`forget` resets it on success).

Pure asyncio: nothing here knows Kubernetes, so its ordering rules are tested on their own.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Backoff:
    """client-go's per-item exponential failure rate limiter."""

    first: float = 0.5
    cap: float = 60.0

    def delay(self, failures: int) -> float:
        return min(self.cap, self.first * 2 ** max(0, failures - 1))


class ShutDown(Exception):
    """The queue was shut down: a worker waiting on it stops."""


class WorkQueue(Generic[K]):
    def __init__(self, backoff: Backoff = Backoff()) -> None:
        self._order: collections.deque[K] = collections.deque()
        self._waiting: set[K] = set()  # in _order
        self._processing: set[K] = set()
        self._dirty: set[K] = set()  # added while processing: queued again at done()
        self._timers: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._failures: collections.Counter[K] = collections.Counter()
        self._ready = asyncio.Event()  # set while a key may be waiting (or the queue is shut down)
        self._closed = False
        self.backoff = backoff

    def __len__(self) -> int:
        return len(self._order)

    @property
    def processing(self) -> frozenset[K]:
        return frozenset(self._processing)

    def add(self, key: K) -> None:
        """Queue `key` now (a no-op where it is queued already)."""
        if self._closed:
            return
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._waiting:
            return
        self._waiting.add(key)
        self._order.append(key)
        self._ready.set()

    def add_after(self, key: K, delay: float) -> None:
        """Queue `key` once `delay` seconds have passed, unless an earlier wake-up is pending."""
        if self._closed:
            return
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        pending = self._timers.get(key)
        if pending is not None:
            if pending[0] <= when:
                return
            pending[1].cancel()
        self._timers[key] = (when, loop.call_at(when, self._fire, key))

    def retry(self, key: K) -> float:
        """Queue a key whose reconcile failed, after its back-off; returns the delay."""
        self._failures[key] += 1
        delay = self.backoff.delay(self._failures[key])
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure backs off from the start."""
        self._failures.pop(key, None)

    def drop(self, key: K) -> None:
        """The object is gone: no pending wake-up, no failure count (a queued turn still runs and finds it gone)."""
        pending = self._timers.pop(key, None)
        if pending is not None:
            pending[1].cancel()
        self._failures.pop(key, None)

    async def get(self) -> K:
        """The next key, marked as processing until `done(key)`."""
        while not self._order:
            if self._closed:
                raise ShutDown()
            self._ready.clear()
            await self._ready.wait()
        key = self._order.popleft()
        self._waiting.discard(key)
        self._processing.add(key)
        # A wake-up still pending is for something that happened before this turn, which sees it;
        # the turn asks for its own next one (add_after, retry or drop) when it is done.
        pending = self._timers.pop(key, None)
        if pending is not None:
            pending[1].cancel()
        return key

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def shut_down(self) -> None:
        """Wake every waiting worker with ShutDown; pending wake-ups are cancelled."""
        self._closed = True
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        self._ready.set()

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)
