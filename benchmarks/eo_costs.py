"""What exactly-once costs per input partition and batch, step by step (docs/adr/0029).

    .venv/bin/python benchmarks/eo_costs.py [--batches 60] [--records 5000] [--gap-ms 50]

One embedded Apache Kafka broker; eo_costs/TransactionCosts.java on the client the job's sink runs
(kafka-clients of the spark-kafka jar set) writes `--batches` transactions of `--records` records
(200 bytes) with the partition's offset in each, `--gap-ms` apart (the rest of a batch): first as
PartitionTransactions did before it kept its producers (a producer, initTransactions, a consumer
and the committed-offset lookup per batch, both closed after), then with the producer kept. The
medians (p90) of each step are printed, and the load at start: 2 cores, shared.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

import topics as kafka
from scorestream import jars
from scorestream.runtime import jvm
from scorestream.tools.local.broker import EmbeddedBroker, java

SOURCE = Path(__file__).parent / "eo_costs" / "TransactionCosts.java"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--gap-ms", type=int, default=50)
    args = ap.parse_args()
    print(f"load {os.getloadavg()[0]:.2f} at start", flush=True)
    classpath = [*jars.resolve("spark-kafka"), *sorted(jvm.spark_jars_dir().glob("slf4j-api-*.jar"))]
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker(log=Path(tmp) / "broker.log") as broker:
        kafka.make_topics(broker.bootstrap, **{"costs-data": 1, "costs-out": 1})
        subprocess.run([java(), "-cp", ":".join(map(str, classpath)), str(SOURCE), broker.bootstrap, "costs-data",
                        "costs-out", str(args.batches), str(args.records), str(args.gap_ms)], check=True)


if __name__ == "__main__":
    main()
