"""delivery: exactlyOnce on real parts: Apache Kafka, the real job, Spark's standalone cluster with
executors in their own JVMs. Through kill -9 of the driver, kill -9 of an executor, a stateless
upgrade and a rescale, a read_committed consumer sees every input offset exactly once across the
output and dead-letter topics. Zombies are fenced: a producer holding a partition's transactional
id, with a transaction open, from before a restart; and an executor cut off from the network while
it writes (its worker, a machine of its own, in a network namespace of the test's whose packets are
dropped), given up by its driver, then let through to the broker after its partitions moved on.

SCORESTREAM_EO_RECORDS sets the stream's size (CI: 60,000; the issue's full run: 200,000).
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections import Counter
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from scorestream import naming
from scorestream.tools.demo import feed, models
from scorestream.tools.local.broker import EmbeddedBroker
from harness.netns import OwnHost, Unavailable
from harness.quota import producers_throttled
from harness.standalone import StandaloneCluster, standalone_conf
from harness.streaming import Stream, drained, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.broker]

RECORDS = int(os.environ.get("SCORESTREAM_EO_RECORDS", "60000"))
PARTITIONS = 4


def read_committed_positions(s, which: str, isolation: str = "read_committed") -> Counter:
    """(partition, offset) of each input found in the output or dead-letter topic, as a
    read_committed consumer sees them: what a transaction aborted, or a fenced producer left open,
    never counts (``isolation="read_uncommitted"``: what such a reader would see)."""
    c = Consumer({"bootstrap.servers": s.broker.bootstrap, "group.id": "eo-check", "enable.auto.commit": False,
                  "isolation.level": isolation, "auto.offset.reset": "earliest"})
    seen: Counter = Counter()
    try:
        topic = s.topics[which]
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        for m in drained(c):
            if m.key() == b"zombie":
                seen[("zombie", m.partition())] += 1
            elif which == "out":
                src = json.loads(m.value())["source"]
                seen[(src["partition"], src["offset"])] += 1
            else:
                h = {k: v.decode() for k, v in m.headers() or []}
                seen[(int(h["scorestream.source.partition"]), int(h["scorestream.source.offset"]))] += 1
    finally:
        c.close()
    return seen


def assert_each_input_once(s, n: int, partitions: int, broken_every: int = 997) -> None:
    """Every input offset of a stream of `n` records (record i in partition i % partitions) is seen
    exactly once by a read_committed reader, across the output and dead-letter topics; every
    `broken_every`-th record is a dead letter; no fenced producer's record became visible."""
    out, dead = read_committed_positions(s, "out"), read_committed_positions(s, "dlq")
    assert not any(k[0] == "zombie" for k in out), "a fenced producer's record became visible"
    seen = out + dead
    missing = {(i % partitions, i // partitions) for i in range(n)} - set(seen)
    duplicated = {k: c for k, c in seen.items() if c > 1}
    assert not missing, f"{len(missing)} input offsets missing, e.g. {sorted(missing)[:5]}"
    assert not duplicated, f"{len(duplicated)} input offsets seen more than once, e.g. {list(duplicated.items())[:5]}"
    assert sum(dead.values()) == len(range(0, n, broken_every))


def written_again(s) -> int:
    """Records a read_uncommitted reader sees more than once: what aborted transactions had sent."""
    seen = read_committed_positions(s, "out", "read_uncommitted") + read_committed_positions(s, "dlq", "read_uncommitted")
    return sum(c - 1 for c in seen.values())


def open_transaction_of_partition_0(s) -> Producer:
    """A producer holding partition 0's transactional id with a transaction open and a record sent
    in it, as a writer from before a restart would: the restarted job must fence it."""
    producer = Producer({"bootstrap.servers": s.broker.bootstrap, "transactional.id":
                         naming.transactional_prefix("test", s.name, s.topics["data"]) + "-0"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(s.topics["out"], key=b"zombie", value=b"{}")
    producer.flush(10)
    return producer


def committed(s, partitions: list[int] | None = None) -> int:
    """Input records the data group's committed offsets account for (the transactions' commits)."""
    c = Consumer({"bootstrap.servers": s.broker.bootstrap, "group.id": s.config().data_group,
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        tps = c.committed([TopicPartition(s.topics["data"], p) for p in partitions or range(s.partitions)], timeout=10)
        return sum(max(0, tp.offset) for tp in tps)
    finally:
        c.close()


def executors_of_latest_app(work: Path) -> list[int]:
    """Process ids of this test's standalone executors of the newest application (the job running
    now): those running in its workers' folder, not another cluster's on the same machine."""
    found: dict[str, list[int]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" not in args or b"--app-id" not in args:
                continue
            if not Path(os.readlink(f"/proc/{pid}/cwd")).is_relative_to(work):
                continue
        except OSError:
            continue
        found.setdefault(args[args.index(b"--app-id") + 1].decode(), []).append(int(pid))
    return found[max(found)] if found else []


def live_executors(work: Path, gone: set[int]) -> list[int]:
    """The newest application's executors still running, less those a test killed or paused (`gone`)."""
    return [p for p in executors_of_latest_app(work) if p not in gone and process_state(p) not in ("Z", "X", "")]


def executor_stderr(work: Path, pid: int) -> Path:
    """The standalone worker's log of the executor process `pid` (work/<app>/<executor id>/stderr)."""
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    app, executor = (args[args.index(flag) + 1].decode() for flag in (b"--app-id", b"--executor-id"))
    return work / app / executor / "stderr"


def process_state(pid: int) -> str:
    """The kernel's one-letter state of a process ("" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def fenced_in(log: Path) -> str:
    """The exception that refused a transaction of an executor's because a successor fenced it, as
    its log names it ("" for none)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return next((e for e in ("ProducerFencedException", "InvalidProducerEpochException") if e in text), "")


@contextmanager
def partitioned(host: OwnHost):
    """A machine cut off from the network (every packet of its test host dropped), healed on exit."""
    host.cut()
    try:
        yield host
    finally:
        host.heal()


def log_tail(log: Path, size: int = 1 << 16) -> str:
    """The end of a log: polled every few milliseconds, never read whole."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def writing(log: Path) -> bool:
    """Whether an executor's log shows it inside a transaction: its latest task has begun one
    (PartitionTransactions logs it once it has read where the partition's outputs are committed:
    from there on the task writes) and has not finished."""
    text = log_tail(log)
    start = text.rfind("Running task")
    found = re.search(r"\(TID (\d+)\)", text[start:]) if start >= 0 else None
    return bool(found) and "Transaction begun for" in text[start:] and not re.search(
        rf"(Finished|Exception in) task .*\(TID {found.group(1)}\)", text[start:])


def one_writing(work: Path, executors: list[int]) -> int | None:
    """The first of `executors` inside a transaction now (``writing``), if any."""
    for pid in executors:
        try:
            if writing(executor_stderr(work, pid)):
                return pid
        except OSError:  # gone meanwhile
            continue
    return None


def zombie_fenced(s, job, work: Path, gone: set[int], keep_going, hosts: list[OwnHost], attempts: int = 3,
                  slowed=nullcontext) -> tuple:
    """A zombie executor, fenced. The machine of an executor inside a transaction (the first of
    ``live_executors(work, gone)`` seen so; added to `gone`) is cut off from the network: its
    driver, its master and the broker hear nothing from it, nor it from them. Its driver gives it
    up (heartbeats) and its work to another executor, until every partition is committed past where
    it was (``keep_going(job, moved_on)`` waits for that and returns the job, restarted if its
    driver had to be): each partition's transactional id has been taken over (initTransactions) by
    a successor. Then the path to the broker heals, and only that: the zombie goes on with its open
    transaction and the broker refuses it; none of its records becomes visible
    (``assert_each_input_once``). Its worker copies what it logs meanwhile. Then the rest heals:
    its worker hears from its master that its executor was given up, and kills it. (Healed all at
    once, the worker or the driver may stop the executor before its producer hears from the broker.)

    Catching a task inside its transaction: `slowed()` is entered from the search to the cut (a
    micro-batch's transaction may last milliseconds: the caller makes it last seconds). The task
    may still end between the log's last line and the cut: then another executor is cut off, up
    to `attempts` in all (found at once from its log, or by no refusal). Returns the job and the
    refusal's exception (and attempt)."""
    for attempt in range(1, attempts + 1):
        with ExitStack() as cut:
            with slowed():
                executor = wait_until(lambda: one_writing(work, live_executors(work, gone)), timeout=300,
                                      what="an executor inside a transaction", every=0.02)
                gone.add(executor)
                host = cut.enter_context(partitioned(next(h for h in hosts if h.holds(executor))))
            log = executor_stderr(work, executor)
            # A transaction open at the cut cannot end (its commit needs the broker): a log that
            # shows the task ended a moment after the cut shows it ended before. Nothing to fence:
            # healed at once, the executor goes on as before, and another try follows.
            time.sleep(1.0)
            if not writing(log):
                gone.discard(executor)
                continue
            at = [committed(s, [p]) for p in range(s.partitions)]
            job = keep_going(job, lambda: all(committed(s, [p]) > at[p] for p in range(s.partitions)))
            host.let_through(s.broker.host, s.broker.port)
            try:
                wait_until(lambda: fenced_in(log), timeout=120, what="the zombie refused as fenced")
            except TimeoutError:
                continue
            return job, f"{fenced_in(log)} (attempt {attempt})"
    raise AssertionError(f"no executor cut off was refused as fenced in {attempts} attempts")


# The worst zombie: one whose requests outlive the partition (a minute or two on a loaded
# machine), so that it goes on with its transaction once it reaches the broker again. With the
# clients' defaults (30 s, 2 min) its producer gives its requests up while cut off, and may fail
# its task before it reaches the broker again.
ZOMBIE_CLIENT = {"request.timeout.ms": "600000", "delivery.timeout.ms": "900000"}


# Spark's own defence against zombies: an executor exits once its driver's connection has been
# quiet for spark.network.timeout with requests outstanding, or after 60 failed heartbeats. A
# partition shorter than that, and longer than the driver takes to give the executor up (the same
# timeout), leaves a zombie: its task goes on once the network heals, and only the broker stops it.
# Here the driver gives an executor up after 20 s (eo_conf) and executors give their driver up after
# ten minutes (their JVMs' own setting: a spark.rpc.* property an executor starts with stays), so
# that the zombie lives on however long its partitions take to move on.
ZOMBIE_EXECUTOR = {"spark.executorEnv.JAVA_TOOL_OPTIONS": "-Dspark.rpc.io.connectionTimeout=600s",
                   "spark.executor.heartbeat.maxFailures": "1000"}


def eo_conf(executors: int, cluster: StandaloneCluster | None = None) -> dict[str, str]:
    # A cut-off executor is declared lost within seconds, not Spark's two minutes: the zombie's
    # tasks go to the other executor while the test waits. Its driver so gives it up (heartbeats)
    # before its master gives up its cut-off worker (a minute).
    # The master launches executors while the app has cores to take (spark.cores.max, all by
    # default): on a cluster of more workers than executors, the cap keeps it to `executors`.
    return {**standalone_conf(executors, cluster), "spark.network.timeout": "20s",
            "spark.network.timeoutInterval": "2s", "spark.executor.heartbeatInterval": "2s",
            "spark.cores.max": str(executors)}


# TensorFlow scores in a stage of its own (Scorer.tensorFlow, thousands of rows a call), between the
# source and the transactional sink: each input partition must still reach the sink whole and in
# order. (PMML's kill -9 of the driver is the first fault of the test after this one.)
def test_kill_9_of_a_tensorflow_job_writes_nothing_twice(serving, demo_models):
    """In one JVM: kill -9 of the job mid-stream, restart, every input once."""
    s = serving(partitions=2, delivery="exactlyOnce", kafka={"maxOffsetsPerTrigger": 500})
    s.publish(demo_models["keras"])
    rows = feed.wine_rows()
    records = feed.wine_records([rows[i % len(rows)] for i in range(6000)])
    records[1234] = (b"bad", b"{broken")
    n = s.produce(records)
    job = s.start().wait_ready()
    wait_until(lambda: committed(s) >= 1500, timeout=180, what="1,500 committed")
    job.kill()
    again = s.start().wait_ready()
    wait_until(lambda: committed(s) >= n, timeout=240, what="every record committed")
    assert again.stop() == 0
    seen = read_committed_positions(s, "out") + read_committed_positions(s, "dlq")
    assert set(seen) == {(i % 2, i // 2) for i in range(n)}
    assert max(seen.values()) == 1, {k: c for k, c in seen.items() if c > 1}


@pytest.fixture(scope="module")
def hosts():
    """Three test hosts of the test's own (harness/netns.py), a worker's machine each: the second
    and third reach the first's end of its pair, where the master, the job's driver and its broker
    listen. Removed however the tests end, and checked gone: the host's namespaces and links as
    they were (the rules a test adds live inside the namespaces)."""
    made: list[OwnHost] = []
    try:
        for _ in range(3):
            try:
                made.append(OwnHost.make())
            except Unavailable as e:
                pytest.skip(f"the zombie's network partition needs test hosts of our own: {e}")
            # A healed partition's connections resume within 5 s, not after TCP's backoff (up to
            # two minutes), and outlive a partition of 20 minutes: the test waits less for the
            # zombie's next send.
            made[-1].retransmit_within(5000)
        for h in made[1:]:
            h.route_to(made[0].ours)
        yield made
    finally:
        for h in made:
            h.remove()
    left = [h.name for h in made
            if Path(f"/run/netns/{h.name}").exists() or Path(f"/sys/class/net/{h.name}-a").exists()]
    assert not left, f"test hosts left on the host: {left}"


@pytest.fixture(scope="module")
def machines_apart(hosts, tmp_path_factory):
    """``machines`` (harness/standalone.py) with each worker on a test host of its own: one can be
    cut off from the network."""
    c = StandaloneCluster(tmp_path_factory.mktemp("machines"), cores=1, workers=3, hosts=hosts).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def broker_apart(hosts, tmp_path_factory):
    """A broker the workers' executors reach: on the first host's end of its pair."""
    with EmbeddedBroker(host=hosts[0].ours, log=tmp_path_factory.mktemp("broker") / "kafka.log") as b:
        yield b


# Three job starts and two executor replacements: minutes each when the cores are shared.
@pytest.mark.timeout(3000)
def test_exactly_once_through_kills_a_zombie_an_upgrade_and_a_rescale(serving, machines_apart, broker_apart, hosts):
    s = serving(on=broker_apart, partitions=PARTITIONS, delivery="exactlyOnce",
                kafka={"maxOffsetsPerTrigger": 8000, "properties": ZOMBIE_CLIENT},
                spark={"master": machines_apart.master, "conf": {**eo_conf(2, machines_apart), **ZOMBIE_EXECUTOR}})
    s.publish(models.descriptor("tree", "1", "pmml", models.tree_pmml()))
    # A live stream over about two and a half minutes, and more where the faults take longer
    # (flowing): every fault below lands while records flow. Every 997th record is broken: dead
    # letters count too.
    chunk = max(PARTITIONS, RECORDS // 600 // PARTITIONS * PARTITIONS)  # whole rounds: record i in i % PARTITIONS
    streams = [Stream(s, RECORDS, chunk=chunk, pause=0.25, broken_every=997)]
    work = Path(machines_apart.workdir) / "work"  # the workers' folder: each executor runs in a folder of its own there
    started = time.monotonic()
    streams[0].start()
    n = RECORDS
    steps: list[str] = []

    def flowing() -> None:
        """Records still flowing for the next fault: when the stream is over (the faults before
        took long), another of a tenth as many records follows it, record numbers going on."""
        nonlocal n
        if not streams[-1].is_alive():
            more = RECORDS // 10 // PARTITIONS * PARTITIONS
            streams.append(Stream(s, more, chunk=chunk, pause=0.25, start=n, broken_every=997))
            streams[-1].start()
            n += more

    # Generous: on a shared 2-core machine an executor's first batch compiles for minutes.
    def past(fraction: float, timeout: float = 600) -> None:
        wait_until(lambda: committed(s) >= fraction * n, timeout=timeout, what=f"{fraction:.0%} committed")

    # 1. kill -9 of the driver mid-stream (its executors, in their own JVMs, go with their driver).
    job = s.start().wait_ready(timeout=240)
    past(0.1)
    job.kill()
    steps.append(f"driver killed at {committed(s)}")

    # A producer holding partition 0's transactional id from before the restart, with a
    # transaction open: the restarted job's first task on partition 0 must fence it.
    zombie = open_transaction_of_partition_0(s)

    # 2. kill -9 of an executor.
    job = s.start().wait_ready(timeout=240)
    at = committed(s, [0])
    wait_until(lambda: committed(s, [0]) > at, timeout=600, what="partition 0 written after the restart")
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(30)
    steps.append(f"old producer fenced: {fenced.value.args[0].name()}")
    zombie = None  # its client goes with it
    past(0.3)
    executors = executors_of_latest_app(work)
    assert len(executors) == 2, executors
    os.kill(executors[0], signal.SIGKILL)
    gone = {executors[0]}  # killed or stopped here: never counted as a live executor again
    steps.append(f"executor killed at {committed(s)}")

    # 3. A zombie: an executor's machine cut off from the network while it writes, let through to
    # the broker once its work has moved on.
    past(0.35)
    # The master replaces a lost executor within seconds, or minutes on a loaded machine.
    wait_until(lambda: len(live_executors(work, gone)) == 2, timeout=300, what="two live executors")

    def others_go_on(job, moved_on):
        wait_until(moved_on, timeout=300, what="every partition written past where it was paused")
        return job

    # A paced stream's micro-batch tasks last milliseconds. Through a slow broker (a produce quota
    # a task's few kilobytes exceed) each task's transaction lasts a second or more: long enough to
    # be caught open.
    @contextmanager
    def slowed():
        flowing()
        with producers_throttled(s.broker.bootstrap, 1024):
            yield

    cut_at = time.monotonic()
    job, refused = zombie_fenced(s, job, work, gone, others_go_on, hosts, attempts=4, slowed=slowed)
    steps.append(f"executor cut off while writing, its partitions written by another, let through to the broker:"
                 f" refused with {refused} at {committed(s)}, {time.monotonic() - cut_at:.0f}s for the step")

    # 4. An upgrade: a graceful stop, then a new configuration from a fresh checkpoint, which starts
    # from the offsets the transactions committed.
    flowing()
    past(0.6)
    assert job.stop() == 0
    s.checkpoint = str(s.workdir / "stateless-upgraded")
    job = s.start(upgradeMode="stateless", spark={"triggerInterval": "700ms"}).wait_ready(timeout=240)
    steps.append(f"upgraded at {committed(s)}")

    # 5. A rescale to one executor, live.
    flowing()
    past(0.7)
    code, answer = job.post("/executors", {"total": 1})
    assert code == 202 and answer["live"], answer
    steps.append(f"rescaled to 1 at {committed(s)}")
    streams[-1].hurry()  # the last fault has landed while records flowed: the rest need not be paced

    past(1.0, timeout=900)
    took = time.monotonic() - started
    assert sum(stream.stop() for stream in streams) == n, [stream.error for stream in streams]
    assert all(stream.error is None for stream in streams), [stream.error for stream in streams]
    assert job.stop() == 0
    assert_each_input_once(s, n, PARTITIONS)
    print(f"\nexactly-once: {n} records in {took:.0f}s, 0 missing, 0 duplicated; {'; '.join(steps)}")
