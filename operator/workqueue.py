"""A coalescing, per-key work queue: client-go's `workqueue` for asyncio.

Watch events and time only *add* a key; workers `get` keys and reconcile them. The guarantees
controller-runtime's controllers rest on:

- a key waiting is queued once, however often it is added (ten events in a burst: one reconcile);
- a key being processed is handed to no second worker; added meanwhile, it is queued again once
  `done` is called, so the change that came during the reconcile is not lost;
- `add_after` keeps, per key, only the earliest pending wake-up (a requeue never piles up timers),
  and a key handed out drops its pending wake-up: the worker asks for its next one when done;
- `retry` backs a failing key off exponentially (`forget` resets it on success);
- a key added for a change goes before the keys added by time (a job's poll, a back-off):
  controller-runtime's priority queue. A thousand resources at rest polled on schedule never
  hold back the one whose driver pod just became ready.

Pure asyncio: nothing here knows Kubernetes, so its ordering rules are tested on their own.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import time
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Backoff:
    """client-go's per-item exponential failure rate limiter."""

    first: float = 0.5
    cap: float = 60.0

    def delay(self, failures: int) -> float:
        return min(self.cap, self.first * 2 ** max(0, failures - 1))


class Priority(enum.IntEnum):
    """Why a key is queued; the lower goes first."""

    CHANGE = 0  # a watch event: something a reconcile reads changed
    POLL = 1  # time: the job's poll, a failure's back-off, a new leader's spread first look


class ShutDown(Exception):
    """The queue was shut down: a worker waiting on it stops."""


class WorkQueue(Generic[K]):
    """`on_wait(priority, seconds)`: told, as a worker takes a key, how long it waited since it was
    queued (client-go's workqueue_queue_duration_seconds)."""

    def __init__(self, backoff: Backoff = Backoff(),
                 on_wait: Callable[[Priority, float], None] | None = None) -> None:
        # One deque per priority; a key promoted to a higher one leaves a stale entry behind in
        # the lower, skipped when reached (`_waiting` says where a key counts).
        self._order: tuple[collections.deque[K], ...] = tuple(collections.deque() for _ in Priority)
        self._waiting: dict[K, Priority] = {}
        self._since: dict[K, float] = {}  # when a waiting key was queued (a promotion keeps it)
        self._processing: set[K] = set()
        self._dirty: dict[K, Priority] = {}  # added while processing: queued again at done()
        self._timers: dict[K, _Timer] = {}
        self._failures: collections.Counter[K] = collections.Counter()
        self._ready = asyncio.Event()  # set while a key may be waiting (or the queue is shut down)
        self._closed = False
        self.backoff, self.on_wait = backoff, on_wait

    def __len__(self) -> int:
        return len(self._waiting)

    @property
    def processing(self) -> frozenset[K]:
        return frozenset(self._processing)

    def add(self, key: K, priority: Priority = Priority.CHANGE) -> None:
        """Queue `key` now (a no-op where it is queued already at this priority or a higher one)."""
        if self._closed:
            return
        if key in self._processing:
            self._dirty[key] = min(priority, self._dirty.get(key, priority))
            return
        if key in self._waiting and self._waiting[key] <= priority:
            return
        self._since.setdefault(key, time.monotonic())
        self._waiting[key] = priority
        self._order[priority].append(key)
        self._ready.set()

    def add_after(self, key: K, delay: float, priority: Priority = Priority.CHANGE) -> None:
        """Queue `key` once `delay` seconds have passed, unless an earlier wake-up is pending (which
        then takes the higher of the two priorities)."""
        if self._closed:
            return
        if delay <= 0:
            self.add(key, priority)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        pending = self._timers.get(key)
        if pending is not None:
            priority = min(priority, pending.priority)
            if pending.when <= when:
                pending.priority = priority
                return
            pending.handle.cancel()
        self._timers[key] = _Timer(when, priority, loop.call_at(when, self._fire, key))

    def retry(self, key: K) -> float:
        """Queue a key whose reconcile failed, after its back-off; returns the delay."""
        self._failures[key] += 1
        delay = self.backoff.delay(self._failures[key])
        self.add_after(key, delay, Priority.POLL)
        return delay

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure backs off from the start."""
        self._failures.pop(key, None)

    def drop(self, key: K) -> None:
        """The object is gone: no pending wake-up, no failure count (a queued turn still runs and finds it gone)."""
        pending = self._timers.pop(key, None)
        if pending is not None:
            pending.handle.cancel()
        self._failures.pop(key, None)

    async def get(self) -> K:
        """The next key, marked as processing until `done(key)`."""
        while not self._waiting:
            if self._closed:
                raise ShutDown()
            self._ready.clear()
            await self._ready.wait()
        key = self._next()
        priority = self._waiting.pop(key)
        since = self._since.pop(key)
        if self.on_wait is not None:
            self.on_wait(priority, time.monotonic() - since)
        self._processing.add(key)
        # A wake-up still pending is for something that happened before this turn, which sees it;
        # the turn asks for its own next one (add_after, retry or drop) when it is done.
        pending = self._timers.pop(key, None)
        if pending is not None:
            pending.handle.cancel()
        return key

    def _next(self) -> K:
        """The first key of the highest priority, stale entries (promoted since) dropped."""
        for priority, order in zip(Priority, self._order):
            while order:
                key = order.popleft()
                if self._waiting.get(key) == priority:
                    return key
        raise AssertionError("a key is waiting in no order")

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self.add(key, self._dirty.pop(key))

    def shut_down(self) -> None:
        """Wake every waiting worker with ShutDown; pending wake-ups are cancelled."""
        self._closed = True
        for timer in self._timers.values():
            timer.handle.cancel()
        self._timers.clear()
        self._ready.set()

    def _fire(self, key: K) -> None:
        timer = self._timers.pop(key, None)
        self.add(key, timer.priority if timer is not None else Priority.CHANGE)


@dataclass
class _Timer:
    when: float
    priority: Priority
    handle: asyncio.TimerHandle
