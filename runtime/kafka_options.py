"""Spark's Kafka connector options from the job's client settings.

The job's settings (``kafka.properties`` and the Secret's file) use librdkafka's names, because the
driver's own clients (models follower, offset commits) are confluent-kafka. Spark's connector runs
the Java client, which names most settings the same way; the few that differ are translated here,
and a librdkafka-only setting with no Java meaning is refused at start rather than ignored.
"""

from __future__ import annotations

import json

from scorestream.config import KafkaConfig
from scorestream.kafka_auth import java_properties

# librdkafka settings that mean nothing to the Java client and change nothing it does.
_LIBRDKAFKA_ONLY = {"api.version.request", "broker.version.fallback", "enable.ssl.certificate.verification",
                    "log_level", "debug", "statistics.interval.ms", "topic.metadata.refresh.interval.ms"}
# The same meaning under another name, or a file the Java client reads in another setting.
_UNSUPPORTED = {
    "ssl.certificate.location": "use ssl.keystore.location (a PKCS12/JKS keystore) for client certificates",
    "ssl.key.location": "use ssl.keystore.location (a PKCS12/JKS keystore) for client certificates",
    "ssl.key.password": "use ssl.keystore.password / ssl.key.password with a keystore",
    "sasl.kerberos.keytab": "give Spark's connector a sasl.jaas.config for Kerberos",
}
_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# The sink's producer: fewer, larger requests than the Java client's defaults (16 KiB, no linger)
# move several times more records per second on a loaded machine; a user setting wins.
_PRODUCER_DEFAULTS = {"linger.ms": "5", "batch.size": str(256 * 1024)}
# The source's consumers: Spark's connector asks the broker for the partition's offset range after
# each poll, so the Java client's 500 records per poll cost two extra round trips per 500 records;
# larger polls read a micro-batch in a few requests. And the client keeps a fetch in flight past
# what it returned: at the end of the log (where every batch of a stream that keeps up ends) the
# broker holds that fetch for fetch.max.wait.ms, and the offset-range request queued behind it on
# the same connection waits as long: 500 ms by default, added to the batch. A user setting wins.
_CONSUMER_DEFAULTS = {
    "max.poll.records": "10000",
    "max.partition.fetch.bytes": str(4 * 1024 * 1024),
    "fetch.max.wait.ms": "20",
}


def java_client_properties(kafka: KafkaConfig) -> dict[str, str]:
    """The Java client's settings for this job: the Secret file's secrets included (held in memory
    only); spec.kafka.authentication's only as references to the files mounted where the client runs."""
    props = dict(kafka.settings_properties())
    out: dict[str, str] = {}
    username, password = props.pop("sasl.username", None), props.pop("sasl.password", None)
    for key, value in props.items():
        if key in _LIBRDKAFKA_ONLY:
            continue
        if key in _UNSUPPORTED:
            raise ValueError(f"kafka setting {key} has no equivalent in Spark's Kafka connector: {_UNSUPPORTED[key]}")
        if key == "ssl.ca.location":
            out["ssl.truststore.location"] = value
            out["ssl.truststore.type"] = "PEM"
            continue
        out[key] = value
    if username is not None or password is not None:
        mechanism = props.get("sasl.mechanism", "PLAIN").upper()
        if mechanism not in _JAAS_MODULES:
            raise ValueError(f"sasl.username/sasl.password need sasl.mechanism PLAIN or SCRAM-SHA-*, not {mechanism}")
        if "sasl.jaas.config" not in out:
            out["sasl.jaas.config"] = (
                f"{_JAAS_MODULES[mechanism]} required username={json.dumps(username or '')} "
                f"password={json.dumps(password or '')};"
            )
    if kafka.credentials is not None:
        out.update(java_properties(kafka.credentials))
    return out


def source_options(kafka: KafkaConfig, group_prefix: str, read_committed: bool = False) -> dict[str, str]:
    """Options of Spark's Kafka source, bar where to start. ``read_committed``: records of aborted
    transactions in the data topic are never scored (``delivery: exactlyOnce``)."""
    props = {**_CONSUMER_DEFAULTS, **java_client_properties(kafka)}
    if read_committed:
        props["isolation.level"] = "read_committed"
    opts = {f"kafka.{k}": v for k, v in props.items()}
    opts.update({"subscribe": kafka.data_topic, "includeHeaders": "true", "groupIdPrefix": group_prefix})
    if kafka.max_offsets_per_trigger:
        opts["maxOffsetsPerTrigger"] = str(kafka.max_offsets_per_trigger)
    return opts


def producer_properties(kafka: KafkaConfig) -> dict[str, str]:
    """The sink producer's Java settings: the job's, over the throughput defaults."""
    return {**_PRODUCER_DEFAULTS, **java_client_properties(kafka)}


def sink_options(kafka: KafkaConfig) -> dict[str, str]:
    """Options of Spark's Kafka sink (the topic comes from each row)."""
    return {f"kafka.{k}": v for k, v in producer_properties(kafka).items()}


def starting_offsets(kafka: KafkaConfig, group: str, timeout: float = 30.0) -> str:
    """Where a new query starts (a checkpoint, once there is one, overrides this).

    ``group``: the data group's committed offsets, so a job with a new checkpoint (a stateless
    upgrade) goes on where the last one stopped; a partition never committed, or committed below
    what the topic still holds, starts at its earliest offset (-2 in Spark's notation).
    """
    if kafka.starting_offsets != "group":
        return kafka.starting_offsets
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka.client_properties(), "group.id": group, "enable.auto.commit": False})
    try:
        topic = consumer.list_topics(kafka.data_topic, timeout=timeout).topics.get(kafka.data_topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise RuntimeError(f"data topic {kafka.data_topic} not found")
        committed = consumer.committed([TopicPartition(kafka.data_topic, p) for p in topic.partitions], timeout=timeout)
        offsets = {}
        for tp in committed:
            low, _ = consumer.get_watermark_offsets(TopicPartition(kafka.data_topic, tp.partition), timeout=timeout)
            offsets[str(tp.partition)] = max(tp.offset, low) if tp.offset >= 0 else -2
        return json.dumps({kafka.data_topic: offsets})
    finally:
        consumer.close()
