"""A single-node Apache Kafka broker for the demo and the tests: KRaft, on loopback, on disk.

The broker's jars are the pinned ``kafka-broker`` set of ``scorestream.jars`` (Maven Central,
checked against ``scorestream/jars.lock``); it runs as a ``java`` subprocess in combined mode
(broker and controller, node 1), with its data in a temporary directory that ``stop()`` removes.
Topics are never created implicitly: the product creates or requires its own.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from contextlib import closing
from pathlib import Path

from scorestream.tools.local.owner import mark_folder

# A small JVM: the broker holds a few small topics. SerialGC keeps the footprint lowest on two
# cores (measured against G1; no pause matters here); ExitOnOutOfMemoryError turns a heap
# exhaustion into a dead broker the caller sees, not a wedged one.
JVM_OPTS = (
    "-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
TOOL_JVM_OPTS = ("-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")

# Broker settings beyond the listeners and directories. Replication factors are 1 (one node);
# internal topics get few partitions and small indexes so that the first use is quick.
SERVER_SETTINGS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "auto.create.topics.enable": "false",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "share.coordinator.state.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "log.segment.bytes": str(16 << 20),
    "log.index.size.max.bytes": str(1 << 20),
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": str(8 << 20),  # 128 MiB by default, on the heap
    "log.cleaner.backoff.ms": "1000",
}


def free_port(host: str = "127.0.0.1") -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    path = str(Path(home, "bin", "java")) if home and Path(home, "bin", "java").is_file() else shutil.which("java")
    if not path:
        raise RuntimeError("the Kafka broker needs `java` (a JDK 17+; `make setup` installs one)")
    return path


# The broker's jar set: the pinned release; the compatibility tier passes "kafka-broker-oldest".
BROKER_JARS = "kafka-broker"


def kafka_classpath(jar_set: str = BROKER_JARS) -> str:
    """A pinned broker's jars (a ``kafka-broker`` set of ``scorestream.jars``, verified on each call)."""
    from scorestream.jars import resolve

    return os.pathsep.join(str(j) for j in resolve(jar_set))


def kafka_tool(main_class: str, *args: str, jvm_opts: tuple[str, ...] = (), classpath: str | None = None) -> list[str]:
    """The command line of one of Apache Kafka's own tools (a main class of the broker jars), in a
    small JVM. ``classpath``: ``kafka_classpath()`` when the caller has it already."""
    return [java(), *TOOL_JVM_OPTS, *jvm_opts, "-cp", classpath or kafka_classpath(), main_class, *args]


