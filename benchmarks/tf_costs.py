"""Where a TensorFlow record's microseconds go, for each route the job can score it by.

    .venv/bin/python benchmarks/tf_costs.py [--records 200000]

The demo's Keras classifier (SavedModel), the wine rows, 2 cores shared with whatever else runs
(the load is printed). CPU per record of each step, in one warm process each:

  Python path (runtime/pipeline.py, runtime/tf_model.py): the Arrow hand-off, a local[1] Spark
  sending TensorFlow's pending rows (Scorer.FINISH_COLUMNS, features as 11 doubles) through a
  Python worker and back unchanged, less the same plan without it (JVM and worker, both ways);
  the worker's slot code (runtime/pipeline.fill_slot: features out of Arrow, results back in),
  less its model calls; the model calls themselves, per Arrow batch of 10,000 rows.
  TensorFlow Java in the JVM (the job's TensorFlowModel, through jvm/.../TensorFlowCallCost.java):
  one call on 1, 16, 256 and 4,096 rows, its output read per row as the scorer reads it, whole
  process CPU (TensorFlow's own threads included).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import cpu
from jvm_build import bench_jar
from scorestream import jars
from scorestream.runtime import jvm
from scorestream.tools.demo import feed, models

ARROW_ROWS = 10_000  # spark.sql.execution.arrow.maxRecordsPerBatch's default, what the job runs with
SLOT_FIELDS = [("route", pa.string()), ("tf", pa.bool_()), ("features", pa.list_(pa.float64())),
               ("prediction", pa.float64()), ("label", pa.string()),
               ("outputs", pa.map_(pa.string(), pa.float64())), ("nanos", pa.int64()),
               ("stage", pa.string()), ("error", pa.string())]


def pending_slot(rows: list[list[float]], n: int) -> pa.StructArray:
    """``n`` primary slots waiting for TensorFlow, as the scorer hands them over."""
    features = [rows[i % len(rows)][:11] for i in range(n)]
    arrays = [pa.array(["keras:1"] * n), pa.array([True] * n), pa.array(features, pa.list_(pa.float64()))]
    arrays += [pa.nulls(n, t) for _, t in SLOT_FIELDS[3:]]
    return pa.StructArray.from_arrays(arrays, fields=[pa.field(k, t) for k, t in SLOT_FIELDS])


def python_steps(archive: bytes, rows, records: int) -> dict[str, float]:
    """µs per record: the worker's slot code without its model calls, and the model calls."""
    import io
    import zipfile

    from scorestream.runtime import pipeline, tf_model

    with tempfile.TemporaryDirectory() as tmp:
        zipfile.ZipFile(io.BytesIO(archive)).extractall(tmp)
        model = tf_model.load(tf_model.saved_model_folder(Path(tmp)))
        out: dict[str, float] = {}
        x = np.asarray([r[:11] for r in rows], dtype=np.float32)
        for size in (1, 256, ARROW_ROWS):
            batch = np.resize(x, (size, 11))
            calls = max(3, records // size // (20 if size == 1 else 1))
            model.predict(batch)
            c0 = time.process_time()
            for _ in range(calls):
                model.predict(batch)
            out[f"Python TF call, {size:,} rows a call"] = (time.process_time() - c0) / (calls * size) * 1e6
        slot = pending_slot(rows, ARROW_ROWS)
        called = [0.0]

        def timed(route):
            class Timed:
                output_name = model.output_name

                def predict(self, x):
                    t0 = time.process_time()
                    y = model.predict(x)
                    called[0] += time.process_time() - t0
                    return y
            return Timed()

        batches = max(3, records // ARROW_ROWS)
        pipeline.fill_slot(slot, timed)
        called[0] = 0.0
        c0 = time.process_time()
        for _ in range(batches):
            pipeline.fill_slot(slot, timed)
        total = time.process_time() - c0
        out["Python slot code (fill_slot less its model calls)"] = (total - called[0]) / (batches * ARROW_ROWS) * 1e6
    return out


def arrow_handoff(records: int) -> float:
    """µs per record of sending pending rows through a Python worker and back (both processes)."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable  # the worker: this interpreter, with pyarrow
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.sql.execution.arrow.maxBytesPerBatch", str(2**31 - 1))
             .config("spark.python.worker.reuse", "true").getOrCreate())
    try:
        slot = ("named_struct('route', 'keras:1', 'tf', true, 'features', "
                "array(7.4D, 0.7D, 0D, 1.9D, 0.076D, 11D, 34D, 0.9978D, 3.51D, 0.56D, 9.4D + id % 7), "
                "'prediction', cast(null as double), 'label', cast(null as string), "
                "'outputs', cast(null as map<string, double>), 'nanos', cast(null as bigint), "
                "'stage', cast(null as string), 'error', cast(null as string))")
        df = spark.range(records).selectExpr(
            "cast(id as string) as key", "cast('v' as binary) as value", "'data' as topic", "0 as partition",
            "id as offset", "id as ts", "'wine' as dataType", f"{slot} as primary",
            f"cast(null as struct<route:string,tf:boolean,features:array<double>,prediction:double,label:string,"
            f"outputs:map<string,double>,nanos:bigint,stage:string,error:string>) as shadow")

        def same(batches):
            yield from batches

        def run(frame) -> float:
            c0 = cpu.sample(os.getpid()).total
            frame.write.format("noop").mode("overwrite").save()
            return cpu.sample(os.getpid()).total - c0

        through = df.mapInArrow(same, df.schema)
        for _ in range(2):  # warm: the worker started, the JIT at work on both plans
            run(df), run(through)
        plain = min(run(df) for _ in range(3))
        handed = min(run(through) for _ in range(3))
        return (handed - plain) / records * 1e6
    finally:
        spark.stop()


def java_calls(archive: bytes, rows, records: int) -> dict[str, float]:
    """µs of CPU per record of one TensorFlow Java call on batches of each size."""
    classpath = [bench_jar(), jvm.scorer_jar(), *jars.resolve("tensorflow"), *sorted(jvm.spark_jars_dir().glob("*.jar"))]
    with tempfile.TemporaryDirectory() as tmp:
        zip_path, csv = Path(tmp) / "model.zip", Path(tmp) / "rows.csv"
        zip_path.write_bytes(archive)
        csv.write_text("\n".join(",".join(str(v) for v in r[:11]) for r in rows))
        out = subprocess.run(
            ["java", "-Xmx512m", "-cp", ":".join(map(str, classpath)), "dev.scorestream.bench.TensorFlowCallCost",
             str(zip_path), str(csv), str(records)],
            capture_output=True, text=True, check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        ).stdout.split("\n")
    found = {}
    for line in filter(None, out):
        size, cpu_us, _wall = line.split()
        found[f"TF Java call, {int(size):,} rows a call"] = float(cpu_us)
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=200_000, help="records each step is timed over")
    args = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    print(f"load at start: {os.getloadavg()[0]:.1f} (2 cores, shared)")
    rows = feed.wine_rows()
    archive = models.keras_savedmodel_zip(rows, epochs=3)
    def show(figures: dict[str, float]) -> None:
        for name, us in figures.items():
            print(f"  {name:<52}  {us:8.2f} µs/record", flush=True)

    show({"Arrow hand-off to the Python worker and back": arrow_handoff(args.records)})
    show(python_steps(archive, rows, args.records))
    show(java_calls(archive, rows, args.records))
    print(f"load at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
