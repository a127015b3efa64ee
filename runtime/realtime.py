"""A serving job's query in Spark's real-time mode (``spark.trigger: realTime``).

A micro-batch query fixes the routing table, counts the statistics and refuses a batch after a
stop in its ``foreachBatch`` callback. A real-time query has no such callback: one long task per
partition reads, scores and writes through each batch, and a batch is only how often progress is
checkpointed. The job's promises rest on three other mechanisms here (README, design note 25):

- **the table**: the driver sets a ``LiveTable`` when the models change, and each batch's tasks
  take the table current when they are serialized, after the batch before has committed: a new
  model takes over at a batch's first offset and no batch is scored by two versions;
- **the statistics**: the scorer's accumulator is drained as each batch's progress is reported,
  and its counts go to the models (by ``name:version``) of the tables set since the last drain;
- **a stop**: the table drains, so the next batch writes nothing, and the query stops once that
  batch has begun; the restart reads again the batch that wrote nothing, and nothing is written
  twice.

With ``delivery: exactlyOnce`` the rows go to ``TransactionalWriter`` instead of Spark's Kafka
sink: each batch's task writes its partition in one Kafka transaction, committed with the data
group's offset when the batch ends, so ``read_committed`` readers see predictions a batch at a
time, and a batch read again after a kill writes only what no transaction committed.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from scorestream.api.scoring import RoutingTable
from scorestream.config import JobConfig
from scorestream.runtime import kafka_options, warm_up
from scorestream.runtime.models import ModelRegistry, Snapshot
from scorestream.runtime.pipeline import BatchScorer
from scorestream.runtime.stats import ServingStats

log = logging.getLogger("scorestream.runtime")


class RealTimeQuery:
    def __init__(self, config: JobConfig, scorer: BatchScorer, registry: ModelRegistry, stats: ServingStats,
                 table_of: Callable[[Snapshot], RoutingTable]):
        self.config = config
        self.scorer = scorer
        self.registry = registry
        self.stats = stats
        self.table_of = table_of
        self.holder = None  # dev.scorestream.jvm.LiveTable
        # The snapshots whose tables batches may have taken since the counts were last drained.
        self._unaccounted: list[Snapshot] = []
        self._generation: int | None = None
        self._counted_batch = -1
        self.short_of_slots: str | None = None  # why some partitions go unread, if they do
        self.warming = False

    def wait_for_slots(self, slots: Callable[[], int], timeout: float, stopping) -> int:
        """A real-time query runs a task per data-topic partition for the whole batch: with fewer
        task slots, the partitions left over are never read (Spark says nothing; their lag grows).
        Wait for the executors to register, then refuse to start short of slots. Returns the
        partitions."""
        partitions = data_partitions(self.config)
        deadline = time.monotonic() + timeout
        while slots() < partitions and time.monotonic() < deadline and not stopping.is_set():
            stopping.wait(1.0)
        if slots() < partitions and not stopping.is_set():
            raise RuntimeError(too_few_slots(partitions, slots()))
        return partitions

    def check_slots(self, partitions: int, slots: int) -> None:
        """After each batch: partitions added to the data topic, or executors lost, leave some
        partitions unread; the job says so (not ready) until there are slots again."""
        self.short_of_slots = too_few_slots(partitions, slots) if slots < partitions else None
        if self.short_of_slots:
            log.error("%s", self.short_of_slots)

    def warm_up(self, source, partitions: int, stopping) -> None:
        """Before ``start``: the query's own plan run over generated records, writing nothing,
        ``spark.warmUpBatches`` times (``runtime.warm_up``). Not ready meanwhile."""
        def rows(stand_in):
            rows, holder = self.scorer.live(stand_in, self.table_of(self.registry.snapshot()))
            holder.drain()  # every generated record dropped unread: nothing scored or written
            return rows

        self.warming = True
        try:
            warm_up.warm_up(source, rows, self.config.kafka.data_topic, partitions,
                            self.config.spark.warm_up_batches, stopping, WARM_UP_TIMEOUT_SECONDS)
        finally:
            self.warming = False
            self.scorer.drain_counts()  # drained rows count nothing; a fault's partial counts go too

    def start(self, source, transactional=None):
        """The query: the data topic's records, scored, to Spark's Kafka sink; with
        ``transactional`` (``delivery: exactlyOnce``, ``runtime.exactly_once.transactional_writer``),
        to that foreach writer instead: a Kafka transaction per partition and batch."""
        c = self.config
        snap = self.registry.snapshot()
        rows, self.holder = self.scorer.live(source, self.table_of(snap), with_source=transactional is not None)
        self._generation, self._unaccounted = snap.generation, [snap]
        writer = rows.writeStream.queryName(f"scorestream-{c.name}")
        if transactional is None:
            writer = writer.format("kafka").options(**kafka_options.sink_options(c.kafka))
        else:
            # A JVM ForeachWriter, set as pyspark sets its own Python one (DataStreamWriter.foreach).
            writer._jwrite.foreach(transactional)
        return (
            writer
            .outputMode("update")  # the only mode a real-time query takes
            .option("checkpointLocation", c.checkpoint_location)
            .trigger(realTime=f"{round(c.spark.trigger_seconds() * 1000)} milliseconds")
            .start()
        )

    def follow_models(self) -> None:
        """Hand the next batch the models serving now."""
        snap = self.registry.snapshot()
        if snap.generation == self._generation:
            return
        self.holder.set(self.table_of(snap).model_dump_json())
        self._generation = snap.generation
        self._unaccounted.append(snap)
        log.info("models of generation %d: from the next batch on", snap.generation)

    def count(self, batch_id: int) -> None:
        """After a batch's progress (once per batch): what its tasks counted, into the serving
        statistics."""
        if batch_id <= self._counted_batch:
            return
        self._counted_batch = batch_id
        counts = self.scorer.drain_counts()
        tables, self._unaccounted = self._unaccounted, self._unaccounted[-1:]
        if counts.in_:
            # A real-time batch runs its whole interval whatever it reads: no busy time to report.
            self.stats.add_batch(counts, tables, 0.0)

    def stop(self, query, timeout: float) -> None:
        """Stop with no batch written twice: drain, wait for a batch that writes nothing, stop."""
        self.holder.drain()
        deadline = time.monotonic() + timeout
        while query.isActive and not self.holder.drained() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not self.holder.drained() and query.isActive:
            log.warning("no batch began within %.0fs of the stop: the batch in flight is read again on restart",
                        timeout)
        query.stop()


# The most a warm-up may delay serving, whatever its batches take (a slow or busy cluster).
WARM_UP_TIMEOUT_SECONDS = 120.0


def too_few_slots(partitions: int, slots: int) -> str:
    return (f"trigger realTime needs a task slot per data-topic partition: {partitions} partitions, {slots} slots"
            f" (the executors' cores over spark.task.cpus, or local[N]); raise spec.replicas")


def data_partitions(config: JobConfig, timeout: float = 30.0) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({**config.kafka.client_properties(), "group.id": config.data_group})
    try:
        topic = consumer.list_topics(config.kafka.data_topic, timeout=timeout).topics[config.kafka.data_topic]
        if topic.error is not None:
            raise RuntimeError(f"data topic {config.kafka.data_topic}: {topic.error}")
        return len(topic.partitions)
    finally:
        consumer.close()
