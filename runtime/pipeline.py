"""One micro-batch as a DataFrame plan: decode, route, score, split into output and dead letters.

Everything for a record happens in one pass: the JVM scorer decodes, routes and scores PMML;
TensorFlow rows are scored vectorised in ``mapInArrow``; the writer sends each row to the output
or dead-letter topic by its ``topic`` column, and counts what it wrote (records, outcome, scoring
time per model, a latency histogram) with numpy over the same Arrow batches. Those counts come
back to the driver as the result of the write itself: statistics cost no second pass, and no
per-row aggregate expressions (Spark's observed metrics halved throughput here, measured).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from scorestream.runtime import kafka_source
from scorestream.runtime.models import Candidate, LoadedModel

UDF_NAME = "ss_score"
SCORER_CLASS = "dev.scorestream.jvm.Scorer"
RESULT_DDL = (
    "dataType STRING, route STRING, stage STRING, error STRING, features ARRAY<DOUBLE>, "
    "prediction DOUBLE, label STRING, outputs MAP<STRING, DOUBLE>, nanos BIGINT"
)
RESULT_COLUMNS = ["dataType", "route", "stage", "error", "features", "prediction", "label", "outputs", "nanos"]
# During a shadow the scorer returns the candidate's result too (a separate UDF, so batches
# without a shadow do not carry six null columns).
SHADOW_UDF_NAME = "ss_score_shadow"
SHADOW_SCORER_CLASS = "dev.scorestream.jvm.Scorer$Shadow"
SHADOW_COLUMNS = ["shadowRoute", "shadowError", "shadowFeatures", "shadowPrediction", "shadowLabel", "shadowNanos"]
SHADOW_RESULT_DDL = RESULT_DDL + (
    ", shadowRoute STRING, shadowError STRING, shadowFeatures ARRAY<DOUBLE>, "
    "shadowPrediction DOUBLE, shadowLabel STRING, shadowNanos BIGINT"
)
# Scoring latency buckets, seconds (Prometheus histogram `le` bounds).
LATENCY_BUCKETS = (1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1.0)
HEADER_PREFIX = "scorestream."


def register_udf(spark) -> None:
    spark.udf.registerJavaFunction(UDF_NAME, SCORER_CLASS, RESULT_DDL)
    spark.udf.registerJavaFunction(SHADOW_UDF_NAME, SHADOW_SCORER_CLASS, SHADOW_RESULT_DDL)


@dataclass(frozen=True)
class Slot:
    """The columns one model's result occupies: the serving (or canary) model's, or the shadow's."""

    route: str
    features: str
    prediction: str
    label: str
    nanos: str
    error: str
    stage: str | None  # the serving result's failing stage; a shadow's failure is only its error
    outputs: str | None


PRIMARY = Slot("route", "features", "prediction", "label", "nanos", "error", "stage", "outputs")
SHADOW = Slot("shadowRoute", "shadowFeatures", "shadowPrediction", "shadowLabel", "shadowNanos", "shadowError",
              None, None)


def _tf_stage(tf_routes: dict[str, str], slots: tuple[Slot, ...]):
    """A mapInArrow function scoring the rows routed to TensorFlow models (route -> SparkFiles
    name), in each slot (the serving result, and the shadow's during a shadow)."""

    def score(batches):
        from pyspark import SparkFiles

        from scorestream.runtime import tf_model

        for batch in batches:
            cols = {name: batch.column(name) for name in batch.schema.names}
            ok = cols["stage"].is_null().to_numpy(zero_copy_only=False)
            replaced: dict[str, list] = {}
            for slot in slots:
                routes = cols[slot.route].to_numpy(zero_copy_only=False)
                errors = cols[slot.error].is_null().to_numpy(zero_copy_only=False)
                todo: dict[str, list[int]] = {}
                for i, r in enumerate(routes):
                    if r in tf_routes and ok[i] and errors[i]:
                        todo.setdefault(r, []).append(i)
                if not todo:
                    continue
                out = {c: cols[c].to_pylist() for c in (slot.prediction, slot.label, slot.nanos, slot.error,
                                                         slot.stage, slot.outputs) if c}
                for route, rows in todo.items():
                    try:
                        model = tf_model.cached(SparkFiles.get(tf_routes[route]))
                        picked = cols[slot.features].take(pa.array(rows, pa.int32()))
                        x = picked.flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(len(rows), -1)
                        t0 = time.perf_counter_ns()
                        raw = model.predict(x)
                        each = (time.perf_counter_ns() - t0) // max(1, len(rows))
                        values, labels, outs = tf_model.interpret(raw, model.output_name)
                        for j, i in enumerate(rows):
                            out[slot.prediction][i] = float(values[j])
                            out[slot.label][i] = labels[j] if labels else None
                            if slot.outputs:
                                out[slot.outputs][i] = list(outs[j].items())
                            out[slot.nanos][i] = int(each)
                    except Exception as e:  # the whole group fails together: each row says why
                        why = f"{type(e).__name__}: {str(e)[:300]}"
                        for i in rows:
                            out[slot.error][i] = why if slot.stage else f"score: {why}"
                            if slot.stage:
                                out[slot.stage][i] = "score"
                replaced.update(out)
                if slot.stage:  # a failed serving result is not compared with the shadow
                    ok = pa.array(out[slot.stage], pa.string()).is_null().to_numpy(zero_copy_only=False)
            if not replaced:
                yield batch
                continue
            arrays = [cols[name] if name not in replaced else pa.array(replaced[name], batch.schema.field(name).type)
                      for name in batch.schema.names]
            yield pa.RecordBatch.from_arrays(arrays, schema=batch.schema)

    return score


