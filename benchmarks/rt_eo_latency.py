"""One real-time job's latency to a read_committed reader, alone, a slice per batch.

    .venv/bin/python benchmarks/rt_eo_latency.py [--rate 17282] [--delivery exactlyOnce] [--batch 5s]

`throughput.py --only eo` measures realTime exactly-once last, after five throughput runs and five
other latency peers, at half the rate it measured for it; its p50 and p99 are over the whole
window. This runs the same job (the demo's tree, `spark.trigger: realTime`, 2 data partitions) on a
fresh broker at `--rate` and prints the p50 and p99 of each batch-long slice too: whether a reader
waits one batch for a transaction's commit, or the job carries a backlog it started the window
with (the warm-up ends once the reader trails the input by less than two batches). The load at
start is printed: 2 cores, shared with the broker, this producer and the reader.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import serving
from throughput import paced_latency
from scorestream.tools.demo import feed, models
from scorestream.tools.local.broker import EmbeddedBroker


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=17282.0, help="records a second (the default: half the "
                    "realTime exactlyOnce rate `throughput.py --only eo` measured)")
    ap.add_argument("--delivery", default="exactlyOnce", choices=("exactlyOnce", "atLeastOnce"))
    ap.add_argument("--batch", default=serving.REAL_TIME_BATCH, help="the real-time batch (triggerInterval)")
    ap.add_argument("--seconds", type=float, default=60.0, help="seconds measured, after the warm-up")
    ap.add_argument("--warmup", type=float, default=30.0, help="least seconds of warm-up")
    args = ap.parse_args()
    print(f"load average at start {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)", flush=True)
    tree = models.descriptor("tree", "1", "pmml", models.tree_pmml(feed.wine_rows()))
    batch = serving.duration_seconds(args.batch)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker(log=Path(tmp) / "broker.log") as broker:
        b = broker.bootstrap
        v = paced_latency(b, "rt", tree,
                          lambda t: serving.Job(b, "rt", t, Path(tmp), realtime=True, delivery=args.delivery,
                                                rt_batch=args.batch),
                          args.rate, argparse.Namespace(warmup=args.warmup, latency_seconds=args.seconds),
                          visible=True, window=batch)
    print(f"realTime {args.delivery}, batches of {args.batch}, at {args.rate:,.0f} rec/s: warm-up "
          f"{v['warmup_s']:.0f} s, {v['records']:,} records measured")
    print(f"  CreateTime to a read_committed reader's receipt: p50 {v['p50']:,} ms, p99 {v['p99']:,} ms, "
          f"max {v['max']:,} ms")
    for i, w in enumerate(v["windows"]):
        print(f"  {i * batch:5.0f} s  p50 {w['p50']:7,} ms   p99 {w['p99']:7,} ms")


if __name__ == "__main__":
    main()
