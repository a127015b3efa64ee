"""The pause at each real-time batch end, taken apart from Spark's event log.

    .venv/bin/python benchmarks/rt_pause.py [--rate 10000] [--batch 5s] [--seconds 30] [--warm-up-batches N] [--window S] [--conf k=v ...]

One embedded broker; scorestream's job with the demo's tree and ``spark.trigger: realTime``
(Spark local[2], batches of ``--batch``), fed at ``--rate`` for ``--warmup`` + ``--seconds``
(latency.paced, as rt-latency is); the job writes Spark's event log. Printed: the end-to-end
latency, then per batch end (the first measured ones after the warm-up's) how long the
executors read nothing, from the batch's first task to end to the next batch's tasks starting
to read (launched and deserialized), and what that is made of: the job's end -> the next
batch's SQL execution starts (Spark's end of batch: offset and commit logs, the progress, the
Kafka offsets, then the next batch's planning, ``queryPlanning`` of its progress); -> its job
is submitted (code generation, the job and its task binary); -> its tasks are launched and
deserialized. The batch ends are in the order they happened, so the JIT's warming shows:
Spark plans each batch anew, and code that runs once a batch is compiled only after many of
them. ``--conf``: Spark settings for the job (the spec's ``spark.conf``), ``--warm-up-batches``
its ``spark.warmUpBatches`` (0: none), to compare; run the two sides one after the other, in
turns. The job's warm-up query (runtime/warm_up.py) is printed apart: its batches and time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import latency
import serving
import topics as kafka
from scorestream.tools.demo import feed, models
from scorestream.tools.local.broker import EmbeddedBroker


def batch_ends(event_log: Path) -> tuple[list[dict], dict]:
    """Per batch end of the query last started (ms): ``pause`` (the first task of the batch
    ending -> the next batch's tasks launched and deserialized), ``to_sql``, ``to_job``,
    ``launch`` (its parts), ``planning`` (the next batch's queryPlanning); and the jobs of the
    queries before it (the job's warm-up, runtime/warm_up.py): ``jobs``, ``seconds``."""
    jobs: dict[int, dict] = {}
    tasks: dict[int, list] = {}
    sql_start: dict[int, int] = {}
    planning: dict[int, int] = {}
    for line in event_log.read_text().splitlines():
        e = json.loads(line)
        kind = e["Event"]
        if kind == "SparkListenerJobStart":
            props = e.get("Properties") or {}
            root = props.get("spark.sql.execution.root.id") or props.get("spark.sql.execution.id")
            jobs[e["Job ID"]] = {"start": e["Submission Time"], "stage": e["Stage IDs"][0],
                                 "sql": int(root) if root else None, "query": props.get("spark.jobGroup.id"),
                                 "batch": int(props.get("streaming.sql.batchId", -1))}
        elif kind == "SparkListenerJobEnd" and e["Job ID"] in jobs:
            jobs[e["Job ID"]]["end"] = e["Completion Time"]
        elif kind == "SparkListenerTaskEnd":
            info, metrics = e["Task Info"], e.get("Task Metrics") or {}
            tasks.setdefault(e["Stage ID"], []).append(
                (info["Launch Time"], info["Finish Time"], metrics.get("Executor Deserialize Time") or 0))
        elif kind.endswith("SparkListenerSQLExecutionStart"):
            sql_start[e["executionId"]] = e["time"]
        elif kind.endswith("QueryProgressEvent"):
            p = e["progress"]
            planning[p["batchId"]] = p["durationMs"].get("queryPlanning")
    last = jobs[max(jobs)]["query"] if jobs else None
    earlier = [j for j in jobs.values() if j["query"] != last and "end" in j]
    warm_up = {"jobs": len(earlier),
               "seconds": (max(j["end"] for j in earlier) - min(j["start"] for j in earlier)) / 1000 if earlier else 0.0}
    ends, before = [], None
    for jid in sorted(jobs):
        j = jobs[jid]
        if j["query"] != last:
            continue
        ts = tasks.get(j["stage"])
        if not ts or "end" not in j:
            continue
        reading = min(t[0] + t[2] for t in ts)
        if before is not None and j["sql"] in sql_start:
            sql = sql_start[j["sql"]]
            ends.append({"pause": reading - before["first_done"], "to_sql": sql - before["end"],
                         "to_job": j["start"] - sql, "launch": reading - j["start"],
                         "planning": planning.get(j["batch"])})
        before = {"first_done": min(t[1] for t in ts), "end": j["end"]}
    return ends, warm_up


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=10_000.0, help="records/s (default 10,000)")
    ap.add_argument("--batch", default="5s", help="the job's triggerInterval (default 5s)")
    ap.add_argument("--seconds", type=float, default=30.0, help="measured seconds (default 30)")
    ap.add_argument("--warmup", type=float, default=12.0, help="least seconds of warm-up (default 12)")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting of the job")
    ap.add_argument("--warm-up-batches", type=int, default=None, help="the job's spark.warmUpBatches (default: its default)")
    ap.add_argument("--window", type=float, default=None, help="also print the p99 and max of each such slice (s)")
    args = ap.parse_args()
    conf = dict(kv.split("=", 1) for kv in args.conf)
    load = os.getloadavg()[0]
    print(f"[{time.strftime('%H:%M:%S')}] load average at start {load:.2f} ({os.cpu_count()} cores); conf {conf or '-'}",
          flush=True)
    tree = models.descriptor("tree", "1", "pmml", models.tree_pmml(feed.wine_rows()))
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker(log=Path(tmp) / "broker.log") as broker:
        b, work = broker.bootstrap, Path(tmp)
        t = {"data": "rtp-data", "out": "rtp-out", "dlq": "rtp-dlq", "models": "rtp-models"}
        kafka.make_topics(b, t["data"], (t["out"],), stamped_data=True, **{t["dlq"]: 1, t["models"]: 1})
        feed.publish_model(b, t["models"], tree, to=None)
        events = work / "events"
        events.mkdir()
        job = serving.Job(b, "rtp", t, work, realtime=True, rt_batch=args.batch, warm_up_batches=args.warm_up_batches, conf={
            **conf, "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(events),
            "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"})
        job.start()
        try:
            job.wait_ready()
            v = latency.paced(b, t["data"], t["out"], args.rate, args.warmup, args.seconds, 0.1, job.alive,
                               window=args.window)
            v["broker"] = latency.broker_request_times(broker.pid)
        except Exception:
            print(job.tail(), file=sys.stderr)
            raise
        finally:
            job.stop()
        logs = [p for p in events.rglob("*") if p.is_file() and not p.name.startswith(".")]
        ends, warm_up = batch_ends(max(logs, key=lambda p: p.stat().st_size))
    print("\n".join(latency.describe(v)))
    print(f"the job's warm-up (spark.warmUpBatches {args.warm_up_batches if args.warm_up_batches is not None else 'default'}):"
          f" {warm_up['jobs']} batches in {warm_up['seconds']:.1f}s")
    print("per batch end, ms: pause = job end -> next SQL execution (its queryPlanning) -> job submitted -> tasks reading")
    for i, e in enumerate(ends, 1):
        print(f"  {i:3} {e['pause']:6,} = {e['to_sql']:5,} ({e['planning'] if e['planning'] is not None else '?':>4}) "
              f"+ {e['to_job']:4,} + {e['launch']:4,}   (+ the batch's last task's lag {e['pause'] - e['to_sql'] - e['to_job'] - e['launch']})")
    if ends:
        def med(k):
            return statistics.median(e[k] for e in ends if e[k] is not None)
        print(f"  median {med('pause'):,.0f} = {med('to_sql'):,.0f} ({med('planning'):,.0f}) + {med('to_job'):,.0f}"
              f" + {med('launch'):,.0f}; max {max(e['pause'] for e in ends):,}; load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
