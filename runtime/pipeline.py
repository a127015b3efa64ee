"""One micro-batch as a plan: Kafka records in, predictions and dead letters out, through the JVM.

The JVM scorer (``dev.scorestream.jvm.Scorer``) decodes, routes and scores each record and writes
up the result: the output topic and the prediction record, or the dead-letter topic and the
headers that say why. Spark's own Kafka sink then writes each row to the topic its ``topic``
column names. A PMML record never leaves the JVM, and a job that serves only PMML starts no
Python worker. Rows of a TensorFlow model come back from the scorer ``pending`` with their
features; only those rows cross to Python, in Arrow batches, and are scored there vectorised,
then written up by the same JVM code (``ss_finish``), in one Python worker per executor: each
worker holds TensorFlow and the model (~700 MB here), and while it scores, the JVM's side of
the task (reading, Arrow, writing) keeps another core busy: a worker per core added memory,
not speed (README, Figures). Where every model is TensorFlow, the other rows are dead letters:
the batch then crosses once, those rows untouched, instead of being kept and read twice.

The statistics are counted by the scorer into an accumulator while it scores (no second pass,
no per-row aggregate expressions) and come back to the driver when the write returns; so are
each model version's drift histograms (``DriftCounts``), kept for the whole run.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pydantic import TypeAdapter
from pyspark.sql import functions as F

from scorestream.api.job_http import ModelDrift
from scorestream.api.scoring import BatchCounts, RoutingTable, latency_bounds_nanos

_DRIFT = TypeAdapter(dict[str, ModelDrift])


class BatchScorer:
    """The JVM scorer of one job: each batch is scored with that batch's routing table and counted
    into the job's accumulator, reset per batch (batches run one at a time)."""

    def __init__(self, spark, sink_options: dict[str, str], executors: Callable[[], int] = lambda: 1,
                 transactional=None):
        """``executors``: how many executors run now (``ExecutorControl.running``), the most
        TensorFlow tasks, and so Python workers, a batch runs at once. ``transactional``: the
        ``TransactionalSink`` of ``delivery: exactlyOnce`` (``runtime.exactly_once``), which then
        writes every batch instead of Spark's Kafka sink."""
        self.sink_options = sink_options
        self.executors = executors
        self.transactional = transactional
        # Held while a batch scores TensorFlow in the Python workers. A model's admission takes it
        # too (verification.worker_admission): beside such a batch, it would start a second worker
        # per executor, and Spark's pool would then hand batches to both in turn, each holding
        # TensorFlow and the models. A PMML-only batch uses no worker and does not take it.
        self.python_workers = threading.Lock()
        self._jvm = jvm = spark.sparkContext._jvm
        self._scorer = jvm.dev.scorestream.jvm.Scorer
        self._batch = None  # this batch's JVM scorer (Scorer.forBatch): batches run one at a time
        # The result schema as the JVM defines it (Scorer.RESULT_DDL is the contract).
        self.result_ddl = self._scorer.resultDdl()
        self._counts = jvm.dev.scorestream.jvm.BatchCounts(latency_bounds_nanos())
        spark.sparkContext._jsc.sc().register(self._counts, "scorestream.batch")
        # Never reset: each model version's histograms cover everything it scored in this run.
        self._drift = jvm.dev.scorestream.jvm.DriftCounts()
        spark.sparkContext._jsc.sc().register(self._drift, "scorestream.drift")

    def score(self, batch: DataFrame, batch_id: int, table: RoutingTable) -> DataFrame:
        """The batch's records with the scorer's result ``r`` (``Scorer.RESULT_DDL``), counted
        into a fresh ``counts()`` when an action runs. The JVM builds the plan (``Scorer.score``)."""
        self._counts.reset()
        self._batch = self._scorer.forBatch(table.model_copy(update={"batchId": batch_id}).model_dump_json(),
                                            self._counts).withDrift(self._drift)
        return DataFrame(self._batch.score(batch._jdf), batch.sparkSession)

    def finish(self) -> Column:
        """``ss_finish`` of the batch last scored, over the columns ``Scorer.FINISH_COLUMNS`` names:
        rows TensorFlow scored, written up by the JVM as it writes up its own."""
        return Column(self._batch.finish())

    def counts(self) -> BatchCounts:
        return BatchCounts.model_validate_json(self._counts.value())

    def run(self, batch: DataFrame, batch_id: int, table: RoutingTable, tf_files: dict[str, str]) -> BatchCounts:
        """Score and write one micro-batch. ``tf_files``: the SparkFiles name of each TensorFlow
        route in the table (none: the whole batch stays in the JVM)."""
        scored = self.score(batch, batch_id, table)
        if not tf_files:
            self._write(scored)
            return self.counts()
        with self.python_workers:
            # Exactly-once commits each input partition's outputs and offset in one transaction:
            # the batch is written in one pass, every partition whole in one task.
            if only_tensorflow(table) or self.transactional is not None:
                # No PMML model: a row that is not pending is a dead letter already written up.
                # One pass through the Arrow stage, which leaves such rows as they are, scores the
                # batch without keeping it and reading it twice.
                self._write(self._tensorflow(scored, tf_files, carry_done=True))
            else:
                # Two writes read the scored batch: the scorer must run once per record (it
                # counts), so the batch is kept until both are done.
                scored = scored.persist(StorageLevel.MEMORY_AND_DISK)
                try:
                    self._write(scored.where(F.col("r.pending").isNull()))
                    self._write(self._tensorflow(scored.where(F.col("r.pending").isNotNull()), tf_files))
                finally:
                    scored.unpersist()
        return self.counts()

    def _tensorflow(self, scored: DataFrame, tf_files: dict[str, str], carry_done: bool = False) -> DataFrame:
        """Pending rows scored by TensorFlow in Arrow batches, then written up by the JVM
        (``ss_finish``); with ``carry_done``, rows already written up pass through unchanged."""
        r = F.col("r")
        done = [r.topic.alias("doneTopic"), r.value.alias("doneValue"), r.deadHeaders.alias("doneHeaders")]
        rows = scored.select(
            "key", "value", "headers", "topic", "partition", "offset", "ts",
            r.pending.dataType.alias("dataType"), r.pending.primary.alias("primary"), r.pending.shadow.alias("shadow"),
            *(done if carry_done else []),
        )
        scored_rows = rows.coalesce(max(1, self.executors())).mapInArrow(tensorflow_stage(tf_files), rows.schema)
        finish = self.finish()
        # The source's partition and offset go on: what an exactly-once write commits.
        if not carry_done:
            return scored_rows.select("key", "value", "headers", "partition", "offset", finish.alias("r"))
        # ss_finish runs once per pending row (it counts): computed in one column, then read.
        finished = scored_rows.select("key", "value", "headers", "partition", "offset",
                                      "doneTopic", "doneValue", "doneHeaders",
                                      F.when(F.col("dataType").isNotNull(), finish).alias("fin"))
        fin = F.col("fin")
        return finished.select("key", "value", "headers", "partition", "offset", F.struct(
            F.coalesce(fin.topic, F.col("doneTopic")).alias("topic"),
            F.coalesce(fin.value, F.col("doneValue")).alias("value"),
            F.coalesce(fin.deadHeaders, F.col("doneHeaders")).alias("deadHeaders"),
        ).alias("r"))

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

    def drift_baseline(self, route: str, pmml: str, inputs: list[str], records: list[dict]) -> int:
        """The baseline of ``route``'s drift: the sample ``records`` scored by the PMML model at
        ``pmml`` in the JVM, as serving scores them. Returns how many records it holds."""
        lines = "\n".join(json.dumps(r, allow_nan=False) for r in records)
        return self._drift.baseline(route, pmml, list(inputs), lines)  # pyspark's gateway converts the list

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

    def _write(self, scored: DataFrame) -> None:
        """Spark's Kafka sink, each row to the topic the scorer chose (``Scorer.write``); with
        exactly-once, the transactional sink, one transaction per input partition."""
        if self.transactional is None:
            self._scorer.write(scored._jdf, self.sink_options)
            return
        self.transactional.write(self.sink_rows(scored, with_source=True)._jdf)


