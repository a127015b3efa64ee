"""A three-broker Apache Kafka cluster on loopback for the fault tests (tests/test_broker_failover.py):
KRaft, each node broker and controller at once (three voters), each a JVM of its own on its own
ports and data directory, so that one can be killed -9 and started again on what it had written.

Replicated as a production cluster is (Strimzi's defaults for three brokers): replication factor 3,
``min.insync.replicas`` 2, the transaction state log and the offsets topic likewise; clients write
with ``acks=all`` (librdkafka's and the idempotent Java producer's default). Everything else the
tests run uses the single embedded broker (scorestream/tools/local/broker.py), from whose pinned
jars, settings and log layout this one is built.

Helpers: ``leader(topic, partition)``, ``coordinator(transactional_id)`` (the transaction state
log partition's leader) and ``describe_transaction`` (Kafka's own Admin API, to check it),
``kill(i)`` (SIGKILL), ``start(i)``, ``stop(i)`` (SIGTERM: a controlled shutdown),
``rolling_restart()`` (one broker at a time, the in-sync replica sets full again before the next,
as Strimzi rolls a cluster), ``isr_full()``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from scorestream.tools.local.broker import JVM_OPTS, SERVER_SETTINGS, _tail, cluster_id, free_port, java, kafka_classpath, \
    kafka_tool, log4j2_properties

from harness import orphans

HERE = Path(__file__).resolve().parent
BROKERS = 3
TXN_LOG_PARTITIONS = 4

# The single broker's settings, replicated: what differs from SERVER_SETTINGS and why.
CLUSTER_SETTINGS = {
    **SERVER_SETTINGS,
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": str(TXN_LOG_PARTITIONS),
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    # A broker killed -9 is fenced by the controller when its session lapses (9 s by default): its
    # partitions' leadership moves then. Shorter, so that a test's faults take seconds, not tens of
    # seconds; a starved broker fenced by mistake only moves leaders, which the clients follow.
    "broker.heartbeat.interval.ms": "1000",
    "broker.session.timeout.ms": "4000",
    "unclean.leader.election.enable": "false",
    # A restarted follower catches up from the leader in fewer, larger fetches.
    "num.replica.fetchers": "1",
    "replica.fetch.wait.max.ms": "100",
}


# C1 only: three brokers (re)starting on two shared cores start in a fraction of the time without
# C2's compilations, and the few thousand records a second of a test never need C2's code.
FAST_START = ("-XX:TieredStopAtLevel=1",)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (UTF-16 code units, 32-bit overflow)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def transaction_log_partition(transactional_id: str, partitions: int = TXN_LOG_PARTITIONS) -> int:
    """The __transaction_state partition whose leader coordinates a transactional id (Kafka's
    TransactionStateManager.partitionFor: Utils.abs(id.hashCode()) % partitions)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class KraftCluster:
    """Three brokers on free loopback ports; a context manager that always kills and removes them.
    Broker i (0, 1, 2) is node i + 1. Logs go to `logdir`/broker-<i>.log (appended, kept)."""

    def __init__(self, logdir: Path, host: str = "127.0.0.1"):
        self.host = host
        self.logdir = Path(logdir)
        self.ports = [free_port(host) for _ in range(BROKERS)]
        self.controller_ports = [free_port(host) for _ in range(BROKERS)]
        if len(set(self.ports + self.controller_ports)) != 2 * BROKERS:  # free_port may hand one out twice
            raise RuntimeError("free ports collided; try again")
        self.bootstrap = ",".join(f"{host}:{p}" for p in self.ports)
        self.procs: list[subprocess.Popen | None] = [None] * BROKERS
        self.root: Path | None = None
        self._classpath: str | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start_all(self, timeout: float = 120.0) -> "KraftCluster":
        self._classpath = kafka_classpath()
        self.root = Path(tempfile.mkdtemp(prefix="scorestream-kraft-"))
        orphans.mark_folder(self.root)  # a killed run's goes at the next session's start
        self.logdir.mkdir(parents=True, exist_ok=True)
        try:
            cid = cluster_id()
            formats = []
            for i in range(BROKERS):  # the three at once: a JVM start each, seconds on a loaded machine
                props = self._write_config(i)
                with open(self.log(i), "ab") as out:
                    # Static voters (controller.quorum.voters): each node formatted alike, no --standalone.
                    formats.append(subprocess.Popen(
                        kafka_tool("kafka.tools.StorageTool", "format", "-t", cid, "-c", str(props),
                                   jvm_opts=(self._log4j(i),), classpath=self._classpath),
                        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
            for i, fmt in enumerate(formats):
                try:
                    code = fmt.wait(timeout)
                except subprocess.TimeoutExpired:
                    fmt.kill()
                    code = fmt.wait()
                if code != 0:
                    raise RuntimeError(f"formatting node {i + 1} failed{_tail(self.log(i))}")
            # All three at once: none answers before a majority of voters has elected a leader.
            for i in range(BROKERS):
                self._launch(i)
            for i in range(BROKERS):
                self.wait_answers(i, timeout)
            return self
        except BaseException:
            self.close()
            raise

    def _node_dir(self, i: int) -> Path:
        assert self.root is not None
        return self.root / f"node-{i + 1}"

    def log(self, i: int) -> Path:
        return self.logdir / f"broker-{i}.log"

    def _log4j(self, i: int) -> str:
        return f"-Dlog4j2.configurationFile={self._node_dir(i) / 'log4j2.properties'}"

    def _write_config(self, i: int) -> Path:
        d = self._node_dir(i)
        d.mkdir(parents=True, exist_ok=True)
        h = self.host
        settings = {
            **CLUSTER_SETTINGS,
            "node.id": str(i + 1),
            "listeners": f"PLAINTEXT://{h}:{self.ports[i]},CONTROLLER://{h}:{self.controller_ports[i]}",
            "advertised.listeners": f"PLAINTEXT://{h}:{self.ports[i]},CONTROLLER://{h}:{self.controller_ports[i]}",
            "controller.quorum.voters": ",".join(f"{n + 1}@{h}:{self.controller_ports[n]}" for n in range(BROKERS)),
            "log.dirs": str(d / "data"),
        }
        props = d / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (d / "log4j2.properties").write_text(log4j2_properties(self.log(i)))
        return props

    def _launch(self, i: int) -> None:
        assert self.procs[i] is None or self.procs[i].poll() is not None, f"broker {i} is running"
        with open(self.log(i), "ab") as out:
            # Its own session (process group): kill(i) reaches the JVM and anything it forks.
            self.procs[i] = subprocess.Popen(
                [java(), *JVM_OPTS, *FAST_START, self._log4j(i), "-cp", self._classpath, "kafka.Kafka",
                 str(self._node_dir(i) / "server.properties")],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_answers(self, i: int, timeout: float = 120.0) -> None:
        """Until broker i answers metadata requests on its own port (registered with the quorum)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.procs[i]
            if p is None or p.poll() is not None:
                raise RuntimeError(f"broker {i} exited ({p and p.returncode}){_tail(self.log(i))}")
            try:
                meta = self._admin(f"{self.host}:{self.ports[i]}").list_topics(timeout=2)
                if any(b.id == i + 1 for b in meta.brokers.values()):
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"broker {i} did not answer within {timeout:.0f}s{_tail(self.log(i))}")

    def kill(self, i: int) -> None:
        """SIGKILL broker i's process group: no controlled shutdown, nothing flushed."""
        p = self.procs[i]
        if p is not None and p.poll() is None:
            _signal_group(p.pid, signal.SIGKILL)
            p.wait(30)

    def stop(self, i: int, timeout: float = 60.0) -> None:
        """SIGTERM: a controlled shutdown (its leaderships moved first), as a rolling restart does."""
        p = self.procs[i]
        if p is not None and p.poll() is None:
            _signal_group(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill(i)

    def start(self, i: int, timeout: float = 120.0) -> None:
        """Broker i again, on its own data directory and ports."""
        self._launch(i)
        self.wait_answers(i, timeout)

    def alive(self, i: int) -> bool:
        p = self.procs[i]
        return p is not None and p.poll() is None

    def close(self) -> None:
        """Kill every broker (a test's end needs no controlled shutdown) and remove the data."""
        for i in range(BROKERS):
            self.kill(i)
        self.procs = [None] * BROKERS
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> "KraftCluster":
        return self.start_all()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- questions -------------------------------------------------------------------------------

    def _admin(self, bootstrap: str | None = None):
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": bootstrap or self.bootstrap})

    def metadata(self, timeout: float = 10.0):
        return self._admin().list_topics(timeout=timeout)

    def leader(self, topic: str, partition: int = 0) -> int:
        """The index (0-2) of the broker leading a topic-partition, as the cluster's metadata says now."""
        return self.metadata().topics[topic].partitions[partition].leader - 1

    def coordinator(self, transactional_id: str) -> int:
        """The index of the broker coordinating a transactional id: the leader of its
        __transaction_state partition."""
        return self.leader("__transaction_state", transaction_log_partition(transactional_id))

    def describe_transaction(self, transactional_id: str) -> tuple[int, str]:
        """(coordinator index, state) from Kafka's own Admin.describeTransactions (a JVM start,
        seconds): the check on ``coordinator``."""
        out = subprocess.run([java(), "-Xmx128m", "-cp", self._classpath or kafka_classpath(),
                              str(HERE / "DescribeTransaction.java"), self.bootstrap, transactional_id],
                             capture_output=True, text=True, timeout=120, check=True)
        node, state = out.stdout.split()[-2:]
        return int(node) - 1, state

    def isr_full(self) -> bool:
        """Whether every partition (internal topics included) has all its replicas in sync and a leader."""
        try:
            meta = self.metadata(5)
        except Exception:
            return False
        if len(meta.brokers) < BROKERS:
            return False
        return all(p.leader >= 0 and set(p.isrs) == set(p.replicas)
                   for t in meta.topics.values() for p in t.partitions.values())

    def wait_isr_full(self, timeout: float = 180.0) -> float:
        """Seconds until every in-sync replica set is full again."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.isr_full():
                return time.monotonic() - started
            time.sleep(0.2)
        raise TimeoutError(f"in-sync replica sets not full within {timeout:.0f}s")

    def rolling_restart(self, between=lambda i: None) -> list[float]:
        """Restart the brokers one at a time, controllers' leader last (as Strimzi rolls a cluster:
        the active controller last, each broker's partitions in sync again before the next one
        goes). Returns each broker's seconds from its stop to full in-sync replica sets;
        ``between(i)`` runs after broker i is back (a test's check that the stream goes on)."""
        seconds = []
        for i in self.roll_order():
            started = time.monotonic()
            self.stop(i)
            self.start(i)
            self.wait_isr_full()
            seconds.append(time.monotonic() - started)
            between(i)
        return seconds

    def roll_order(self) -> list[int]:
        """Brokers in restart order: the active controller last (one election, not several)."""
        try:
            admin = self._admin()  # held until the answer: a client collected meanwhile fails its futures
            active = admin.describe_cluster(request_timeout=10).result(15).controller
            last = active.id - 1 if active is not None else None
        except Exception:
            last = None
        order = [i for i in range(BROKERS) if i != last]
        return order + ([last] if last is not None and 0 <= last < BROKERS else [])

    def create_topics(self, topics: dict[str, int], config: dict[str, dict[str, str]] | None = None,
                      like: dict[str, str] | None = None) -> None:
        """Topics of replication factor 3 (name -> partitions), waited for until each partition
        has a leader and a full in-sync replica set. ``like`` (name -> existing topic): the new
        topic's replicas placed as the existing one's, in the same order, so that the same broker
        leads both (the first in-sync replica of the list is elected, however leaders move)."""
        from confluent_kafka.admin import NewTopic

        admin = self._admin()
        meta = admin.list_topics(timeout=10).topics
        deadline = time.monotonic() + 30
        while not set((like or {}).values()) <= set(meta):  # a broker may learn of a new topic a moment late
            if time.monotonic() > deadline:
                raise RuntimeError(f"topics {sorted(set(like.values()) - set(meta))} not in the cluster's metadata")
            time.sleep(0.2)
            meta = admin.list_topics(timeout=10).topics

        def new_topic(t: str, n: int) -> NewTopic:
            conf = (config or {}).get(t, {})
            if like and t in like:
                parts = meta[like[t]].partitions
                return NewTopic(t, num_partitions=len(parts), config=conf,
                                replica_assignment=[parts[p].replicas for p in sorted(parts)])
            return NewTopic(t, num_partitions=n, replication_factor=BROKERS, config=conf)

        new = [new_topic(t, n) for t, n in topics.items()]
        for fut in admin.create_topics(new).values():
            fut.result(30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            meta = admin.list_topics(timeout=10).topics
            if all(t in meta and len(meta[t].partitions) == n and all(
                    p.leader >= 0 and len(p.isrs) == BROKERS for p in meta[t].partitions.values())
                    for t, n in topics.items()):
                return
            time.sleep(0.1)
        raise RuntimeError(f"topics {sorted(topics)} not replicated in time")

    def set_topic_config(self, topic: str, **settings: str) -> None:
        """Change a topic's settings live (incremental: the others stay)."""
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in settings.items()]
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
        admin = self._admin()  # held until the answer: a client collected meanwhile fails its futures
        for fut in admin.incremental_alter_configs([resource]).values():
            fut.result(30)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