def cluster_id() -> str:
    """What `kafka-storage.sh random-uuid` prints: a uuid4 as unpadded base64url, never starting
    with "-" (as Kafka's Uuid.randomUuid: the storage tool would read such an id as an option and
    refuse to format, one start in 64)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


class EmbeddedBroker:
    """An Apache Kafka broker on free ports of `host` (loopback unless pods must reach it); a
    context manager that always stops it.

    Its log goes to `log` (appended), or to its data directory, removed with it, when None.
    `jars`: the broker release's jar set (scorestream.jars).
    """

    def __init__(self, port: int | None = None, log: Path | None = None, host: str = "127.0.0.1",
                 jars: str = BROKER_JARS):
        self.jars = jars
        self.host = host
        self.port = port or free_port(host)
        self.bootstrap = f"{host}:{self.port}"
        self.log = Path(log) if log else None
        self.proc: subprocess.Popen | None = None
        self.data_dir: Path | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def version(self) -> str:
        """The broker's Apache Kafka release, as its jar names it."""
        from scorestream.jars import resolve

        return next(j.name.removeprefix("kafka_2.13-").removesuffix(".jar") for j in resolve(self.jars)
                    if j.name.startswith("kafka_2.13-"))

    def start(self, timeout: float = 60.0) -> "EmbeddedBroker":
        classpath = kafka_classpath(self.jars)
        self.data_dir = Path(tempfile.mkdtemp(prefix="scorestream-kafka-"))
        mark_folder(self.data_dir)  # a killed run's goes at the next test session's start
        try:
            log = self.log or self.data_dir / "kafka.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            props = self._write_config(log)
            log4j = f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}"
            with open(log, "ab") as out:
                fmt = subprocess.run(
                    kafka_tool("kafka.tools.StorageTool", "format", "-t", cluster_id(), "-c", str(props),
                               "--standalone", jvm_opts=(log4j,), classpath=classpath),
                    stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                )
                if fmt.returncode != 0:
                    raise RuntimeError(f"formatting Kafka's storage failed (exit {fmt.returncode}){_tail(log)}")
                # Its own session (process group), so that stop() reaches the JVM and anything it forks.
                self.proc = subprocess.Popen(
                    [java(), *JVM_OPTS, log4j, "-cp", classpath, "kafka.Kafka", str(props)],
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"Kafka exited with {self.proc.returncode}{_tail(log)}")
                if self._answers():
                    return self
                time.sleep(0.1)
            raise RuntimeError(f"Kafka did not answer on {self.bootstrap} within {timeout}s{_tail(log)}")
        except BaseException:
            self.stop()
            raise

    def _write_config(self, log: Path) -> Path:
        assert self.data_dir is not None
        controller = free_port(self.host)
        while controller == self.port:
            controller = free_port(self.host)
        settings = {
            **SERVER_SETTINGS,
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{controller}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{controller}",
            # A dynamic quorum of one (KIP-853): `format --standalone` makes this node its voter.
            "controller.quorum.bootstrap.servers": f"{self.host}:{controller}",
            "log.dirs": str(self.data_dir / "data"),
        }
        props = self.data_dir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.data_dir / "log4j2.properties").write_text(log4j2_properties(log))
        return props

    def _answers(self) -> bool:
        from confluent_kafka.admin import AdminClient

        try:
            with closing(socket.create_connection((self.host, self.port), timeout=0.5)):
                pass
        except OSError:
            return False
        try:
            AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=2)
            return True
        except Exception:
            return False

    def stop(self, timeout: float = 15.0) -> None:
        """Terminate the process group (SIGTERM, then SIGKILL) and remove the data directory."""
        if self.proc is not None:
            if self.proc.poll() is None:
                _signal_group(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    _signal_group(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(10)
            # Whatever else is left in the group (the JVM forks nothing, but be sure).
            _signal_group(self.proc.pid, signal.SIGKILL)
            self.proc = None
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


KafkaBroker = EmbeddedBroker


def log4j2_properties(log: Path) -> str:
    """A broker's logging: everything to the one file, nothing to the console; Kafka's chatty
    loggers at WARN."""
    return ("status = warn\n"
            "appender.file.type = File\n"
            "appender.file.name = file\n"
            f"appender.file.fileName = {log}\n"
            "appender.file.append = true\n"
            "appender.file.layout.type = PatternLayout\n"
            "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = INFO\n"
            "rootLogger.appenderRef.file.ref = file\n"
            "logger.state.name = state.change.logger\n"
            "logger.state.level = WARN\n"
            "logger.request.name = kafka.request.logger\n"
            "logger.request.level = WARN\n")


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _tail(log: Path, lines: int = 30) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return f" (log: {log}):\n" + "\n".join(text)


def create_topics(bootstrap: str, topics: dict[str, int], config: dict[str, dict[str, str]] | None = None) -> None:
    """Create topics (name -> partitions) that do not exist yet, and wait until they do."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=10).topics)
    new = [
        NewTopic(t, num_partitions=n, replication_factor=1, config=(config or {}).get(t, {}))
        for t, n in topics.items()
        if t not in existing
    ]
    if new:
        for topic, fut in admin.create_topics(new).items():
            try:
                fut.result(30)
            except Exception as e:  # a concurrent creator is fine
                if "TOPIC_ALREADY_EXISTS" not in str(e):
                    raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=10).topics
        # Leaders too: a partition listed before its leader is elected refuses produce requests.
        if all(
            t in meta and len(meta[t].partitions) == n and all(p.leader >= 0 for p in meta[t].partitions.values())
            for t, n in topics.items()
        ):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topics {sorted(topics)} did not appear")
