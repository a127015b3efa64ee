"""The serving job: a Spark Structured Streaming query from the data topic to the output topic.

The driver owns the models (restored from the models topic, followed while running) and fixes
one model per dataType at the start of each micro-batch. Progress is checkpointed; after each
batch the data group's offsets are committed so that lag shows in ordinary Kafka tools.
SIGTERM stops after the current batch. With ``spark.trigger: realTime`` the query runs in Spark's
real-time mode instead, and ``runtime.realtime`` keeps the same promises there.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

from scorestream.config import JobConfig
from scorestream import naming
from scorestream.runtime import exactly_once, jvm, jvm_metrics, kafka_health, kafka_options, pipeline
from scorestream.runtime.executors import ExecutorControl
from scorestream.runtime.http import StatusServer, read_token
from scorestream.api.job_http import Readiness
from scorestream.api.scoring import RoutingTable
from scorestream.runtime.models import ModelLoader, ModelRegistry, routing_table
from scorestream.runtime.modelstopic import ModelsFollower
from scorestream.runtime.realtime import RealTimeQuery
from scorestream.runtime.stats import ServingStats

log = logging.getLogger("scorestream.runtime")


# How long a real-time job waits for its executors to offer a task slot per data-topic partition.
SLOTS_TIMEOUT_SECONDS = 180.0


class StopAfterBatch(Exception):
    """Raised instead of starting a batch once a stop was asked for: the batch is redone on restart."""


TF_LOG_LEVEL = "2"  # TensorFlow's C++ logging (TF_CPP_MIN_LOG_LEVEL): warnings and errors


def session_conf(config: JobConfig) -> dict[str, str]:
    """The Spark configuration of a job's session: the job's own settings, then the spec's."""
    conf = {
        "spark.app.name": f"scorestream-{config.namespace}-{config.name}",
        "spark.jars": ",".join(str(p) for p in jvm.spark_jars()),
        "spark.ui.enabled": "false",
        # Spark draws a progress bar with carriage returns for PySpark applications: in a log (a
        # pod's, the job's file) every redraw is one more line of noise between the job's own.
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.stopTimeout": "60s",
        "spark.executorEnv.TF_CPP_MIN_LOG_LEVEL": TF_LOG_LEVEL,
        # Checkpoint writes without a process per file on local volumes (LocalCheckpointFileManager).
        "spark.sql.streaming.checkpointFileManagerClass": "dev.scorestream.jvm.LocalCheckpointFileManager",
    }
    if config.spark.real_time:
        # A real-time query plans each batch anew while its tasks read nothing: generating the
        # whole stage's code was 15 ms of that ~65 ms pause, without it 8-9 (benchmarks/rt_pause.py).
        # Its price, about 0.7 us of CPU per record once warm (7.5 against 6.8), did not show in
        # the rate (benchmarks/RESULTS.md, "The tail in real-time mode"). The spec's conf can undo it.
        conf["spark.sql.codegen.wholeStage"] = "false"
    if config.spark.master.startswith("local"):
        # Local mode stays on loopback.
        conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    conf.update(config.spark.conf)
    # The JVM's initial heap is 1/64 of the memory it sees: in a pod a little (the container's
    # limit), on a 24 GiB machine 384 MB that G1 fills before it first collects, for a job whose
    # live data is a small part of that. From 64 MB up the demo's JVM peaks lower, throughput
    # the same (README, Figures). First on the line, so a user's own -Xms there wins.
    conf["spark.driver.extraJavaOptions"] = " ".join(
        filter(None, ("-Xms64m", config.spark.conf.get("spark.driver.extraJavaOptions"))))
    return conf


def spark_session(config: JobConfig):
    from pyspark.sql import SparkSession

    # Executors' Python must be this interpreter (the one with the job's dependencies).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # TensorFlow's C++ logging in the JVM (TensorFlowModel): warnings and errors, not a line per load.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", TF_LOG_LEVEL)
    builder = SparkSession.builder.master(config.spark.master)
    for k, v in session_conf(config).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SCORESTREAM_SPARK_LOG_LEVEL", "WARN"))
    return spark


