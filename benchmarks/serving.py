"""scorestream's serving job as a benchmark peer: ``python -m scorestream.runtime`` in its own
process (``JobProcess``, the entry point a pod runs), Spark local[2]."""

from __future__ import annotations

import time
from pathlib import Path

from scorestream.config import REAL_TIME_MIN_SECONDS, JobConfig, SparkConfig, duration_seconds
from scorestream.tools.demo import feed
from scorestream.tools.local.broker import free_port
from scorestream.tools.local.process import JobProcess


def default_trigger() -> str:
    """The job configuration's default trigger interval (what a ModelServing gets unless it says)."""
    return SparkConfig().trigger_interval


REAL_TIME_BATCH = f"{REAL_TIME_MIN_SECONDS:g}s"  # Spark's shortest


class Job:
    """A serving job with the peer interface the measurements use: start, started, alive, stop."""

    def __init__(self, bootstrap: str, name: str, topics: dict[str, str], work: Path,
                 per_batch: int | None = None, trigger: str | None = None, realtime: bool = False,
                 delivery: str = "atLeastOnce", rt_batch: str = REAL_TIME_BATCH, conf: dict[str, str] | None = None,
                 warm_up_batches: int | None = None):
        """``realtime``: ``spark.trigger: realTime``, batches of ``rt_batch`` (no ``per_batch``), and
        ``warm_up_batches`` (``spark.warmUpBatches``; None: its default).
        ``delivery``: the job config's (``exactlyOnce``: a Kafka transaction per partition and batch).
        ``conf``: the spec's ``spark.conf`` (Spark settings to compare)."""
        kafka = {
            "bootstrapServers": bootstrap,
            "dataTopic": topics["data"],
            "outputTopic": topics["out"],
            "deadLetterTopic": topics["dlq"],
            "modelsTopic": topics["models"],
            # The peers share the report's producer: by dataType, on a topic per peer.
            "acceptUnaddressedModels": True,
        }
        if per_batch:
            kafka["maxOffsetsPerTrigger"] = per_batch
        spark = {"master": "local[2]", **({"conf": conf} if conf else {})}
        if realtime:
            spark.update(trigger="realTime", triggerInterval=rt_batch)
            if warm_up_batches is not None:
                spark["warmUpBatches"] = warm_up_batches
        elif trigger:
            spark["triggerInterval"] = trigger
        config = JobConfig.model_validate({
            "name": name,
            "namespace": "bench",
            "dataTypes": ["wine"],
            "kafka": kafka,
            "input": {"fields": list(feed.WINE_COLUMNS)},
            "spark": spark,
            "http": {"host": "127.0.0.1", "port": free_port()},
            "checkpointLocation": str(work / name / "checkpoint"),
            "workDir": str(work / name / "job"),
            "delivery": delivery,
        })
        # How long a reader may wait for output: a trigger interval. A real-time query writes each
        # record as it is scored, but with exactlyOnce its records become visible to read_committed
        # readers only as the batch's transaction commits: once per real-time batch.
        if realtime:
            self.trigger_seconds = duration_seconds(rt_batch) if delivery == "exactlyOnce" else 0.0
        else:
            self.trigger_seconds = duration_seconds(config.spark.trigger_interval)
        self.process = JobProcess(config, work / name)
        self.started = 0.0

    def start(self) -> "Job":
        self.started = time.time()  # wall clock: comparable with the broker's timestamps
        self.process.start()
        return self

    def alive(self) -> bool:
        return self.process.proc is not None and self.process.proc.poll() is None

    @property
    def pid(self) -> int:
        return self.process.proc.pid

    def wait_ready(self, timeout: float = 180.0) -> "Job":
        self.process.wait_ready(timeout)
        return self

    def stop(self) -> None:
        self.process.stop()

    def tail(self) -> str:
        return self.process.tail()
