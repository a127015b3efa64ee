"""``delivery: exactlyOnce``: the JVM's transactional sink for a job (docs/adr/0026).

Each task writes an input partition's predictions and dead letters in a Kafka transaction that
also commits the data group's offset past them (``dev.scorestream.jvm.TransactionalSink``). The
group's offsets are then the transactions' to commit: the driver commits none of its own.
"""

from __future__ import annotations

from scorestream import naming
from scorestream.config import JobConfig
from scorestream.runtime import kafka_options


def transactional_sink(spark, config: JobConfig):
    """The job's ``TransactionalSink``, or None for at-least-once delivery."""
    if not config.exactly_once:
        return None
    jvm = spark.sparkContext._jvm
    k = config.kafka
    return jvm.dev.scorestream.jvm.TransactionalSink(
        _java_map(jvm, kafka_options.java_client_properties(k)),
        _java_map(jvm, kafka_options.producer_properties(k)),
        naming.transactional_prefix(config.namespace, config.name, k.data_topic),
        config.data_group,
        k.data_topic,
    )


def _java_map(jvm, d: dict[str, str]):
    m = jvm.java.util.HashMap()
    for key, value in d.items():
        m.put(key, value)
    return m
