"""A real-time query's batch-end path, run before the query reads its first record.

At each batch's end a real-time query stops reading while Spark ends the batch and plans,
code-generates and launches the next (``runtime.realtime``; RESULTS.md, "The tail in real-time
mode"). That code runs once a batch, so the JIT compiles it only after tens of batch ends: a new
job's first pauses are two to three times a warm job's, and they are its p99. So before the
query starts, the job runs its own plan (the same scorer, sink rows and filter, in the same
JVMs) as a micro-batch query over generated records in the data topic's schema, batch after
batch as fast as they go, writing nothing: analysis, optimization and planning, code
generation, the job and its tasks' serialization, launch and deserialization, the offset and
commit logs are the code the real batch ends run. The scorer drops every generated record
unread (a draining table), so nothing is scored, counted or written.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

log = logging.getLogger("scorestream.runtime")

# Records per generated batch: enough that every task has rows, few enough that a batch is its
# fixed costs, which are what is warmed.
ROWS_PER_PARTITION = 10


def stand_in_source(spark: SparkSession, schema: StructType, topic: str, partitions: int) -> DataFrame:
    """A stream in the Kafka source's ``schema``: a new batch whenever one is asked for (Spark's
    rate-micro-batch source), spread over ``partitions`` tasks as the data topic's are."""
    generated = (spark.readStream.format("rate-micro-batch")
                 .option("rowsPerBatch", ROWS_PER_PARTITION * partitions)
                 .option("numPartitions", partitions).load())
    made = {
        "value": F.col("value").cast("string").cast("binary"),
        "offset": F.col("value"),
        "partition": (F.col("value") % partitions).cast("int"),
        "topic": F.lit(topic),
        "timestamp": F.col("timestamp"),
        "timestampType": F.lit(0),
    }
    return generated.select(*[made.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name) for f in schema.fields])


def run_batches(plan: DataFrame, batches: int, stopping: threading.Event, timeout: float) -> int:
    """Runs ``plan`` (a stream) into Spark's noop sink until ``batches`` batches have completed,
    the job is stopping or ``timeout`` seconds have passed; returns how many completed. The
    checkpoint is a scratch folder, removed after."""
    with tempfile.TemporaryDirectory(prefix="warm-up-") as scratch:
        query = (plan.writeStream.queryName("scorestream-warm-up").format("noop")
                 .option("checkpointLocation", Path(scratch).as_uri())
                 .trigger(processingTime="0 seconds").start())
        deadline = time.monotonic() + timeout
        try:
            while query.isActive and completed(query) < batches and time.monotonic() < deadline:
                if stopping.wait(0.05):
                    break
        finally:
            query.stop()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()).splitlines()[0])
        return completed(query)


def completed(query) -> int:
    progress = query.lastProgress
    return progress["batchId"] + 1 if progress else 0


def warm_up(source: DataFrame, plan_of: Callable[[DataFrame], DataFrame], topic: str, partitions: int,
            batches: int, stopping: threading.Event, timeout: float) -> None:
    """``plan_of`` (the query's rows of a source) over a stand-in of ``source``, ``batches``
    times. A warm-up that fails is logged and the job goes on: it only makes the first batch
    ends shorter, and the real query meets any fault of its own."""
    if batches <= 0:
        return
    began, ran = time.monotonic(), 0
    if not stopping.is_set():  # a stop may come while the caller looks up the partitions
        try:
            ran = run_batches(plan_of(stand_in_source(source.sparkSession, source.schema, topic, partitions)),
                              batches, stopping, timeout)
        except Exception as e:  # noqa: BLE001 - any fault here is the warm-up's, not the serving's
            log.warning("warm-up failed, starting cold: %s", e)
            return
    log.info("warm-up: %d of %d batches in %.1fs", ran, batches, time.monotonic() - began)
