"""Peer (K): the reference architecture, Kafka Streams + PMML4S, as a Java process
(jvm/src/main/java/dev/scorestream/bench/); and (K-TF), the same peer serving a TensorFlow
SavedModel with TensorFlow's Java API.

The benchmarks' Maven module (jvm/) is built on first use (jvm_build.py). Kafka Streams and
TensorFlow's Java API come from Maven Central, checked against scorestream/jars.lock
(``scorestream.jars``); PMML4S is the one scorestream scores with (the pypmml wheel's), so both
peers run one version.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from jvm_build import bench_jar

MAIN_CLASS = "dev.scorestream.bench.KStreamsPeer"
JVM_OPTS = ("-Xmx1g",)  # as the job's Spark driver (spark.driver.memory 1g); JVM defaults otherwise
# The set also carries PMML4S 0.9.15 (the newest on Maven Central) and its Scala and commons jars:
# scoring uses scorestream's PMML4S instead, so those are left out.
NOT_KAFKA = ("pmml4s_", "spray-json_", "scala-", "commons-")


def kafka_streams_jars() -> list[Path]:
    """kafka-streams 4.3.1 and its runtime closure (kafka-clients, Jackson, RocksDB, slf4j...)."""
    from scorestream.jars import resolve

    return [j for j in resolve("kstreams-peer") if not j.name.startswith(NOT_KAFKA)]


def tensorflow_jars() -> list[Path]:
    """TensorFlow's Java API 1.1.0 with its linux-x86_64 native libraries (JavaCPP unpacks them
    into ~/.javacpp/cache the first time a peer loads them)."""
    from scorestream.jars import resolve

    return resolve("tensorflow")


def pmml4s_jars() -> list[Path]:
    """PMML4S as scorestream scores with it: pmml4s_2.13-1.5.8 and spray-json from the pypmml
    wheel, with the Scala 2.13 library and the commons jars that the same wheel ships for them."""
    from scorestream.runtime.jvm import pmml4s_jars as scorestream_pmml4s

    own = scorestream_pmml4s()
    return own + [j for j in sorted(own[0].parent.glob("*.jar")) if j not in own]


def classpath(model_format: str = "pmml") -> str:
    """The peer's jars; TensorFlow's only for a peer that serves a TensorFlow model."""
    tensorflow = tensorflow_jars() if model_format == "tensorflow" else []
    return os.pathsep.join(map(str, [bench_jar(), *kafka_streams_jars(), *pmml4s_jars(), scorer_jar(), *tensorflow]))


def scorer_jar() -> Path:
    """scorestream's scorer jar, for its record decoder only (RecordFields, no Spark classes): the same parsing in both peers."""
    from scorestream.runtime.jvm import scorer_jar as find

    return find()


class PeerProcess:
    """The Kafka Streams peer as a JVM process in its own process group. ``model_format``: the
    format of the models it is to serve, "pmml" or "tensorflow" (which puts TensorFlow's jars on its
    classpath); the peer picks each model's class by its descriptor's format."""

    trigger_seconds = 0.0  # no micro-batches: records are processed as they are polled

    def __init__(self, bootstrap: str, app_id: str, topics: dict[str, str], workdir: Path,
                 model_format: str = "pmml", **settings: str):
        self.model_format = model_format
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / f"{app_id}.log"
        self.args = [bootstrap, app_id, topics["data"], topics["out"], topics["models"], str(self.workdir / "state")]
        self.settings = settings  # Kafka Streams settings over the peer's own (KStreamsPeer.main)
        self.proc: subprocess.Popen | None = None
        self.started = 0.0  # wall clock at start, comparable with the broker's timestamps

    def start(self) -> "PeerProcess":
        cmd = ["java", *JVM_OPTS, "-cp", classpath(self.model_format), MAIN_CLASS, *self.args,
               *(f"{k}={v}" for k, v in self.settings.items())]
        # TensorFlow's C++ logging as scorestream's workers set it (runtime/tf_model._tf): warnings and errors.
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
        self.started = time.time()
        self.proc = subprocess.Popen(cmd, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 120.0) -> "PeerProcess":
        """Until Kafka Streams says RUNNING: models restored, tasks assigned."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"the Kafka Streams peer exited; log {self.log_path}:\n{self.tail()}")
            if "state RUNNING" in self.log_path.read_text(errors="replace"):
                return self
            time.sleep(0.2)
        raise TimeoutError(f"the Kafka Streams peer is not RUNNING after {timeout}s:\n{self.tail()}")

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the JVM's shutdown hook closes Kafka Streams
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
