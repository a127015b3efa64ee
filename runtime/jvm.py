"""The project's JVM scorer: where its jar is, how it is built, which jars Spark must load.

PMML4S is a Scala library; scoring it from Python one record at a time over Py4J runs at a few
hundred records per second. The scorer is a small Java UDF compiled against pyspark's own jars and
the PMML4S jars that the ``pypmml`` wheel carries (Scala 2.13, like Spark 4), so it needs no Maven.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

SOURCES = Path(__file__).parent / "jvm" / "src"
# pypmml ships the Scala library and commons jars too; Spark has newer ones of its own.
PMML4S_JARS = ("pmml4s_2.13-", "spray-json_2.13-")


class JvmError(RuntimeError):
    """The JVM scorer cannot be built or found."""


def _sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def _digest() -> str:
    h = hashlib.sha256()
    for src in _sources():
        h.update(src.relative_to(SOURCES).as_posix().encode())
        h.update(src.read_bytes())
    return h.hexdigest()[:12]


def spark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def pmml4s_jars() -> list[Path]:
    import pypmml

    jars = Path(pypmml.__file__).parent / "jars"
    found = [j for j in sorted(jars.glob("*.jar")) if j.name.startswith(PMML4S_JARS)]
    if len(found) != len(PMML4S_JARS):
        raise JvmError(f"PMML4S jars not found in {jars}: is pypmml installed?")
    return found


def _cache_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("SCORESTREAM_JVM_DIR"):
        dirs.append(Path(os.environ["SCORESTREAM_JVM_DIR"]))
    dirs.append(Path(__file__).parent / "jvm" / "build")
    dirs.append(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "scorestream")
    return dirs


def scorer_jar(build: bool = True) -> Path:
    """The jar for the current sources, built on first use where a JDK is present."""
    name = f"scorestream-jvm-{_digest()}.jar"
    for d in _cache_dirs():
        if (d / name).is_file():
            return d / name
    if not build:
        raise JvmError(f"{name} is not built; run `scorestream build-jvm`")
    last: Exception | None = None
    for d in _cache_dirs():
        try:
            d.mkdir(parents=True, exist_ok=True)
            return _build(d / name)
        except PermissionError as e:  # read-only install: try the next place
            last = e
    raise JvmError(f"no writable place for {name}: {last}")


def _build(target: Path) -> Path:
    javac = shutil.which("javac")
    if javac is None:
        raise JvmError("javac not found: install a JDK 17+ (Debian: openjdk-17-jdk-headless)")
    classpath = os.pathsep.join([str(spark_jars_dir() / "*"), *map(str, pmml4s_jars())])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "classes"
        cmd = [javac, "--release", "17", "-nowarn", "-cp", classpath, "-d", str(out)]
        res = subprocess.run(cmd + [str(s) for s in _sources()], capture_output=True, text=True)
        if res.returncode != 0:
            raise JvmError(f"javac failed:\n{res.stderr}")
        partial = target.with_suffix(".jar.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n\n")
            for f in sorted(out.rglob("*.class")):
                jar.write(f, f.relative_to(out).as_posix())
        partial.replace(target)  # atomic: concurrent builders never see half a jar
    return target


def kafka_connector_jars() -> list[Path]:
    """Spark's own Kafka source and sink with what pyspark lacks of their dependencies: none where
    the image has them among pyspark's jars already, otherwise the pinned set from the cache."""
    if any(spark_jars_dir().glob("spark-sql-kafka-0-10_*.jar")):
        return []
    from scorestream import jars

    return jars.resolve("spark-kafka")


def spark_jars() -> list[Path]:
    """Everything to put on ``spark.jars``: the scorer, PMML4S and Spark's Kafka connector."""
    return [scorer_jar(), *pmml4s_jars(), *kafka_connector_jars()]
