"""Kafka for Spark as a Python Data Source, on confluent-kafka (librdkafka).

Spark's own Kafka connector (spark-sql-kafka and kafka-clients) is not in the pyspark
distribution, and nothing on PyPI carries it. This source mirrors its options and columns
(``key, value, topic, partition, offset, timestamp, timestampType[, headers]``; offsets as
``{"topic": {"partition": offset}}``), so an image that has the built-in connector can switch
back by changing the format name.

Reading: one Spark partition per Kafka partition and micro-batch; each task assigns and seeks,
reads exactly ``[from, until)`` and hands Arrow record batches to Spark. Writing: an Arrow
writer that produces each row to its ``topic`` column (or the ``topic`` option), fails the task
if any delivery fails, so a batch is either delivered or retried, never half-acknowledged.

Clients are cached per Python worker (Spark reuses workers), so a micro-batch does not pay for
a new connection.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

FORMAT = "scorestream_kafka"

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_BASE_SCHEMA = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
    "timestamp TIMESTAMP, timestampType INT"
)
_HEADERS_SCHEMA = ", headers ARRAY<STRUCT<key: STRING, value: BINARY>>"


def client_config(options: dict[str, str], **extra: Any) -> dict[str, Any]:
    """librdkafka settings from ``kafka.*`` options, as Spark's connector takes them."""
    conf: dict[str, Any] = {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}
    if "bootstrap.servers" not in conf:
        raise ValueError("option kafka.bootstrap.servers is required")
    conf.update(extra)
    return conf


_clients: dict[tuple, Any] = {}
_clients_lock = threading.Lock()


def _cached(kind: str, conf: dict[str, Any]):
    from confluent_kafka import Consumer, Producer

    key = (kind, tuple(sorted((k, str(v)) for k, v in conf.items())))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = Consumer(conf) if kind == "consumer" else Producer(conf)
            _clients[key] = client
        return client


def _consumer(options: dict[str, str], group: str | None = None):
    return _cached(
        "consumer",
        client_config(
            options,
            **{
                # Reads assign partitions and never join or commit: the group only labels them.
                "group.id": group or options.get("groupidprefix", "scorestream-reader"),
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
                "auto.offset.reset": "error",
            },
        ),
    )


def close_clients() -> None:
    """Close this process's cached clients (tests, and a driver that stops its session)."""
    with _clients_lock:
        for client in _clients.values():
            if hasattr(client, "close"):
                client.close()
            else:
                client.flush(10)
        _clients.clear()


class KafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return _BASE_SCHEMA + (_HEADERS_SCHEMA if _flag(_options(self.options), "includeHeaders") else "")

    def streamReader(self, schema: StructType) -> "KafkaStreamReader":
        return KafkaStreamReader(_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> "KafkaArrowWriter":
        return KafkaArrowWriter(_options(self.options), [f.name for f in schema.fields])


def _options(options) -> dict[str, str]:
    """Spark treats option names case-insensitively and may hand them over lower-cased."""
    return {k.lower(): str(v) for k, v in options.items()}


def _flag(options: dict[str, str], name: str) -> bool:
    return options.get(name.lower(), "false").lower() == "true"


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]):
        self.options = options
        topics = [t.strip() for t in options.get("subscribe", "").split(",") if t.strip()]
        if not topics:
            raise ValueError("option subscribe is required (comma-separated topic names)")
        self.topics = topics
        self.max_per_trigger = int(options["maxoffsetspertrigger"]) if options.get("maxoffsetspertrigger") else None
        self.poll_timeout = float(options.get("polltimeoutms", "120000")) / 1000
        self.include_headers = _flag(options, "includeHeaders")

    # -- driver side ---------------------------------------------------------------------------

    def _partitions(self, consumer) -> dict[str, list[int]]:
        out = {}
        for topic in self.topics:
            meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                why = meta.error if meta is not None and meta.error else "no partitions"
                raise RuntimeError(f"Kafka topic {topic!r} is not available: {why}")
            out[topic] = sorted(meta.partitions)
        return out

    def _watermarks(self, which: int) -> dict[str, dict[str, int]]:
        from confluent_kafka import TopicPartition

        consumer = _consumer(self.options)
        out: dict[str, dict[str, int]] = {}
        for topic, parts in self._partitions(consumer).items():
            out[topic] = {}
            for p in parts:
                marks = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)
                out[topic][str(p)] = marks[which]
        return out

    def initialOffset(self) -> dict:
        spec = self.options.get("startingoffsets", "latest").strip()
        if spec == "earliest":
            return self._watermarks(0)
        if spec == "latest":
            return self._watermarks(1)
        if spec == "group":
            return self._group_offsets()
        try:
            given = json.loads(spec)
        except json.JSONDecodeError:
            raise ValueError(f"startingOffsets must be earliest, latest, group or JSON, not {spec!r}") from None
        earliest = self._watermarks(0)
        # -2 means earliest and -1 latest, as in Spark's connector.
        latest = self._watermarks(1) if "-1" in spec else {}
        return {
            t: {p: (earliest[t][p] if o == -2 else latest[t][p] if o == -1 else int(o)) for p, o in ps.items()}
            for t, ps in given.items()
        }

    def _group_offsets(self) -> dict:
        """The group's committed offsets; partitions it never committed start at the earliest."""
        from confluent_kafka import TopicPartition

        group = self.options.get("groupid")
        if not group:
            raise ValueError("startingOffsets=group needs option groupId")
        earliest = self._watermarks(0)
        consumer = _consumer(self.options, group=group)
        tps = [TopicPartition(t, int(p)) for t, ps in earliest.items() for p in ps]
        out = {t: dict(ps) for t, ps in earliest.items()}
        for tp in consumer.committed(tps, timeout=30):
            if tp.error is None and tp.offset >= 0:
                out[tp.topic][str(tp.partition)] = max(tp.offset, earliest[tp.topic][str(tp.partition)])
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        latest = self._watermarks(1)
        self._latest = latest
        # New partitions (and topics) start at their beginning.
        start = {t: {p: start.get(t, {}).get(p, 0) for p in ps} for t, ps in latest.items()}
        if not isinstance(limit, ReadMaxRows):
            return latest
        avail = {(t, p): max(0, latest[t][p] - start[t][p]) for t in latest for p in latest[t]}
        total = sum(avail.values())
        if total <= limit.max_rows:
            return latest
        # Split the limit across partitions in proportion to what each has waiting.
        end = {t: dict(ps) for t, ps in start.items()}
        budget = limit.max_rows
        for (t, p), n in sorted(avail.items(), key=lambda kv: -kv[1]):
            take = min(n, max(1 if n else 0, limit.max_rows * n // total), budget)
            end[t][p] += take
            budget -= take
        return end

    def reportLatestOffset(self) -> dict | None:
        return getattr(self, "_latest", None)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        parts = []
        for topic, ps in end.items():
            for p, until in ps.items():
                frm = start.get(topic, {}).get(p, 0)
                if until > frm:
                    parts.append(InputPartition((topic, int(p), frm, until)))
        return parts

    def commit(self, end: dict) -> None:
        pass  # the job commits the data group's offsets after its sink succeeds

    # -- executor side -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from confluent_kafka import KafkaError, TopicPartition

        topic, p, frm, until = partition.value
        consumer = _consumer(self.options)
        consumer.assign([TopicPartition(topic, p, frm)])
        try:
            pos = frm
            deadline = time.monotonic() + self.poll_timeout
            while pos < until:
                msgs = consumer.consume(num_messages=min(until - pos, 20000), timeout=1.0)
                if not msgs:
                    # Compaction or aborted transactions leave gaps: the position still moves.
                    tp = consumer.position([TopicPartition(topic, p)])[0]
                    if tp.offset >= until:
                        break
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"{topic}/{p}: no record at offset {pos} (reading [{frm}, {until})) for "
                            f"{self.poll_timeout:.0f}s: were records deleted by retention?"
                        )
                    continue
                deadline = time.monotonic() + self.poll_timeout
                keys, values, offsets, stamps, stypes, headers = [], [], [], [], [], []
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise RuntimeError(f"{topic}/{p}: {err}")
                    off = m.offset()
                    if off >= until:
                        break
                    keys.append(m.key())
                    values.append(m.value())
                    offsets.append(off)
                    ts_type, ts = m.timestamp()
                    stamps.append(ts * 1000 if ts >= 0 else None)
                    stypes.append(ts_type)
                    if self.include_headers:
                        h = m.headers()
                        headers.append([{"key": k, "value": v} for k, v in h] if h else None)
                if offsets:
                    pos = offsets[-1] + 1
                    yield self._batch(topic, p, keys, values, offsets, stamps, stypes, headers)
                else:
                    pos = until  # only messages at or past `until` came back
        finally:
            consumer.unassign()

    def _batch(self, topic, p, keys, values, offsets, stamps, stypes, headers) -> pa.RecordBatch:
        n = len(offsets)
        arrays = [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([p] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(stamps, pa.timestamp("us", tz="UTC")),
            pa.array(stypes, pa.int32()),
        ]
        names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
        if self.include_headers:
            arrays.append(pa.array(headers, HEADERS_TYPE))
            names.append("headers")
        return pa.RecordBatch.from_arrays(arrays, names=names)


_WRITE_COLUMNS = ("value", "key", "topic", "headers", "partition")


def produce_batches(options: dict[str, str], batches: Iterator[pa.RecordBatch]) -> int:
    """Produce every row (``value`` and optional ``key, topic, headers, partition``); raise unless all
    were acknowledged, so a failed task is retried rather than half-delivered."""
    options = _options(options)
    conf = client_config(options, **{"linger.ms": options.get("kafka.linger.ms", 5), "enable.idempotence": True})
    producer = _cached("producer", conf)
    default_topic = options.get("topic")
    flush_timeout = float(options.get("flushtimeoutms", "120000")) / 1000
    errors: list[str] = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(str(err))

    count = 0
    produce = producer.produce
    for batch in batches:
        cols = {name: batch.column(name).to_pylist() for name in _WRITE_COLUMNS if name in batch.schema.names}
        values = cols["value"]
        keys = cols.get("key") or [None] * len(values)
        topics = cols.get("topic") or [default_topic] * len(values)
        headers = cols.get("headers") or [None] * len(values)
        parts = cols.get("partition")
        for i, value in enumerate(values):
            kwargs = {"key": keys[i], "on_delivery": delivered}
            if headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            if parts is not None and parts[i] is not None:
                kwargs["partition"] = parts[i]
            topic = topics[i] or default_topic
            while True:
                try:
                    produce(topic, value, **kwargs)
                    break
                except BufferError:  # local queue full: let deliveries drain
                    producer.poll(0.05)
            count += 1
        producer.poll(0)
        if errors:
            break
    left = producer.flush(flush_timeout)
    if errors:
        raise RuntimeError(f"{len(errors)} Kafka deliveries failed, first: {errors[0]}")
    if left:
        raise RuntimeError(f"{left} Kafka deliveries not confirmed within {flush_timeout:.0f}s")
    return count


class _Written(WriterCommitMessage):
    def __init__(self, count: int):
        self.count = count


class KafkaArrowWriter(DataSourceArrowWriter):
    """Rows need ``value``; ``key``, ``topic``, ``headers`` and ``partition`` are optional."""

    def __init__(self, options: dict[str, str], columns: list[str]):
        if "value" not in columns:
            raise ValueError("writing to Kafka needs a 'value' column")
        if "topic" not in columns and not options.get("topic"):
            raise ValueError("writing to Kafka needs a 'topic' column or option")
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Written:
        return _Written(produce_batches(self.options, iterator))
