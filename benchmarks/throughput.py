"""End-to-end throughput, Kafka -> score -> Kafka, against two baselines measured in the same run.

    .venv/bin/python benchmarks/throughput.py [--records 300000] [--baseline-records 5000]

Prints records/s for:
  scorestream PMML   the serving job (Spark local[2], JVM scorer), demo decision tree
  scorestream TF     the serving job, demo Keras SavedModel
  (a) per-record     confluent-kafka consumer + pypmml predict per record + producer: the report's
                     processor ported to Python the obvious way
  (b) raw broker     confluent-kafka consume + produce of the same records, no scoring: one
                     process, and one process per partition (2), the machine's ceiling for this client
and the ratios against (a) and (b); and, to show where the time goes,
  (c) passthrough    scorestream's Kafka source and sink through Spark, no scoring (warm workers) The job's rate is its steady state: records after the first
micro-batch (which pays for Python worker start-up and JIT) over the time they took.
Not a test: figures depend on the machine; the closing notes quote what it printed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import tempfile
import time
from pathlib import Path

from scorestream.config import JobConfig
from scorestream.demo import feed, models
from scorestream.demo.broker import EmbeddedBroker, create_topics, free_port
from scorestream.demo.process import JobProcess


def preload(bootstrap: str, topic: str, n: int, partitions: int = 2) -> None:
    rows = feed.wine_rows()
    feed.produce(bootstrap, topic, ((str(i).encode(), feed.wine_json(rows[i % len(rows)])) for i in range(n)), partitions)


def _consume_produce(bootstrap: str, topic: str, out: str, partitions: list[int], n: int, score, result) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time()}", "enable.auto.commit": False})
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    c.assign([TopicPartition(topic, part, 0) for part in partitions])
    done, t0 = 0, None
    while done < n:
        msgs = c.consume(1000, timeout=1.0)
        if t0 is None and msgs:
            t0 = time.perf_counter()
        for m in msgs:
            if m.error():
                continue
            value = m.value() if score is None else score(m.value())
            while True:
                try:
                    p.produce(out, value, key=m.key())
                    break
                except BufferError:
                    p.poll(0.05)
            done += 1
            if done >= n:
                break
        p.poll(0)
    p.flush(60)
    result.put((done, time.perf_counter() - t0))
    c.close()


def raw_rate(bootstrap: str, topic: str, n: int, processes: int) -> float:
    create_topics(bootstrap, {f"raw-out-{processes}": 2})
    q: mp.Queue = mp.Queue()
    parts = [[p for p in range(2) if p % processes == i] for i in range(processes)]
    share = [n // 2 * len(ps) for ps in parts]
    procs = [
        mp.Process(target=_consume_produce, args=(bootstrap, topic, f"raw-out-{processes}", ps, k, None, q))
        for ps, k in zip(parts, share)
    ]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(d for d, _ in results) / max(t for _, t in results)


def per_record_rate(bootstrap: str, topic: str, pmml: bytes, n: int) -> float:
    from pypmml import Model

    model = Model.fromString(pmml.decode())
    fields = list(feed.WINE_COLUMNS)

    def score(value: bytes) -> bytes:
        rec = json.loads(value)
        pred = dict(model.predict({f: float(rec[f]) for f in fields}))
        return json.dumps({"prediction": pred, "dataType": rec["dataType"]}).encode()

    create_topics(bootstrap, {"perrecord-out": 2})
    q: mp.Queue = mp.Queue()
    # In this process: pypmml's JVM gateway does not survive a fork.
    _consume_produce(bootstrap, topic, "perrecord-out", [0, 1], n, score, q)
    done, seconds = q.get()
    return done / seconds


def passthrough_rate(bootstrap: str, topic: str, n: int) -> float:
    """Spark reads the topic with scorestream's source and writes it back with its sink: no scoring."""
    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from scorestream.runtime import kafka_source as ks

    create_topics(bootstrap, {"pass-out": 2})
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(ks.KafkaDataSource)
    seconds: list[float] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for run in range(2):  # the first run starts Python workers; the second is measured
                def batch(df, _id):
                    t0 = time.perf_counter()
                    df.select("key", "value").write.format(ks.FORMAT).mode("append").option(
                        "kafka.bootstrap.servers", bootstrap
                    ).option("topic", "pass-out").save()
                    seconds.append(time.perf_counter() - t0)

                q = (
                    spark.readStream.format(ks.FORMAT)
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", topic)
                    .option("startingOffsets", "earliest")
                    .load()
                    .writeStream.foreachBatch(batch)
                    .option("checkpointLocation", f"{tmp}/ck{run}")
                    .trigger(availableNow=True)
                    .start()
                )
                q.awaitTermination()
    finally:
        spark.stop()
    return n / seconds[-1]


