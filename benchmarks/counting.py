"""What scorestream's serving statistics cost: the scorer's counting (BatchCounts) and its drift
histograms (DriftCounts) per record, next to the rest of its per-record work (decode, PMML4S, the prediction record), in one warm JVM
(jvm/src/main/java/dev/scorestream/jvm/CountingCost.java). No Kafka, no Spark scheduling: the two
numbers side by side."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from jvm_build import bench_jar
from scorestream.tools.demo import feed, models
from scorestream.runtime import jvm


def measure(records: int = 2_000_000) -> tuple[float, float, float]:
    """(ns per record of scoring work, of counting, of the drift histograms)."""
    spark_jars = sorted(jvm.spark_jars_dir().glob("*.jar"))
    classpath = [jvm.scorer_jar(), *jvm.pmml4s_jars(), *spark_jars]
    jar = bench_jar()
    with tempfile.TemporaryDirectory() as tmp:
        pmml = Path(tmp) / "tree.pmml"
        pmml.write_bytes(models.tree_pmml())
        record = feed.wine_json(feed.wine_rows()[0]).decode()
        out = subprocess.run(
            ["java", "-Xmx512m", "-cp", ":".join(map(str, [jar, *classpath])), "dev.scorestream.jvm.CountingCost",
             str(pmml), record, str(records)],
            capture_output=True, text=True, check=True,
        ).stdout.split()
    return float(out[0]), float(out[1]), float(out[2])