class ServingJob:
    def __init__(self, config: JobConfig):
        self.config = config
        self.run_id = uuid.uuid4().hex[:12]
        self.registry = ModelRegistry()
        self.stats = ServingStats(self.registry)
        self.spark = None
        self.query = None
        self.follower: ModelsFollower | None = None
        self._stopping = threading.Event()
        self._batch_lock = threading.Lock()
        self._tables: tuple[int, RoutingTable] | None = None
        self.scorer: pipeline.BatchScorer | None = None
        self.realtime: RealTimeQuery | None = None  # with spark.trigger realTime
        self._protobuf: dict | None = None
        self._committed_batch = -1
        self._last_batch = -1  # the last micro-batch this job wrote
        self._failure: str | None = None
        self.executors: ExecutorControl | None = None
        # Writes refused for want of in-sync replicas stall a job silently (its producers retry for
        # minutes): the driver watches the topics' replicas and reports it (GET /stats, kafkaErrors).
        self.replicas = kafka_health.ReplicaWatch(config.kafka, config.exactly_once)
        self.http = StatusServer(config.http.host, config.http.port, self.stats, self._ready, lambda: self.executors,
                                 namespace=config.namespace, name=config.name,
                                 token=read_token(config.http.control_token_file),
                                 metrics_port=config.http.metrics_port, kafka_errors=self.replicas.errors)

    # -- readiness -----------------------------------------------------------------------------

    def _ready(self) -> Readiness:
        why = self._not_ready()
        return Readiness(ready=why is None, reason=why or "serving")

    def _not_ready(self) -> str | None:
        if self._failure:
            return self._failure
        if self.follower is None or not self.follower.restored:
            return "restoring models"
        if self.follower.error:
            return self.follower.error
        missing = self._missing_models()
        if missing:
            return f"waiting for a model for {', '.join(missing)}"
        if self.realtime is not None and self.realtime.warming:
            return "warming up (spark.warmUpBatches)"
        if self.query is None or not self.query.isActive:
            return "query not running"
        if self.realtime is not None and self.realtime.short_of_slots:
            return self.realtime.short_of_slots
        return None

    # -- lifecycle -----------------------------------------------------------------------------

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.http.start()
        self.replicas.start()
        log.info("status endpoint on port %d (control), %s (read-only)", self.http.port, self.http.metrics_port)
        try:
            self._protobuf = self._protobuf_fields()  # a bad message type fails here, not mid-stream
            self.spark = spark_session(self.config)
            self.stats.jvm = jvm_metrics.snapshot_of(self.spark)
            self.executors = ExecutorControl(self.spark, self.config.spark.master, self._batch_lock,
                                             real_time=self.config.spark.real_time)
            initial = self.config.spark.conf.get("spark.executor.instances")
            self.stats.live_scaling = self.executors.live
            if initial and self.executors.live:
                # Standalone starts as many executors as its workers offer; Kubernetes honours
                # spark.executor.instances already. Either way the job starts at the asked total.
                self.executors.scale_to(int(initial))
            elif initial:
                self.executors.target = int(initial)  # what a restart was asked for (local mode)
            self.scorer = pipeline.BatchScorer(self.spark, kafka_options.sink_options(self.config.kafka),
                                              exactly_once.transactional_sink(self.spark, self.config))
            loader = ModelLoader(self.config, self.spark.sparkContext.addFile, self._describe_pmml,
                                 self.spark.sparkContext._jvm.dev.scorestream.jvm.Verifier.run,
                                 drift_baseline=self.scorer.drift_baseline)
            self.stats.drift = self.scorer.drift
            self.follower = ModelsFollower(self.config, loader, self.registry, self.run_id)
            self.follower.restore(self.config.restore_timeout_seconds)
            self.follower.start()
            if not self._wait_for_models():
                return 0
            self.query = self._start_query()
            if self.query is None:  # stopped before it started
                return 0
            return self._supervise()
        except Exception as e:
            self._failure = f"{type(e).__name__}: {e}"
            log.exception("serving job failed")
            return 1
        finally:
            self._shutdown()

    def _describe_pmml(self, path: str) -> dict:
        jvm_scorer = self.spark.sparkContext._jvm.dev.scorestream.jvm.Scorer
        try:
            return json.loads(jvm_scorer.describe(path))
        except Exception as e:  # Py4JJavaError: keep the Java message, drop the stack
            msg = str(getattr(e, "java_exception", e)).splitlines()[0]
            raise ValueError(msg) from None

    def _missing_models(self) -> list[str]:
        """The served dataTypes that have no model yet."""
        models = self.registry.snapshot().models
        return [dt for dt in self.config.data_types if dt not in models]

    def _wait_for_models(self) -> bool:
        while not self._stopping.is_set():
            missing = self._missing_models()
            if not missing:
                return True
            log.info("waiting for a model for %s", ", ".join(missing))
            self._stopping.wait(2.0)
        return False

    def _source(self):
        """The data topic as a stream, through Spark's Kafka source."""
        c = self.config
        return self.spark.readStream.format("kafka").options(
            **kafka_options.source_options(c.kafka, naming.source_group_prefix(c.namespace, c.name),
                                           read_committed=c.exactly_once),
            startingOffsets=kafka_options.starting_offsets(c.kafka, c.data_group),
        ).load()

    def _start_query(self):
        c = self.config
        if c.spark.real_time:
            self.realtime = RealTimeQuery(c, self.scorer, self.registry, self.stats,
                                          lambda snap: routing_table(c, snap, self._protobuf))
            # Local mode's slots are what it started with; a cluster's grow as executors register.
            wait = SLOTS_TIMEOUT_SECONDS if self.executors.cluster else 0.0
            partitions = self.realtime.wait_for_slots(self.executors.task_slots, wait, self._stopping)
            source = self._source()
            self.realtime.warm_up(source, partitions, self._stopping)
            if self._stopping.is_set():
                return None
            return self.realtime.start(source, exactly_once.transactional_writer(self.spark, c))
        return (
            self._source()
            .writeStream.queryName(f"scorestream-{c.name}")
            .foreachBatch(self._batch)
            .option("checkpointLocation", c.checkpoint_location)
            .trigger(processingTime=f"{round(c.spark.trigger_seconds() * 1000)} milliseconds")
            .start()
        )

    def _batch(self, df, batch_id: int) -> None:
        with self._batch_lock:
            if self._stopping.is_set():
                raise StopAfterBatch(f"stop requested before batch {batch_id}")
            snap = self.registry.snapshot()
            if self._tables is None or self._tables[0] != snap.generation:
                self._tables = (snap.generation, routing_table(self.config, snap, self._protobuf))
            started = time.monotonic()
            counts = self.scorer.run(df, batch_id, self._tables[1])
            self.stats.add_batch(counts, [snap], time.monotonic() - started)
            self._last_batch = batch_id
            log.info("batch %d: %d records in %.2fs", batch_id, counts.in_, time.monotonic() - started)

    def _protobuf_fields(self) -> dict | None:
        if self.config.input.format != "protobuf":
            return None
        from scorestream.api import messages

        p = self.config.input.protobuf
        return messages.field_table(p.message_type, p.descriptor_file)

    def _supervise(self) -> int:
        idle_since = time.monotonic()
        seen_batches = 0
        while self.query.isActive:
            try:
                self.query.awaitTermination(0.5)
            except Exception:
                if not self._stopping.is_set():
                    raise
                # A batch that began after the stop was asked refused to run (StopAfterBatch) and
                # ended the query: stopped as asked, the batch is redone by the next run.
            if self.realtime is not None:
                self.realtime.follow_models()
            self._after_progress()
            self._watch_executors()
            if self.stats.batches != seen_batches:
                seen_batches, idle_since = self.stats.batches, time.monotonic()
            idle = self.config.idle_stop_seconds
            if idle and time.monotonic() - idle_since > idle and not self._stopping.is_set():
                log.info("no data for %.0fs: stopping", idle)
                self._stopping.set()
            if self._stopping.is_set():
                self._graceful_stop()
                break
        self._after_progress()
        exc = self.query.exception()
        if exc is not None and not self._stopping.is_set():
            self._failure = str(exc).splitlines()[0]
            log.error("query failed: %s", exc)
            return 1
        return 0

    def _graceful_stop(self, timeout: float = 60.0) -> None:
        if self.realtime is not None:
            self.realtime.stop(self.query, timeout)
            return
        # Wait for a batch in flight; a batch not yet started sees the flag and is not run.
        with self._batch_lock:
            last = self._last_batch
        # Spark records a batch as done (its commit log) after foreachBatch returns and before it
        # reports the batch's progress. Stopping in between would redo the batch on restart:
        # every record of it written twice. Wait for the report first.
        deadline = time.monotonic() + timeout
        while last >= 0 and self.query.isActive and time.monotonic() < deadline:
            progress = self.query.lastProgress
            if progress and progress["batchId"] >= last:
                break
            time.sleep(0.05)
        self.query.stop()

    def _after_progress(self) -> None:
        """Commit the last completed batch's end offsets to the data group; record the lag."""
        progress = self.query.lastProgress if self.query is not None else None
        if progress and self.realtime is not None:
            self.realtime.count(progress["batchId"])
        if not progress or progress["batchId"] <= self._committed_batch or not progress.get("sources"):
            if progress and self.realtime is None and not self.query.status["isDataAvailable"]:
                self.stats.note_no_new_data()
            return
        durations = progress.get("durationMs") or {}
        log.info("batch %d: %s records, %s", progress["batchId"], progress.get("numInputRows"),
                 ", ".join(f"{k} {v} ms" for k, v in sorted(durations.items(), key=lambda kv: -kv[1])))
        source = progress["sources"][0]
        end = _offsets(source.get("endOffset"))
        latest = _offsets(source.get("latestOffset")) or end
        if end and self.realtime is not None:
            self.realtime.check_slots(sum(len(ps) for ps in end.values()), self.executors.task_slots())
        if end:
            try:
                # With exactly-once the transactions committed the group's offsets with the outputs
                # (runtime.exactly_once): a commit of the driver's own would race them.
                if not self.config.exactly_once:
                    self._commit(end)
                self._committed_batch = progress["batchId"]
            except Exception as e:  # lag reporting must not stop serving: retried next batch
                log.warning("committing offsets to %s failed: %s", self.config.data_group, e)
            self.stats.lag = sum(
                max(0, latest.get(t, {}).get(p, o) - o) for t, ps in end.items() for p, o in ps.items()
            )
            self.stats.note_end_offsets(sum(o for ps in latest.values() for o in ps.values()))

    def _watch_executors(self) -> None:
        """Report the executors running (status.replicas) and keep the asked total."""
        self.stats.executors = self._executors()
        self.stats.query_id = str(self.query.id) if self.query is not None else None
        if self.executors is not None:
            self.stats.executor_target = self.executors.target
            if self.stats.executors is not None:
                self.executors.enforce(self.stats.executors)

    def _executors(self) -> int | None:
        """Executors running now, as the operator's status.replicas reports them."""
        try:
            return self.executors.running() if self.executors is not None else None
        except Exception:  # py4j errors while the context stops
            return None

    def _commit(self, end: dict) -> None:
        from confluent_kafka import Consumer, TopicPartition

        if not hasattr(self, "_committer"):
            self._committer = Consumer(
                {**self.config.kafka.client_properties(), "group.id": self.config.data_group, "enable.auto.commit": False}
            )
        tps = [TopicPartition(t, int(p), int(o)) for t, ps in end.items() for p, o in ps.items()]
        self._committer.commit(offsets=tps, asynchronous=False)

    def _on_signal(self, signum, _frame) -> None:
        log.info("signal %d: stopping after the current batch", signum)
        self._stopping.set()

    def _shutdown(self) -> None:
        self._stopping.set()
        self.replicas.stop()
        if self.follower is not None:
            self.follower.stop()
        if hasattr(self, "_committer"):
            self._committer.close()
        if self.executors is not None:
            self.executors.close()
        if self.spark is not None:
            self.spark.stop()
        self.http.stop()


def _offsets(raw) -> dict:
    if not raw:
        return {}
    return json.loads(raw) if isinstance(raw, str) else raw


def forget_old_checkpoints(config: JobConfig) -> list[Path]:
    """Stateless mode: the checkpoints of earlier configurations are of no use any more."""
    own = Path(config.checkpoint_location)
    if config.upgrade_mode != "stateless" or "://" in config.checkpoint_location or not own.parent.is_dir():
        return []
    old = [p for p in own.parent.glob("stateless-*") if p.is_dir() and p != own]
    for p in old:
        shutil.rmtree(p, ignore_errors=True)
        log.info("removed the stateless checkpoint of an earlier configuration: %s", p)
    return old


def main(config: JobConfig) -> int:
    Path(config.work_dir).mkdir(parents=True, exist_ok=True)
    forget_old_checkpoints(config)
    return ServingJob(config).run()
