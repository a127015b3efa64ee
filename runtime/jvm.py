"""The project's JVM scorer: where its jar is, how it is built, which jars Spark must load.

PMML4S is a Scala library; scoring it from Python one record at a time over Py4J runs at a few
hundred records per second. The scorer is a small Java UDF, a Maven module (``jvm/pom.xml``)
built against Spark and the PMML4S of the ``pypmml`` wheel, both ``provided`` (Scala 2.13, like
Spark 4). ``python -m scorestream.runtime.jvm`` (run by ``make setup`` and the image's build stage) builds it
with Maven; the job only looks the jar up, by a digest of the module, and never compiles.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

MODULE = Path(__file__).parent / "jvm"
POM = MODULE / "pom.xml"
BUILD_COMMAND = "python -m scorestream.runtime.jvm"
# pypmml ships the Scala library and commons jars too; Spark has newer ones of its own.
PMML4S_JARS = ("pmml4s_2.13-", "spray-json_2.13-")


class JvmError(RuntimeError):
    """The JVM scorer cannot be built or found."""


def module_digest(module: Path, *inputs: str) -> str:
    """What a Maven module's jar is built from: its pom and main sources (not its tests), and
    whatever else the caller names (e.g. a jar it compiles against)."""
    h = hashlib.sha256((module / "pom.xml").read_bytes())
    sources = module / "src" / "main" / "java"
    for src in sorted(sources.rglob("*.java")):
        h.update(src.relative_to(sources).as_posix().encode())
        h.update(src.read_bytes())
    for extra in inputs:
        h.update(extra.encode())
    return h.hexdigest()[:12]


def jar_name() -> str:
    return f"scorestream-jvm-{module_digest(MODULE)}.jar"


def spark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def pypmml_jars_dir() -> Path:
    import pypmml

    return Path(pypmml.__file__).parent / "jars"


def pmml4s_jars() -> list[Path]:
    jars = pypmml_jars_dir()
    found = [j for j in sorted(jars.glob("*.jar")) if j.name.startswith(PMML4S_JARS)]
    if len(found) != len(PMML4S_JARS):
        raise JvmError(f"PMML4S jars not found in {jars}: is pypmml installed?")
    return found


def jar_dirs() -> list[Path]:
    """Where the jar is looked up: $SCORESTREAM_JVM_DIR (the image's), then Maven's target/."""
    dirs = [Path(os.environ["SCORESTREAM_JVM_DIR"])] if os.environ.get("SCORESTREAM_JVM_DIR") else []
    return [*dirs, MODULE / "target"]


def scorer_jar() -> Path:
    """The jar built from the current sources; an error naming the command that builds it."""
    name = jar_name()
    for d in jar_dirs():
        if (d / name).is_file():
            return d / name
    raise JvmError(
        f"the JVM scorer {name} (built from the current sources) is in none of "
        f"{', '.join(map(str, jar_dirs()))}: run `{BUILD_COMMAND}` (`make setup` runs it)"
    )


def build(into: Path | None = None) -> Path:
    """Build the jar with Maven, running its JUnit tests; copy it into ``into`` when given."""
    name = jar_name()
    # PMML4S 1.5.8 is not on Maven Central: the pom installs the wheel's jar under its coordinates.
    maven(POM, "install:install-file@pmml4s-from-pypmml", f"-Dpypmml.jars={pypmml_jars_dir()}")
    maven(POM, "package", f"-Dscorestream.jar={name.removesuffix('.jar')}")
    built = MODULE / "target" / name
    if into is None:
        return built
    into.mkdir(parents=True, exist_ok=True)
    partial = into / f".{name}.tmp"
    shutil.copyfile(built, partial)
    partial.replace(into / name)  # atomic: a job starting now never sees half a jar
    return into / name


def maven(pom: Path, goal: str, *args: str) -> None:
    """``mvn GOAL ARGS`` on a module, quietly; its output in the error when it fails."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JvmError("`mvn` (Apache Maven) not found: `make setup` installs it (apt-get install maven)")
    res = subprocess.run([mvn, "-B", "-q", "-f", str(pom), goal, *args], capture_output=True, text=True)
    if res.returncode != 0:
        raise JvmError(f"mvn {goal} of {pom} failed (exit {res.returncode}):\n{(res.stdout + res.stderr)[-6000:]}")


def kafka_connector_jars() -> list[Path]:
    """Spark's own Kafka source and sink with what pyspark lacks of their dependencies: none where
    the image has them among pyspark's jars already, otherwise the pinned set from the cache."""
    if any(spark_jars_dir().glob("spark-sql-kafka-0-10_*.jar")):
        return []
    from scorestream import jars

    return jars.resolve("spark-kafka")


# Set to "absent" by the PMML-only runtime image, which carries no TensorFlow jars.
TENSORFLOW_ENV = "SCORESTREAM_TENSORFLOW"
NO_TENSORFLOW = ("TensorFlow is not in this image: the PMML-only runtime image (scorestream-runtime-pmml) "
                 "serves PMML models; use scorestream-runtime for TensorFlow")


def has_tensorflow() -> bool:
    return os.environ.get(TENSORFLOW_ENV) != "absent"


def tensorflow_jars() -> list[Path]:
    """TensorFlow's Java API and its native libraries, which the scorer runs TensorFlow models with:
    the pinned set from the cache (the runtime image's copy), none in the PMML-only image. Loaded
    only when a TensorFlow model is first used (JavaCPP unpacks the native libraries then)."""
    if not has_tensorflow():
        return []
    from scorestream import jars

    return jars.resolve("tensorflow")


def spark_jars() -> list[Path]:
    """Everything to put on ``spark.jars``: the scorer, PMML4S, TensorFlow's Java API and Spark's
    Kafka connector."""
    return [scorer_jar(), *pmml4s_jars(), *tensorflow_jars(), *kafka_connector_jars()]


def main() -> int:
    """A developer's command (make setup, the image's build stage): build the jar, into
    $SCORESTREAM_JVM_DIR when set, and print where it is."""
    import sys

    into = os.environ.get("SCORESTREAM_JVM_DIR")
    try:
        print(build(Path(into) if into else None))
    except JvmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