SLOTS = ("primary", "shadow")


def only_tensorflow(table: RoutingTable) -> bool:
    """Every model of the table, candidates included, is a TensorFlow model."""
    routes = [r for top in table.routes.values() for r in (top, top.candidate) if r is not None]
    return bool(routes) and all(r.format == "tensorflow" for r in routes)


def tensorflow_stage(tf_files: dict[str, str]):
    """A mapInArrow function: fills in the TensorFlow slots of pending rows (route -> SparkFiles
    name of its model), one model call per route and Arrow batch."""

    def score(batches):
        from pyspark import SparkFiles

        from scorestream.runtime import tf_model

        def model_of(route: str):
            return tf_model.cached(SparkFiles.get(tf_files[route]))

        for batch in batches:
            columns = [batch.column(name) for name in batch.schema.names]
            for name in SLOTS:
                i = batch.schema.get_field_index(name)
                columns[i] = fill_slot(columns[i], model_of)
            yield pa.RecordBatch.from_arrays(columns, schema=batch.schema)

    return score


def fill_slot(slot: pa.StructArray, model_of) -> pa.StructArray:
    """Score the rows of ``slot`` that wait for TensorFlow; leave every other row as it is."""
    if slot.null_count == len(slot):
        return slot
    waiting = pc.fill_null(
        pc.and_(slot.field("tf"), pc.and_(slot.field("error").is_null(),
                                          pc.and_(slot.field("prediction").is_null(), slot.field("label").is_null()))),
        False,
    )
    waiting = pc.and_(waiting, slot.is_valid())
    if not pc.any(waiting).as_py():
        return slot
    routes = slot.field("route")
    filled: dict[str, list[pa.Array]] = {}
    taken: list[np.ndarray] = []
    for route in pc.unique(pc.filter(routes, waiting)).to_pylist():
        rows = np.flatnonzero(pc.and_(waiting, pc.equal(routes, route)).to_numpy(zero_copy_only=False))
        for field, values in _score_rows(slot, rows, route, model_of).items():
            filled.setdefault(field, []).append(values)
        taken.append(rows)
    # Each filled field: the old column followed by the new values, then put back in row order.
    position = np.arange(len(slot))
    rows = np.concatenate(taken)
    position[rows] = len(slot) + np.arange(len(rows))
    children = []
    for field in slot.type:
        old = slot.field(field.name)
        if field.name in filled:
            new = pa.concat_arrays([a.cast(field.type) for a in filled[field.name]])
            old = pa.concat_arrays([old, new]).take(pa.array(position))
        children.append(old)
    return pa.StructArray.from_arrays(children, fields=list(slot.type), mask=slot.is_null())


