"""The Kafka data source outside Spark: offsets, read limits, exact ranges, delivery failures."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import StructType

from scorestream.demo import feed
from scorestream.demo.broker import create_topics
from scorestream.runtime.kafka_source import KafkaDataSource, close_clients, KafkaStreamReader, produce_batches

pytestmark = pytest.mark.broker


@pytest.fixture(autouse=True, scope="module")
def _close_clients():
    yield
    close_clients()


@pytest.fixture
def topic(broker, request):
    name = f"src-{request.node.name[:30]}".replace("[", "-").replace("]", "")
    create_topics(broker.bootstrap, {name: 3})
    feed.produce(broker.bootstrap, name, [(str(i).encode(), f"v{i}".encode()) for i in range(300)], partitions=3)
    return name


def reader(broker, topic, **options) -> KafkaStreamReader:
    opts = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, **options}
    return KafkaDataSource(opts).streamReader(None)


def test_offsets_and_exact_ranges(broker, topic):
    r = reader(broker, topic, startingOffsets="earliest")
    start = r.initialOffset()
    assert start == {topic: {"0": 0, "1": 0, "2": 0}}
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"0": 100, "1": 100, "2": 100}}
    parts = r.partitions(start, end)
    assert sorted(p.value for p in parts) == [(topic, p, 0, 100) for p in range(3)]
    batch = pa.Table.from_batches(list(r.read(InputPartition((topic, 1, 10, 20)))))
    assert batch.column("offset").to_pylist() == list(range(10, 20))
    assert batch.column("partition").to_pylist() == [1] * 10
    assert batch.schema.names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert r.partitions(end, end) == []


def test_read_limit_is_respected_and_spread(broker, topic):
    r = reader(broker, topic, startingOffsets="earliest", maxOffsetsPerTrigger="90")
    assert isinstance(r.getDefaultReadLimit(), ReadMaxRows)
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    taken = {p: o for p, o in end[topic].items()}
    assert sum(taken.values()) == 90 and all(v == 30 for v in taken.values())
    # The engine may ask for everything regardless of the option (Trigger.AvailableNow).
    assert r.latestOffset(start, ReadAllAvailable())[topic] == {"0": 100, "1": 100, "2": 100}


def test_starting_offsets_latest_json_and_group(broker, topic):
    assert reader(broker, topic, startingOffsets="latest").initialOffset() == {topic: {"0": 100, "1": 100, "2": 100}}
    given = reader(broker, topic, startingOffsets='{"%s": {"0": 5, "1": -2, "2": -1}}' % topic).initialOffset()
    assert given == {topic: {"0": 5, "1": 0, "2": 100}}
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}"})
    c.commit(offsets=[TopicPartition(topic, 0, 42)], asynchronous=False)
    c.close()
    group = reader(broker, topic, startingOffsets="group", groupId=f"g-{topic}").initialOffset()
    assert group == {topic: {"0": 42, "1": 0, "2": 0}}, "uncommitted partitions start at the earliest"


def test_missing_topic_is_reported(broker):
    with pytest.raises(RuntimeError, match="not available"):
        reader(broker, "no-such-topic-xyz", startingOffsets="earliest").initialOffset()


def test_options_are_required():
    with pytest.raises(ValueError, match="subscribe"):
        KafkaDataSource({"kafka.bootstrap.servers": "x:1"}).streamReader(None)
    with pytest.raises(ValueError, match="value"):
        KafkaDataSource({"topic": "t"}).writer(StructType([]), False)


def test_undeliverable_batch_fails_the_task():
    batch = pa.RecordBatch.from_pydict({"value": [b"x"], "topic": ["t"]})
    with pytest.raises(RuntimeError, match="not confirmed|failed"):
        # Nothing listens there: deliveries time out and the task must fail, not report success.
        produce_batches({"kafka.bootstrap.servers": "127.0.0.1:9", "flushTimeoutMs": "3000",
                         "kafka.message.timeout.ms": "2000"}, iter([batch]))
