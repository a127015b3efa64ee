"""Peer (R): scorestream's serving job with its query in Spark's real-time mode (Spark 4.1+,
``trigger(realTime=...)``), for the benchmark only: not the product.

Everything but the query is the job's own: the models topic and its follower, the JVM scorer
(decode, route, PMML4S, prediction record) and Spark's Kafka source and sink with the job's
client settings. What changes is the engine. A micro-batch query plans, schedules and serializes
every batch and keeps both cores idle at the barrier between batches; a real-time query runs one
long task per partition through a batch of ``--batch`` (a checkpoint interval, not a latency
bound) and writes each record as it is scored.

What the product would have to solve before it runs this way (README, design note 25): the
routing table is fixed at query start here (no hot swap, canary or shadow change), the statistics
are not read back, only PMML (real-time mode runs no Python), ``maxOffsetsPerTrigger`` does not
apply, a stop mid-batch redoes that batch, and every partition needs its own task slot.

    python benchmarks/realtime_job.py --config job.json [--batch "5 seconds"]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from scorestream.config import load_job_config
from scorestream.runtime import job, kafka_options
from scorestream.runtime.models import routing_table

BATCH = "5 seconds"


class RealTimeJob(job.ServingJob):
    def __init__(self, config, batch: str = BATCH):
        super().__init__(config)
        self.batch = batch

    def _start_query(self):
        c = self.config
        table = routing_table(c, self.registry.snapshot(), self._protobuf)
        rows = self.scorer.sink_rows(self.scorer.score(self._source(), 0, table))
        return (
            rows.writeStream.queryName(f"scorestream-{c.name}")
            .format("kafka")
            .options(**kafka_options.sink_options(c.kafka))
            .outputMode("update")  # the only mode real-time queries take
            .option("checkpointLocation", c.checkpoint_location)
            .trigger(realTime=self.batch)
            .start()
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="the job's JobConfig as JSON")
    ap.add_argument("--batch", default=BATCH, help=f"the real-time batch: a checkpoint interval (default {BATCH})")
    args = ap.parse_args()
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = load_job_config(args.config)
    if config.kafka.max_offsets_per_trigger:
        ap.error("maxOffsetsPerTrigger: real-time queries take none")
    Path(config.work_dir).mkdir(parents=True, exist_ok=True)
    return RealTimeJob(config, args.batch).run()


if __name__ == "__main__":
    sys.exit(main())
