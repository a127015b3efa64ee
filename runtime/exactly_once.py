"""``delivery: exactlyOnce``: the JVM's transactional writers for a job (docs/adr/0029).

Each task writes an input partition's predictions and dead letters in a Kafka transaction that
also commits the data group's offset past them (``dev.scorestream.jvm.PartitionTransactions``):
per micro-batch through ``TransactionalSink`` (a ``foreachPartition`` in the batch's callback), per
real-time batch through ``TransactionalWriter`` (the query's foreach sink). The group's offsets
are then the transactions' to commit: the driver commits none of its own.
"""

from __future__ import annotations

from scorestream import naming
from scorestream.config import JobConfig
from scorestream.runtime import kafka_options


def transactions(spark, config: JobConfig):
    """The job's ``PartitionTransactions``, or None for at-least-once delivery."""
    if not config.exactly_once:
        return None
    jvm = spark.sparkContext._jvm
    k = config.kafka
    return jvm.dev.scorestream.jvm.PartitionTransactions(
        _java_map(jvm, kafka_options.java_client_properties(k)),
        _java_map(jvm, kafka_options.producer_properties(k)),
        naming.transactional_prefix(config.namespace, config.name, k.data_topic),
        config.data_group,
        k.data_topic,
    )


def transactional_sink(spark, config: JobConfig):
    """The micro-batch writer (``TransactionalSink``), or None for at-least-once delivery."""
    txns = transactions(spark, config)
    return None if txns is None else spark.sparkContext._jvm.dev.scorestream.jvm.TransactionalSink(txns)


def transactional_writer(spark, config: JobConfig):
    """The real-time query's foreach writer (``TransactionalWriter``), or None for at-least-once delivery."""
    txns = transactions(spark, config)
    return None if txns is None else spark.sparkContext._jvm.dev.scorestream.jvm.TransactionalWriter(txns)


def _java_map(jvm, d: dict[str, str]):
    m = jvm.java.util.HashMap()
    for key, value in d.items():
        m.put(key, value)
    return m
