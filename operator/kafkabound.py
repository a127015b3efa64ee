"""A reconcile's Kafka work (topic checks, model publishing) within one budget of seconds.

confluent-kafka's calls block, and with a broker that does not answer they block for as long as
they are told to (librdkafka's own defaults are a minute and more): a reconcile that waited that
long held its resource's handler and hid the cause. So each reconcile gets a `Deadline`; every
Kafka call in it takes what is left as its own timeout (librdkafka's socket timeouts, the admin
calls' request and operation timeouts, the futures', the producer's message timeout), and runs
in a thread of `EXECUTOR` (never on kopf's event loop) that the reconcile waits for no longer
than the deadline plus `GRACE`. What did not answer in time is `KafkaUnreachable`, said in the
status (Degraded: KafkaUnreachable), and the next reconcile asks again.
"""

from __future__ import annotations

import asyncio
import functools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

T = TypeVar("T")

# A call's own timeouts bound it; a client's teardown is not bounded by them (it is short, but
# not nothing): the reconcile waits this much beyond its deadline before it gives up on a thread.
GRACE = 1.0
# Less than this left: a call is not started (it could only time out).
MINIMUM = 0.25
# Kafka's own threads, apart from asyncio's default executor (the API client's and the job
# reports' threads): calls left running past their deadline cannot starve those.
EXECUTOR = ThreadPoolExecutor(max_workers=8, thread_name_prefix="scorestream-kafka")


class KafkaUnreachable(RuntimeError):
    """The brokers did not answer within the reconcile's Kafka budget."""


class Deadline:
    """When a reconcile's Kafka work must be done by."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.seconds, self.clock = seconds, clock
        self.at = clock() + seconds

    def left(self) -> float:
        return max(0.0, self.at - self.clock())

    def expired(self) -> bool:
        return self.left() < MINIMUM


def client_timeouts(seconds: float) -> dict[str, int]:
    """librdkafka's settings that bound a client's waits on a socket to `seconds`: an unanswered
    connection attempt, and a request with no answer (its minimum: 1 s and 10 ms)."""
    ms = int(seconds * 1000)
    return {"socket.timeout.ms": max(10, ms), "socket.connection.setup.timeout.ms": max(1000, ms)}


# What one answer of a broker may make an operator's client hold: a tenant names the brokers, and a
# broker's frame is buffered whole before it is parsed (librdkafka's default allows 100 MB, each
# client and connection). The operator's clients are producers and admin clients (no consumer, so
# no fetch sizes): their answers are a few topics' metadata, topic creation and config, and the
# acknowledgement of one model message, all small.
MAX_ANSWER_BYTES = 1024 * 1024


def client_caps() -> dict[str, str | int | bool]:
    """Settings every Kafka client the operator builds for a tenant takes last, over the tenant's
    own: answers of at most MAX_ANSWER_BYTES, and metadata of the topics asked for only (no broker
    creating a topic the operator only asked about)."""
    return {"receive.message.max.bytes": MAX_ANSWER_BYTES, "topic.metadata.refresh.sparse": True,
            "allow.auto.create.topics": False}


async def call(deadline: Deadline, what: str, fn: Callable[..., T], *args, **kwargs) -> T:
    """`fn(*args, timeout=<seconds left>, **kwargs)` in a Kafka thread, waited for until the
    deadline (plus GRACE); KafkaUnreachable if there is no time left or it takes longer."""
    if deadline.expired():
        raise KafkaUnreachable(f"{what}: no answer from Kafka within {deadline.seconds:g} s")
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(EXECUTOR, functools.partial(fn, *args, timeout=deadline.left(), **kwargs))
    try:
        return await asyncio.wait_for(future, deadline.left() + GRACE)
    except TimeoutError:
        # The thread goes on until its own timeouts end it; nothing waits for it.
        raise KafkaUnreachable(f"{what}: no answer from Kafka within {deadline.seconds:g} s") from None