def plan(
    batch: DataFrame,
    batch_id: int,
    table_json: str,
    models: dict[str, LoadedModel],
    candidates: dict[str, Candidate],
    output_topic: str,
    dlq_topic: str,
) -> DataFrame:
    """topic, key, value, headers for the Kafka writer; _route, _nanos, _ok (and during a shadow
    _shadow, _sok, _snanos, _agree, _diff) for the statistics."""
    shadow = any(c.strategy == "Shadow" for c in candidates.values())
    udf, columns = (SHADOW_UDF_NAME, RESULT_COLUMNS + SHADOW_COLUMNS) if shadow else (UDF_NAME, RESULT_COLUMNS)
    scored = batch.withColumn("r", F.call_function(udf, F.lit(table_json), F.col("key"), F.col("value")))
    scored = scored.select("*", *[F.col("r")[c].alias(c) for c in columns]).drop("r")
    everything = [*models.values(), *(c.model for c in candidates.values())]
    tf = {m.route: m.file for m in everything if m.format == "tensorflow"}
    if tf:
        scored = scored.mapInArrow(_tf_stage(tf, (PRIMARY, SHADOW) if shadow else (PRIMARY,)), scored.schema)

    ok = F.col("stage").isNull()
    name_version = F.split(F.col("route"), ":", 2)
    record = F.struct(
        F.col("key").cast("string").alias("key"),
        F.struct("topic", "partition", "offset").alias("source"),
        F.col("dataType"),
        F.struct(name_version[0].alias("name"), name_version[1].alias("version")).alias("model"),
        F.col("prediction"),
        F.col("label"),
        F.col("outputs"),
        F.struct(
            F.col("timestamp").alias("eventTime"),
            F.current_timestamp().alias("scoredAt"),
            (F.col("nanos") / 1e3).alias("scoringMicros"),
        ).alias("timings"),
        F.lit(batch_id).cast("long").alias("batchId"),
    )
    dead_headers = F.array(
        _header("reason", F.col("error")),
        _header("stage", F.col("stage")),
        _header("source.topic", F.col("topic")),
        _header("source.partition", F.col("partition").cast("string")),
        _header("source.offset", F.col("offset").cast("string")),
        _header("model", F.coalesce(F.col("route"), F.lit(""))),
        _header("batch", F.lit(str(batch_id))),
    )
    if "headers" in batch.columns:  # keep the record's own headers: a dead letter is unchanged
        dead_headers = F.concat(F.coalesce(F.col("headers"), F.array().cast(dead_headers_type())), dead_headers)
    return scored.select(
        F.when(ok, F.lit(output_topic)).otherwise(F.lit(dlq_topic)).alias("topic"),
        F.col("key"),
        F.when(ok, F.to_json(record).cast("binary")).otherwise(F.col("value")).alias("value"),
        F.when(ok, F.lit(None).cast(dead_headers_type())).otherwise(dead_headers).alias("headers"),
        F.col("route").alias("_route"),
        F.col("nanos").alias("_nanos"),
        ok.alias("_ok"),
        *(_shadow_columns(ok) if shadow else []),
    )


def _shadow_columns(ok: Column) -> list[Column]:
    """What the statistics compare: the shadow's route, whether it scored, and whether it agreed
    (the same label for a classifier, the same value otherwise) and by how much it differed."""
    compared = ok & F.col("shadowRoute").isNotNull()
    sok = compared & F.col("shadowError").isNull() & F.col("shadowPrediction").isNotNull()
    same = F.when(F.col("label").isNotNull() & F.col("shadowLabel").isNotNull(), F.col("label") == F.col("shadowLabel")) \
        .otherwise(F.col("prediction") == F.col("shadowPrediction"))
    return [
        F.when(compared, F.col("shadowRoute")).alias("_shadow"),
        sok.alias("_sok"),
        F.col("shadowNanos").alias("_snanos"),
        (sok & F.coalesce(same, F.lit(False))).alias("_agree"),
        F.when(sok, F.abs(F.col("prediction") - F.col("shadowPrediction"))).alias("_diff"),
    ]


