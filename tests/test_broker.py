"""The test broker is Apache Kafka: topics, exact watermarks, compaction, and a clean stop; and the
JVM scorer's transactional writers on it (their JUnit tests that need a broker)."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec

from scorestream.tools.demo import feed
from scorestream.tools.local.broker import EmbeddedBroker, create_topics
from harness import junit, orphans

pytestmark = pytest.mark.broker


def _name() -> str:
    return "b" + uuid.uuid4().hex[:8]


def _read_all(bootstrap: str, topic: str, partitions: int) -> list:
    """Every record of the topic, by assignment (no group), up to the high watermarks."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": _name(), "enable.auto.commit": False})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        # Offsets, not counts: a compacted partition has gaps.
        todo = {p for p, end in ends.items() if end > 0}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out, deadline = [], time.monotonic() + 30
        while todo and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m)
                if m.offset() + 1 >= ends[m.partition()]:
                    todo.discard(m.partition())
        assert not todo, f"partitions {todo} of {topic} not read to {ends} within 30 s"
        return out
    finally:
        c.close()


def test_topics_are_created_and_never_implicitly(broker):
    data, models = _name(), _name()
    create_topics(broker.bootstrap, {data: 3, models: 1}, {models: {"cleanup.policy": "compact"}})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    meta = admin.list_topics(timeout=10).topics
    assert len(meta[data].partitions) == 3 and len(meta[models].partitions) == 1
    res = ConfigResource(ConfigResource.Type.TOPIC, models)
    assert admin.describe_configs([res])[res].result(10)["cleanup.policy"].value == "compact"
    missing = _name()
    admin.list_topics(topic=missing, timeout=10)  # a metadata request for it does not create it
    assert missing not in admin.list_topics(timeout=10).topics


def test_round_trip_with_exact_high_watermarks(broker):
    topic, n = _name(), 10_000
    create_topics(broker.bootstrap, {topic: 3})
    # A producer that batches: many records per request, no record sent alone at the end.
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "batch.num.messages": 1000})
    for i in range(n):
        p.produce(topic, b"v%d" % i, key=b"k%d" % i, partition=i % 3)
    assert p.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    latest = admin.list_offsets({TopicPartition(topic, q): OffsetSpec.latest() for q in range(3)})
    assert {tp.partition: f.result(10).offset for tp, f in latest.items()} == {0: 3334, 1: 3333, 2: 3333}

    got = _read_all(broker.bootstrap, topic, 3)
    assert sorted((m.key(), m.value()) for m in got) == sorted((b"k%d" % i, b"v%d" % i) for i in range(n))
    assert feed.produce(broker.bootstrap, topic, [(b"x", b"y")] * 30, partitions=3) == 30
    latest = admin.list_offsets({TopicPartition(topic, q): OffsetSpec.latest() for q in range(3)})
    assert sum(f.result(10).offset for f in latest.values()) == n + 30


def test_a_compacted_topic_keeps_the_latest_per_key(broker):
    topic = _name()
    # Segments roll after 100 ms and the cleaner looks every second (log.cleaner.backoff.ms).
    create_topics(broker.bootstrap, {topic: 1}, {topic: {
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0", "delete.retention.ms": "100",
    }})
    for version in range(3):
        feed.produce(broker.bootstrap, topic, [(b"k%d" % k, b"v%d" % version) for k in range(5)])
        time.sleep(0.2)
    deadline = time.monotonic() + 60
    while True:
        # A record after segment.ms rolls the active segment, so the older ones become cleanable.
        feed.produce(broker.bootstrap, topic, [(b"roll", b"")])
        latest = {}
        records = _read_all(broker.bootstrap, topic, 1)
        for m in records:
            latest[m.key()] = m.value()
        if sum(1 for m in records if m.key() != b"roll") == 5:
            break
        assert time.monotonic() < deadline, f"not compacted within 60 s: {len(records)} records"
        time.sleep(1)
    assert {k: v for k, v in latest.items() if k != b"roll"} == {b"k%d" % k: b"v2" for k in range(5)}


def test_stop_leaves_no_process_and_no_data_and_a_killed_runs_folder_is_its_owners(tmp_path):
    log = tmp_path / "kafka.log"
    with EmbeddedBroker(log=log) as b:
        pid, data = b.pid, b.data_dir
        assert pid and data and data.is_dir()
        # A run killed here leaves the folder: marked as this process's, the next session's sweep
        # (harness/orphans.py) removes it.
        assert (data / orphans.OWNER_FILE).read_text() == (os.environ.get(orphans.OWNER_ENV) or str(os.getpid()))
        create_topics(b.bootstrap, {"t": 1})
        feed.produce(b.bootstrap, "t", [(b"k", b"v")])
        assert (data / "data" / "t-0").is_dir()
    assert not os.path.exists(f"/proc/{pid}")
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # nothing left in its process group either
    assert not data.exists()
    text = log.read_text()
    assert "Kafka Server started" in text or "started (kafka.server" in text, text[-2000:]


def test_a_partitions_transactional_producer_lives_across_batches(broker):
    """PartitionTransactionsBrokerTest (JUnit) on this broker: the next batch goes on with the
    partition's kept producer; another writer of its transactional id fences it, and then nothing
    of it commits; two tasks of a partition at once; each record committed once (docs/adr/0029)."""
    res, reports = junit.run("-Dtest=PartitionTransactionsBrokerTest",
                             env={"SCORESTREAM_TEST_BOOTSTRAP": broker.bootstrap})
    assert res.returncode == 0, (res.stdout + res.stderr)[-6000:]
    r = reports["PartitionTransactionsBroker"]
    assert (int(r["tests"]), int(r["skipped"]), int(r["failures"]) + int(r["errors"])) == (5, 0, 0), r
