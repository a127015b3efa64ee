"""One micro-batch as a plan: Kafka records in, predictions and dead letters out, through the JVM.

The JVM scorer (``dev.scorestream.jvm.Scorer``) decodes, routes and scores each record and writes
up the result: the output topic and the prediction record, or the dead-letter topic and the
headers that say why. Spark's own Kafka sink then writes each row to the topic its ``topic``
column names. No record leaves the JVM, and the job starts no Python worker: PMML is scored by
PMML4S, TensorFlow by TensorFlow's Java API (ADR 33). Rows of a TensorFlow model come back from
the scorer ``pending`` with their features, and a stage of the same plan (``Scorer.tensorFlow``)
scores them thousands of rows a call and writes them up, in the rows' order.

The statistics are counted by the scorer into an accumulator while it scores (no second pass,
no per-row aggregate expressions) and come back to the driver when the write returns; so are
each model version's drift histograms (``DriftCounts``), kept for the whole run.
"""

from __future__ import annotations

import json

from pydantic import TypeAdapter
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from scorestream.api.job_http import ModelDrift
from scorestream.api.scoring import BatchCounts, RoutingTable, latency_bounds_nanos

_DRIFT = TypeAdapter(dict[str, ModelDrift])


class BatchScorer:
    """The JVM scorer of one job: each batch is scored with that batch's routing table and counted
    into the job's accumulator, reset per batch (batches run one at a time)."""

    def __init__(self, spark, sink_options: dict[str, str], transactional=None):
        """``transactional``: the ``TransactionalSink`` of ``delivery: exactlyOnce``
        (``runtime.exactly_once``), which then writes every batch instead of Spark's Kafka sink."""
        self.sink_options = sink_options
        self.transactional = transactional
        self._jvm = jvm = spark.sparkContext._jvm
        self._scorer = jvm.dev.scorestream.jvm.Scorer
        # The result schema as the JVM defines it (Scorer.RESULT_DDL is the contract).
        self.result_ddl = self._scorer.resultDdl()
        self._counts = jvm.dev.scorestream.jvm.BatchCounts(latency_bounds_nanos())
        spark.sparkContext._jsc.sc().register(self._counts, "scorestream.batch")
        # Never reset: each model version's histograms cover everything it scored in this run.
        self._drift = jvm.dev.scorestream.jvm.DriftCounts()
        spark.sparkContext._jsc.sc().register(self._drift, "scorestream.drift")

    def score(self, batch: DataFrame, batch_id: int, table: RoutingTable) -> DataFrame:
        """The batch's records with the scorer's result ``r`` (``Scorer.RESULT_DDL``), TensorFlow's
        rows scored too when the table has a TensorFlow model, counted into a fresh ``counts()``
        when an action runs. The JVM builds the plan (``Scorer.score``, ``Scorer.tensorFlow``)."""
        self._counts.reset()
        scorer = self._scorer.forBatch(table.model_copy(update={"batchId": batch_id}).model_dump_json(),
                                       self._counts).withDrift(self._drift)
        scored = scorer.score(batch._jdf)
        if has_tensorflow(table):
            scored = scorer.tensorFlow(scored)
        return DataFrame(scored, batch.sparkSession)

    def counts(self) -> BatchCounts:
        return BatchCounts.model_validate_json(self._counts.value())

    def run(self, batch: DataFrame, batch_id: int, table: RoutingTable) -> BatchCounts:
        """Score and write one micro-batch."""
        self._write(self.score(batch, batch_id, table), batch_id)
        return self.counts()

    def live(self, source: DataFrame, table: RoutingTable, with_source: bool = False):
        """A real-time query's rows for Spark's Kafka sink, and the ``LiveTable`` their scorer takes
        each batch's routing table from (``runtime.realtime``). Rows of a draining batch are
        dropped here: the scorer leaves their result empty. ``with_source``: with the source's
        partition and offset, for the exactly-once writer (``Scorer.sinkRowsWithSource``)."""
        holder = self._jvm.dev.scorestream.jvm.LiveTable(table.model_dump_json())
        scorer = self._scorer.live(holder, self._counts).withDrift(self._drift)
        scored = DataFrame(scorer.score(source._jdf), source.sparkSession)
        return self.sink_rows(scored, with_source).where(F.col("topic").isNotNull()), holder

    def drift(self) -> dict[str, ModelDrift]:
        """Per model version (``name:version``) with a baseline: its drift so far (``DriftCounts``)."""
        return _DRIFT.validate_json(self._drift.value())

    def drift_baseline(self, route: str, fmt: str, path: str, inputs: list[str], records: list[dict]) -> int:
        """The baseline of ``route``'s drift: the sample ``records`` scored in the JVM by the model
        at ``path`` (``fmt``: pmml or tensorflow), as serving scores them. Returns how many
        records it holds."""
        lines = "\n".join(json.dumps(r, allow_nan=False) for r in records)
        return self._drift.baseline(route, fmt, path, list(inputs), lines)  # pyspark's gateway converts the list

    def drain_counts(self) -> BatchCounts:
        """What the scorer counted since the last drain (a real-time query's batches)."""
        return BatchCounts.model_validate_json(self._counts.drain())

    def sink_rows(self, scored: DataFrame, with_source: bool = False) -> DataFrame:
        """What Spark's Kafka sink writes of scored rows (``Scorer.sinkRows``): topic, key, value,
        headers; ``with_source``: and the source's partition and offset (``Scorer.sinkRowsWithSource``)."""
        limit = self._jvm.java.util.HashMap()
        for k, v in self.sink_options.items():
            limit.put(k, v)
        rows = self._scorer.sinkRowsWithSource if with_source else self._scorer.sinkRows
        return DataFrame(rows(scored._jdf, self._scorer.maxRequestBytes(limit)), scored.sparkSession)

    def _write(self, scored: DataFrame, batch_id: int) -> None:
        """Spark's Kafka sink, each row to the topic the scorer chose (``Scorer.write``); with
        exactly-once, the transactional sink, one transaction per input partition of batch ``batch_id``."""
        if self.transactional is None:
            self._scorer.write(scored._jdf, self.sink_options)
            return
        self.transactional.write(self.sink_rows(scored, with_source=True)._jdf, batch_id)


def has_tensorflow(table: RoutingTable) -> bool:
    """Some model of the table, candidates included, is a TensorFlow model."""
    return any(r is not None and r.format == "tensorflow"
               for top in table.routes.values() for r in (top, top.candidate))