def _score_rows(slot: pa.StructArray, rows: np.ndarray, route: str, model_of) -> dict[str, pa.Array]:
    """One model call for these rows; a failure fails them all, each saying why."""
    from scorestream.runtime import tf_model

    n = len(rows)
    # A scored row's features are of no more use: not sent back, nor converted again for ss_finish.
    spent = {"features": pa.nulls(n, pa.list_(pa.float64()))}
    try:
        model = model_of(route)
        features = slot.field("features").take(pa.array(rows))
        x = features.flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(n, -1)
        t0 = time.perf_counter_ns()
        raw = model.predict(x)
        each = (time.perf_counter_ns() - t0) // max(1, n)
        values, labels, outputs = tf_model.interpret(raw, model.output_name)
        return {
            **spent,
            "prediction": pa.array(values, pa.float64()),
            "label": pa.array(labels, pa.string()) if labels is not None else pa.nulls(n, pa.string()),
            "outputs": outputs,
            "nanos": pa.array(np.full(n, each, dtype=np.int64)),
            "stage": pa.nulls(n, pa.string()),
            "error": pa.nulls(n, pa.string()),
        }
    except Exception as e:  # any failure of the model is the rows' reason
        text = str(e).strip().splitlines()
        why = f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__
        return {
            **spent,
            "prediction": pa.nulls(n, pa.float64()),
            "label": pa.nulls(n, pa.string()),
            "outputs": pa.nulls(n, pa.map_(pa.string(), pa.float64())),
            "nanos": pa.array(np.zeros(n, dtype=np.int64)),
            "stage": pa.array(["score"] * n, pa.string()),
            "error": pa.array([why] * n, pa.string()),
        }