def job_rate(bootstrap: str, work: Path, descriptor, n: int, per_batch: int, name: str) -> dict:
    topics = {"data": f"{name}-data", "out": f"{name}-out", "dlq": f"{name}-dlq", "models": f"{name}-models"}
    create_topics(bootstrap, {topics["data"]: 2, topics["out"]: 2, topics["dlq"]: 1, topics["models"]: 1})
    preload(bootstrap, topics["data"], n)
    feed.publish_model(bootstrap, topics["models"], descriptor)
    config = JobConfig.model_validate(
        {
            "name": name,
            "namespace": "bench",
            "dataTypes": ["wine"],
            "kafka": {
                "bootstrapServers": bootstrap,
                "dataTopic": topics["data"],
                "outputTopic": topics["out"],
                "deadLetterTopic": topics["dlq"],
                "modelsTopic": topics["models"],
                "maxOffsetsPerTrigger": per_batch,
            },
            "input": {"fields": list(feed.WINE_COLUMNS)},
            "spark": {"master": "local[2]", "triggerInterval": "100ms"},
            "http": {"host": "127.0.0.1", "port": free_port()},
            "checkpointLocation": str(work / name / "checkpoint"),
            "workDir": str(work / name / "job"),
        }
    )
    job = JobProcess(config, work / name).start()
    try:
        job.wait_ready()
        samples = []
        t_start = time.monotonic()
        while True:
            done = job.get("/stats")["totals"]["recordsIn"]
            samples.append((time.monotonic(), done))
            if done >= n:
                break
            if time.monotonic() - t_start > 900:
                raise TimeoutError(f"{name}: {done} of {n} in 900s")
            time.sleep(0.05)
        first = next((t, d) for t, d in samples if d > 0)
        last = samples[-1]
        steady = (last[1] - first[1]) / (last[0] - first[0]) if last[0] > first[0] else float("nan")
        return {"steady": steady, "with_startup": n / (last[0] - t_start), "first_batch": first[1]}
    finally:
        job.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--baseline-records", type=int, default=5_000)
    ap.add_argument("--per-batch", type=int, default=50_000)
    args = ap.parse_args()
    rows = feed.wine_rows()
    tree = models.descriptor("tree", "1", "pmml", models.tree_pmml(rows))
    keras = models.descriptor("keras", "1", "tensorflow", models.keras_savedmodel_zip(rows, epochs=3))
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker(log=Path(tmp) / "broker.log") as broker:
        create_topics(broker.bootstrap, {"bench-in": 2})
        preload(broker.bootstrap, "bench-in", args.records)
        raw1 = raw_rate(broker.bootstrap, "bench-in", args.records, 1)
        raw2 = raw_rate(broker.bootstrap, "bench-in", args.records, 2)
        per_record = per_record_rate(broker.bootstrap, "bench-in", tree.data, args.baseline_records)
        pmml = job_rate(broker.bootstrap, Path(tmp), tree, args.records, args.per_batch, "pmml")
        tf = job_rate(broker.bootstrap, Path(tmp), keras, args.records, args.per_batch, "tf")
        passthrough = passthrough_rate(broker.bootstrap, "bench-in", args.records)
    print(f"\nrecords: {args.records} (baseline (a): {args.baseline_records}), Spark local[2], 2 partitions")
    print(f"(b) raw broker consume+produce, 1 process : {raw1:>10,.0f} rec/s")
    print(f"(b) raw broker consume+produce, 2 processes: {raw2:>10,.0f} rec/s")
    print(f"(a) per-record pypmml loop                : {per_record:>10,.0f} rec/s")
    print(f"(c) scorestream source+sink, no scoring   : {passthrough:>10,.0f} rec/s   "
          f"{100 * passthrough / raw1:.0f}% of (b, 1 proc)   {100 * passthrough / raw2:.0f}% of (b, 2 procs)")
    for label, r in (("PMML", pmml), ("TF  ", tf)):
        print(
            f"scorestream {label} steady state            : {r['steady']:>10,.0f} rec/s   "
            f"x{r['steady'] / per_record:,.1f} of (a)   {100 * r['steady'] / raw1:.0f}% of (b, 1 proc)   "
            f"{100 * r['steady'] / raw2:.0f}% of (b, 2 procs)   incl. start-up: {r['with_startup']:,.0f} rec/s"
        )


if __name__ == "__main__":
    main()