def write(frame: DataFrame, options: dict[str, str]) -> dict:
    """Produce the batch to Kafka from the executors; return its statistics, summed."""

    def send(batches):
        stats = BatchStats()

        def counted():
            for b in batches:
                stats.add(b)
                yield b

        written = kafka_source.produce_batches(options, counted())
        stats.counts["written"] = written
        # Which executor wrote it: its Python worker daemon (one per executor JVM).
        stats.counts[f"w:{socket.gethostname()}:{os.getppid()}"] = 1
        yield pa.RecordBatch.from_pydict({"stats": [json.dumps(stats.counts)]})

    total: dict = {}
    for row in frame.mapInArrow(send, "stats STRING").collect():
        for k, v in json.loads(row.stats).items():
            if k.startswith("min:"):
                total[k] = v if total.get(k) is None else min(total[k], v)
            elif k.startswith("max:"):
                total[k] = v if total.get(k) is None else max(total[k], v)
            else:
                total[k] = total.get(k, 0) + v
    return total


class BatchStats:
    """Counts for ServingStats: in/out/dead, ``le:<bucket>``, and n/err/sum/min/max per model."""

    def __init__(self):
        self.counts: dict = {"in": 0, "out": 0, "dead": 0, "nanos": 0, **{f"le:{b}": 0 for b in LATENCY_BUCKETS}}
        self._bounds = np.asarray([int(b * 1e9) for b in LATENCY_BUCKETS])

    def add(self, batch: pa.RecordBatch) -> None:
        c = self.counts
        ok = batch.column("_ok").to_numpy(zero_copy_only=False).astype(bool)
        nanos = batch.column("_nanos").fill_null(0).to_numpy(zero_copy_only=False)
        c["in"] += batch.num_rows
        c["out"] += int(ok.sum())
        c["dead"] += int((~ok).sum())
        good = nanos[ok]
        c["nanos"] += int(good.sum())
        # le:<b> counts values <= b: cumulative, as Prometheus histograms are.
        for i, n in enumerate(np.searchsorted(np.sort(good), self._bounds, side="right")):
            c[f"le:{LATENCY_BUCKETS[i]}"] += int(n)
        routes = batch.column("_route").dictionary_encode()
        idx = routes.indices.to_numpy(zero_copy_only=False)
        for code, route in enumerate(routes.dictionary.to_pylist()):
            mine = idx == code
            c[f"err:{route}"] = c.get(f"err:{route}", 0) + int((mine & ~ok).sum())
            scored = nanos[mine & ok]
            if not len(scored):
                continue
            c[f"n:{route}"] = c.get(f"n:{route}", 0) + len(scored)
            c[f"sum:{route}"] = c.get(f"sum:{route}", 0) + int(scored.sum())
            lo, hi = int(scored.min()), int(scored.max())
            c[f"min:{route}"] = lo if c.get(f"min:{route}") is None else min(c[f"min:{route}"], lo)
            c[f"max:{route}"] = hi if c.get(f"max:{route}") is None else max(c[f"max:{route}"], hi)
        if "_shadow" in batch.schema.names:
            self._add_shadow(batch)

    def _add_shadow(self, batch: pa.RecordBatch) -> None:
        """Per shadow route: s.n compared, s.err failed, s.agree equal, s.diff sum of |difference|,
        s.sum scoring nanos."""
        c = self.counts
        routes = batch.column("_shadow").dictionary_encode()
        idx = routes.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        sok = batch.column("_sok").fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
        agree = batch.column("_agree").fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
        diff = batch.column("_diff").fill_null(0.0).to_numpy(zero_copy_only=False)
        nanos = batch.column("_snanos").fill_null(0).to_numpy(zero_copy_only=False)
        for code, route in enumerate(routes.dictionary.to_pylist()):
            mine = idx == code
            good = mine & sok
            for k, v in (("s.n", int(good.sum())), ("s.err", int((mine & ~sok).sum())), ("s.agree", int((good & agree).sum())),
                         ("s.diff", float(diff[good].sum())), ("s.sum", int(nanos[good].sum()))):
                c[f"{k}:{route}"] = c.get(f"{k}:{route}", 0) + v


def dead_headers_type() -> str:
    return "array<struct<key:string,value:binary>>"


def _header(name: str, value: Column) -> Column:
    return F.struct(F.lit(HEADER_PREFIX + name).alias("key"), value.cast("binary").alias("value"))
