"""The JVM modules: their pins are the versions the job runs, their JUnit tests pass, and the job
finds the Maven-built jar (or says which command builds it)."""

from __future__ import annotations

import tomllib
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

import pytest

from scorestream import jars
from scorestream.runtime import jvm
from harness import junit

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks" / "jvm" / "pom.xml"
NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def properties(pom: Path) -> dict[str, str]:
    root = ET.parse(pom).getroot()
    return {el.tag.split("}")[1]: el.text for el in root.find("m:properties", NS)}


def plugin_pins(pom: Path) -> dict[str, str]:
    root = ET.parse(pom).getroot()
    plugins = root.findall("m:build/m:pluginManagement/m:plugins/m:plugin", NS)
    return {p.findtext("m:artifactId", namespaces=NS): p.findtext("m:version", namespaces=NS) for p in plugins}


def test_spark_and_pmml4s_are_pinned_at_the_versions_the_job_runs():
    pins = properties(jvm.POM)
    assert pins["spark.version"] == metadata.version("pyspark")
    assert list(jvm.spark_jars_dir().glob(f"spark-sql_{pins['scala.binary.version']}-{pins['spark.version']}.jar"))
    wheel = {j.name for j in jvm.pypmml_jars_dir().glob("*.jar")}
    scala = pins["scala.binary.version"]
    assert f"pmml4s_{scala}-{pins['pmml4s.version']}.jar" in wheel
    assert f"spray-json_{scala}-{pins['spray-json.version']}.jar" in wheel


def test_the_benchmark_module_builds_against_the_same_versions_and_plugins():
    ours, bench = properties(jvm.POM), properties(BENCH)
    for shared in ("maven.compiler.release", "spark.version", "scala.binary.version", "pmml4s.version"):
        assert bench[shared] == ours[shared], shared
    assert bench["kafka.version"] == jars.KAFKA
    assert bench["tensorflow.version"] == jars.TENSORFLOW_JAVA  # the (K-TF) peer runs the pinned set
    assert plugin_pins(BENCH) == plugin_pins(jvm.POM)
    assert all(v and v[0].isdigit() for v in plugin_pins(jvm.POM).values()), "every plugin pinned"


def test_the_wheel_carries_what_the_jar_digest_is_made_of():
    """The runtime image installs the wheel and finds the jar the build stage made by the digest of
    the module: the pom and every main source must be package data, the JUnit tests need not."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = data["scorestream.runtime"]
    carried = {p for pattern in patterns for p in (REPO / "runtime").glob(pattern)}
    main = {jvm.POM, *(jvm.MODULE / "src" / "main" / "java").rglob("*.java")}
    assert main <= carried
    assert not [p for p in carried if "src/test" in p.as_posix()]


def test_a_missing_jar_is_an_error_naming_the_command_that_builds_it(monkeypatch, tmp_path):
    monkeypatch.setenv("SCORESTREAM_JVM_DIR", str(tmp_path))
    monkeypatch.setattr(jvm, "MODULE", tmp_path / "module")  # its target/ holds no jar either
    monkeypatch.setattr(jvm, "jar_name", lambda: "scorestream-jvm-0123456789ab.jar")
    with pytest.raises(jvm.JvmError, match="run `python -m scorestream.runtime.jvm`"):
        jvm.scorer_jar()


def test_the_jar_is_found_by_the_digest_of_the_current_sources(monkeypatch, tmp_path):
    monkeypatch.setenv("SCORESTREAM_JVM_DIR", str(tmp_path))
    (tmp_path / jvm.jar_name()).write_bytes(b"")
    assert jvm.scorer_jar() == tmp_path / jvm.jar_name()
    # A jar of other sources (a stale one) is not the jar of these.
    module = tmp_path / "module"
    (module / "src" / "main" / "java").mkdir(parents=True)
    (module / "pom.xml").write_bytes(jvm.POM.read_bytes() + b"<!-- changed -->")
    assert jvm.module_digest(module) != jvm.module_digest(jvm.MODULE)


def test_the_junit_tests_pass():
    """Records, SinkRow, RoutingTable, SafeXml, Protobuf, Verifier, LiveTable, PartitionTransactions,
    TransactionalProducers (PartitionTransactionsBroker, which needs a broker: tests/test_broker.py)."""
    res, reports = junit.run()
    assert res.returncode == 0, (res.stdout + res.stderr)[-6000:]
    counts = list(reports.values())
    assert set(reports) >= {"Records", "RoutingTable", "SafeXml", "Protobuf", "Verifier", "LiveTable",
                            "PartitionTransactions", "TransactionalProducers"}
    assert sum(int(c["failures"]) + int(c["errors"]) for c in counts) == 0
    assert sum(int(c["tests"]) for c in counts) >= 40
