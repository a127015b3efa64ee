"""What a TensorFlow record's model call costs in the scorer's JVM, by how many records it takes.

    .venv/bin/python benchmarks/tf_costs.py [--records 200000]

The demo's Keras classifier (SavedModel), the wine rows, 2 cores shared with whatever else runs
(the load is printed). The job's TensorFlowModel (dev.scorestream.jvm, through
jvm/.../TensorFlowCallCost.java): one call on 1, 16, 256 and 4,096 rows, its output read per row
as the scorer reads it, in one warm JVM, CPU of the whole process (TensorFlow's own threads
included) per record. A micro-batch calls it on up to 4,096 rows (Scorer.TENSORFLOW_ROWS), a
real-time task on one. The Python route this replaced was measured by this script's version of
commit 53d2752 (ADR 33 has its figures).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from jvm_build import bench_jar
from scorestream.runtime import jvm
from scorestream.tools.demo import feed, models


def java_calls(archive: bytes, rows, records: int) -> dict[str, float]:
    """µs of CPU per record of one TensorFlow Java call on batches of each size."""
    classpath = [bench_jar(), jvm.scorer_jar(), *jvm.tensorflow_jars(), *sorted(jvm.spark_jars_dir().glob("*.jar"))]
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

    show(java_calls(archive, rows, args.records))
    print(f"load at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
