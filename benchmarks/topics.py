"""Kafka helpers every peer's measurement shares: loading the data topic, output topics stamped by
the broker, waiting for and reading what a peer wrote, and rates from the broker's timestamps."""

from __future__ import annotations

import time
from dataclasses import dataclass

from scorestream.tools.demo import feed
from scorestream.tools.local.broker import create_topics

# Outputs are stamped by the broker when appended: the end of every measured interval.
LOG_APPEND = {"message.timestamp.type": "LogAppendTime"}


def make_topics(bootstrap: str, data: str | None = None, outputs: tuple[str, ...] = (), stamped_data: bool = False,
                **others: int) -> None:
    """`data` and `outputs` with 2 partitions (outputs stamped with LogAppendTime, and `data` too if
    `stamped_data`: latency.paced's input append times), others as given."""
    topics = {**({data: 2} if data else {}), **{o: 2 for o in outputs}, **others}
    stamped = (*outputs, *((data,) if data and stamped_data else ()))
    create_topics(bootstrap, topics, {o: LOG_APPEND for o in stamped})


def preload(bootstrap: str, topic: str, n: int, partitions: int = 2) -> None:
    """n wine records as JSON, keys 0..n-1, round-robin over the partitions."""
    rows = feed.wine_rows()
    feed.produce(bootstrap, topic, ((str(i).encode(), feed.wine_json(rows[i % len(rows)])) for i in range(n)), partitions)


def written(consumer, topics: list[str]) -> int:
    """Records in these topics now: the sum of their partitions' high watermarks."""
    from confluent_kafka import TopicPartition

    total = 0
    for t in topics:
        for p in consumer.list_topics(t, timeout=10).topics[t].partitions:
            total += consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10, cached=False)[1]
    return total


def consumer(bootstrap: str):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-reader", "enable.auto.commit": False})


def wait_written(bootstrap: str, topics: list[str], n: int, timeout: float, alive=lambda: True, what: str = "",
                 progress=lambda done: None) -> None:
    """Until the topics hold n records (a peer's output and dead letters); raises on timeout.
    ``progress`` is told the count at every look (every 0.1 s)."""
    from confluent_kafka import KafkaError, KafkaException

    # Topics just made: their leaders may not be known yet; a look that fails so is tried again.
    transient = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TIMED_OUT, KafkaError._TRANSPORT}
    c = consumer(bootstrap)
    try:
        deadline = time.monotonic() + timeout
        done = 0
        while True:
            try:
                done = written(c, topics)
            except KafkaException as e:
                if not (e.args[0].retriable() or e.args[0].code() in transient):
                    raise
            if done >= n:
                break
            progress(done)
            if not alive():
                raise RuntimeError(f"{what} stopped after writing {done} of {n}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: {done} of {n} written in {timeout:.0f}s")
            time.sleep(0.1)
    finally:
        c.close()


@dataclass
class Message:
    timestamp: int  # ms: the broker's append time on an output topic
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class Follower:
    """A read_committed consumer following a topic from its start in a thread: each message with
    the wall-clock time it was received (ms) as its timestamp, when a reader could act on it."""

    def __init__(self, bootstrap: str, topic: str):
        import threading

        self.bootstrap, self.topic = bootstrap, topic
        self.messages: list[Message] = []
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Follower":
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-follower", "enable.auto.commit": False,
                      "isolation.level": "read_committed", "fetch.wait.max.ms": 5})
        try:
            parts = c.list_topics(self.topic, timeout=10).topics[self.topic].partitions
            c.assign([TopicPartition(self.topic, p, 0) for p in parts])
            while not self._halt.is_set():
                batch = c.consume(10_000, timeout=0.05)
                now = int(time.time() * 1000)
                self.messages += [Message(now, m.partition(), m.offset(), m.key(), m.value())
                                  for m in batch if m.error() is None]
        finally:
            c.close()

    def wait_for(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.messages) < n and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(30)


def read_all(bootstrap: str, topic: str, since_ms: int | None = None) -> list[Message]:
    """Every message of a topic up to its current end, by assignment (no group join); with
    ``since_ms``, from each partition's first message stamped at or after it."""
    from confluent_kafka import TopicPartition

    c = consumer(bootstrap)
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in parts}
        starts = {p: 0 for p in parts}
        if since_ms is not None:
            found = c.offsets_for_times([TopicPartition(topic, p, since_ms) for p in parts], timeout=10)
            starts = {tp.partition: ends[tp.partition] if tp.offset < 0 else tp.offset for tp in found}
        c.assign([TopicPartition(topic, p, starts[p]) for p in parts])
        out: list[Message] = []
        left = {p for p, end in ends.items() if end > starts[p]}
        deadline = time.monotonic() + 120
        while left and time.monotonic() < deadline:
            for m in c.consume(10_000, timeout=1.0):
                if m.error() is not None or m.partition() not in left:
                    continue
                out.append(Message(m.timestamp()[1], m.partition(), m.offset(), m.key(), m.value()))
            # The position, not the last message's offset: a transactional writer's partition ends
            # with a commit marker, which is no message.
            for tp in c.position([TopicPartition(topic, p) for p in left]):
                if tp.offset >= ends[tp.partition]:
                    left.discard(tp.partition)
        if left:
            raise TimeoutError(f"{topic}: partitions {sorted(left)} not read to their end")
        return out
    finally:
        c.close()


def rates(append_ms: list[int], started: float, skip: int, cold: int | None = None) -> dict:
    """Records per second from the broker's append times of a peer's output.

    The first `cold` records (all, by default) are the run every peer makes from a cold start:
    with_startup, all of them over the time from the peer's start (wall clock) to the last one
    written; steady, the records after the first `skip` (one micro-batch's worth) over the time
    from when the `skip`-th was written to the last. warm (when twice `cold` or more were written):
    the last `cold` records over their time, the same count measured once the peer has run for
    a while. slices: the rate of each `skip` records in turn, from when the slice before it ended
    (the first: from the first record written), which shows how fast each peer warms up.
    """
    ts = sorted(append_ms)
    n = len(ts)
    cold = min(cold or n, n)

    def rate(a: int, b: int) -> float:  # records a+1..b, from when the a-th was written
        return (b - a) * 1000 / (ts[b - 1] - ts[a - 1]) if 0 < a < b and ts[b - 1] > ts[a - 1] else float("nan")

    slices, since = [], ts[0]
    for start in range(0, n, skip) if skip > 0 else ():
        end = min(start + skip, n)
        slices.append((end - start) * 1000 / (ts[end - 1] - since) if ts[end - 1] > since else float("inf"))
        since = ts[end - 1]
    out = {"records": cold, "steady": rate(skip, cold), "with_startup": cold / (ts[cold - 1] / 1000 - started),
           "first_written_s": ts[0] / 1000 - started, "last_written_s": ts[cold - 1] / 1000 - started,
           "slices": slices}
    if n >= 2 * cold:
        out["warm"], out["warm_after"] = rate(n - cold, n), n - cold
    return out
