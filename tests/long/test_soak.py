"""An hour of the real job, exactly-once, on three brokers (`make soak`, SOAK_SECONDS; outside `make test`).

The real job (the JVM scorer, PMML4S) with ``delivery: exactlyOnce`` on Spark's standalone
cluster (its executor a JVM of its own) reads from and writes to the tests' three-broker KRaft
cluster (tests/harness/kraft_cluster.py: replication 3, ``min.insync.replicas`` 2, ``acks=all``;
data, output, dead letters, models and the transaction state replicated), as the broker-failover
test runs it. A live stream (SOAK_RATE records a second, every 997th not JSON: dead letters too)
goes on while, every SOAK_SWAP_SECONDS (5 min), a new model is published (tree and linear in
turn) and, every SOAK_RESTART_SECONDS (20 min), a broker is restarted with a controlled shutdown
(SIGTERM, then started on its own data, the in-sync replica sets full again), in turn 0, 1, 2,
from minute 0: at 0, 20 and 40 every broker is rolled once, and neither ten-minute window whose
p99 is compared below (minutes 10-20 and 50-60) holds a restart; each holds two swaps. So the two
differ by time alone: a restart's stall, seconds of input waiting, would be their p99, and the
verdict would compare two restarts, not the job's drift.

Every SOAK_SAMPLE_SECONDS (10 s) a sample: the resident memory of the driver's process tree (the
Python driver, its JVM, any Python workers) and of the executors' (each executor's JVM and what
it forks); the p50 and p99 end-to-end latency of the predictions received in those seconds, from
the input's CreateTime (the prediction's ``timings.eventTime``) to its receipt by a
``read_committed`` consumer following the output (an exactly-once prediction is appended before
its transaction commits: its own timestamp would flatter the job, benchmarks/latency.py's
``visible``); the lag (the data partition's end offset less the offset the job's transactions
committed); the checkpoint folder's size; the models topic's size on the brokers' disks and its
message count. All samples go to SOAK_OUT/soak.csv and a plot, SOAK_OUT/soak.png (matplotlib,
the `soak` extra, which `make soak` installs); a table of every twelfth of the run (5 minutes of
an hour) is printed.

Verdicts, printed and asserted: the RSS (driver + executors) grows by at most 5% an hour after the
first sixth of the run (10 minutes of an hour: the JVMs' heaps and code caches filling), a least
squares fit; the p99 of the last sixth is within 1.2x that of the second sixth (minutes 10-20);
the same follower, ``read_committed`` over output and dead letters, finds every input offset of
the data partition once: 0 missing, 0 duplicated; every model published was served. A run
shorter than 30 minutes prints the memory verdict without asserting it: its window after the
warm-up is minutes long, the JVMs' heaps still growing towards their size, and a slope over it
says nothing about an hour.

A short run checks the harness: `SOAK_SECONDS=600 SOAK_SWAP_SECONDS=50 SOAK_RESTART_SECONDS=200
make soak` (the windows scale with SOAK_SECONDS).

What the issue asks that this soak does not do, and why:
- The real node (kubelet, containerd, the job's driver and executor as pods) and the operator:
  the node's tests build the images and start the node (minutes of set-up, both cores busy), and
  an operator's process and its memory would ride on them; the job here is the same code, run as
  the operator's pods run it (``python -m scorestream.runtime`` with its config, executors on a
  standalone master), without them. The operator's RSS is therefore not sampled.
- The operator's canary every 15 minutes: the canary is the operator's rollout (status, verdict,
  promotion) over a candidate published to the models topic; without the operator there is none.
  The model swaps exercise the job's side of it (a new model taken at a batch boundary).
- One ModelServing, not several, at SOAK_RATE (default 3,000 records a second: half the
  6,067 a second measured for exactly-once, benchmarks/RESULTS.md, "Exactly-once"), not at half
  of a maximum measured on this cluster: two cores hold three brokers, the standalone master,
  worker and executor, the driver, the producer and the follower.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import threading
import time
from array import array
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from harness.kraft_cluster import KraftCluster
from harness.standalone import standalone_conf
from harness.streaming import Stream, wait_until
from scorestream.tools.demo import feed, models
from test_broker_failover import BROKEN_EVERY, ReplicatedServing, Restart

pytestmark = [pytest.mark.spark, pytest.mark.broker]

REPO = Path(__file__).resolve().parents[2]
SOAK_SECONDS = float(os.environ.get("SOAK_SECONDS", "3600"))
SAMPLE_EVERY = float(os.environ.get("SOAK_SAMPLE_SECONDS", "10"))
SWAP_EVERY = float(os.environ.get("SOAK_SWAP_SECONDS", "300"))
RESTART_EVERY = float(os.environ.get("SOAK_RESTART_SECONDS", "1200"))
RATE = float(os.environ.get("SOAK_RATE", "3000"))
OUT = Path(os.environ.get("SOAK_OUT", REPO / "benchmarks" / "soak"))
WARM = SOAK_SECONDS / 6  # the first 10 minutes of an hour; each compared p99 window as long
PRINT_EVERY = SOAK_SECONDS / 12  # a table row every 5 minutes of an hour
MAX_RSS_GROWTH = 0.05  # per hour, of the RSS at the warm-up's end
MAX_P99_DRIFT = 1.2
PAUSE = 0.25  # the stream's pause between chunks (a producer each: harness.streaming.Stream)


# -- the process trees' memory ---------------------------------------------------------------------

def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            out.setdefault(ppid, []).append(int(entry.name))
    return out


def _tree(root: int, children: dict[int, list[int]]) -> list[int]:
    """`root` and every process below it."""
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(children.get(pid, []))
    return out


def _executors(worker: int, children: dict[int, list[int]]) -> list[int]:
    """The executors' JVMs under a standalone worker, and what they fork (Python workers)."""
    found = []
    for pid in _tree(worker, children):
        try:
            if b"CoarseGrainedExecutorBackend" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found += _tree(pid, children)
        except OSError:
            continue
    return found


def _rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def _mib(folder: Path) -> float:
    if not folder.exists():
        return 0.0
    total = 0
    for f in folder.rglob("*"):
        try:
            total += f.stat().st_size if f.is_file() else 0
        except OSError:  # a segment or checkpoint file removed while counted
            continue
    return total / 2**20


# -- the output, followed ------------------------------------------------------------------------

def _epoch_ms(iso: str) -> int:
    """timings.eventTime (the JVM scorer's ISO-8601 text) as epoch ms."""
    return round(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


class Follower(threading.Thread):
    """A read_committed consumer of the output and dead-letter partitions from their start, for
    the whole run: each prediction's end-to-end latency (receipt less its input's CreateTime, in
    order of receipt), how often each input offset was seen (a byte each: ten million inputs
    take ten MB), and the model versions served."""

    def __init__(self, s):
        super().__init__(daemon=True)
        self.s = s
        self.latencies = array("i")
        self.seen = bytearray()
        self.distinct = 0
        self.versions: set[tuple[str, str]] = set()
        self.error: BaseException | None = None
        self.last_record = time.monotonic()
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self.start()

    def _count(self, offset: int) -> None:
        if offset >= len(self.seen):
            self.seen.extend(bytes(max(offset + 1 - len(self.seen), 1 << 20)))
        if self.seen[offset] == 0:
            self.distinct += 1
        self.seen[offset] = min(self.seen[offset] + 1, 255)

    def run(self):
        c = Consumer({"bootstrap.servers": self.s.broker.bootstrap, "group.id": "soak-follower",
                      "enable.auto.commit": False, "isolation.level": "read_committed"})
        out, dlq = self.s.topics["out"], self.s.topics["dlq"]
        try:
            c.assign([TopicPartition(out, 0, 0), TopicPartition(dlq, 0, 0)])
            while not self._halt.is_set():
                batch = [m for m in c.consume(10000, timeout=0.5) if m.error() is None]
                received = int(time.time() * 1000)
                if not batch:
                    continue
                with self._lock:
                    self.last_record = time.monotonic()
                    for m in batch:
                        if m.topic() == out:
                            o = json.loads(m.value())
                            self._count(o["source"]["offset"])
                            self.latencies.append(received - _epoch_ms(o["timings"]["eventTime"]))
                            self.versions.add((o["model"]["name"], o["model"]["version"]))
                        else:
                            headers = dict(m.headers() or [])
                            self._count(int(headers["scorestream.source.offset"]))
        except BaseException as e:  # surfaced by the test
            self.error = e
        finally:
            c.close()

    def received(self) -> int:
        with self._lock:
            return len(self.latencies)

    def window(self, lo: int, hi: int) -> list[int]:
        with self._lock:
            return sorted(self.latencies[lo:hi])

    def wait_all(self, n: int, timeout: float) -> None:
        """Until every input offset below `n` has been seen and nothing more came for 5 s (a
        duplicate committed after the last first copy is still counted)."""
        wait_until(lambda: self.error is None and self.distinct >= n and time.monotonic() - self.last_record > 5
                   or self.error is not None, timeout=timeout, what=f"every input found in the output ({n})")
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        self._halt.set()
        self.join(30)

    def counts(self, n: int) -> tuple[int, int, int]:
        """(missing, seen more than once, extra copies) among input offsets 0..n-1, and beyond."""
        with self._lock:
            seen = self.seen[:n] + bytes(max(0, n - len(self.seen)))
            beyond = sum(1 for c in self.seen[n:] if c)
        twice = [c for c in seen if c > 1]
        return seen.count(0), len(twice) + beyond, sum(c - 1 for c in twice) + beyond


def _percentile(ordered: list[int], q: float) -> int | None:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else None


# -- the brokers' side -----------------------------------------------------------------------------

class Probe:
    """The job's committed offset, the partitions' end offsets and the models topic's size: one
    consumer of the job's group for the whole run (never subscribed: it asks, it does not join)."""

    def __init__(self, s, kraft: KraftCluster):
        self.s, self.kraft = s, kraft
        self.c = Consumer({"bootstrap.servers": s.broker.bootstrap, "group.id": s.config().data_group,
                           "enable.auto.commit": False, "isolation.level": "read_committed"})

    def committed(self) -> int | None:
        """None while the answer does not come (a broker restarting)."""
        try:
            return max(0, self.c.committed([TopicPartition(self.s.topics["data"], 0)], timeout=5)[0].offset)
        except Exception:
            return None

    def ends(self, which: str) -> tuple[int, int] | None:
        try:
            return self.c.get_watermark_offsets(TopicPartition(self.s.topics[which], 0), timeout=5)
        except Exception:
            return None

    def models_kib(self) -> float:
        """The models partition's size on disk, the largest of its three replicas."""
        root = self.kraft.root
        topic = self.s.topics["models"]
        return max(_mib(root / f"node-{i + 1}" / "data" / f"{topic}-0") for i in range(3)) * 1024

    def close(self) -> None:
        self.c.close()


class Roll(Restart):
    """A broker's controlled restart (SIGTERM: its leaderships moved first, as a rolling restart
    does), then started on its own data, in the background: ``wait()`` returns the seconds from
    the stop to full in-sync replica sets."""

    def run(self):
        try:
            self.cluster.stop(self.broker)
        except BaseException as e:  # re-raised by wait()
            self.error = e
            return
        super().run()


# -- the verdicts, the table, the plot ------------------------------------------------------------

def rss_growth_per_hour(samples: list[dict]) -> float:
    """The least-squares growth per hour of the RSS after the warm-up, as a share of its fitted
    value at the warm-up's end."""
    pts = [(x["t"], x["rss_mib"]) for x in samples if x["t"] >= WARM and x["rss_mib"]]
    if len(pts) < 2:
        return 0.0
    mt, my = statistics.fmean(t for t, _ in pts), statistics.fmean(y for _, y in pts)
    var = sum((t - mt) ** 2 for t, _ in pts)
    slope = 0.0 if var == 0 else sum((t - mt) * (y - my) for t, y in pts) / var
    return slope * 3600 / (my - slope * (mt - WARM))


def window_p99(samples: list[dict], follower: Follower, start: float, end: float) -> tuple[int | None, int]:
    """(p99, records) of the predictions received between the samples at `start` and `end` s."""
    def at(when: float) -> int:
        return min(samples, key=lambda x: abs(x["t"] - when))["received"]

    ordered = follower.window(at(start), at(end))
    return _percentile(ordered, 0.99), len(ordered)


COLUMNS = ("t", "rss_driver_mib", "rss_executors_mib", "rss_mib", "p50_ms", "p99_ms", "scored", "lag",
           "checkpoint_mib", "models_kib", "models_messages", "received", "event")


def write_csv(samples: list[dict], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for x in samples:
            w.writerow({k: (round(v, 2) if isinstance(v, float) else v) for k, v in x.items()})


def plot(samples: list[dict], events: list[tuple[float, str]], windows: list[tuple[float, float]], path: Path,
         title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    minutes = [x["t"] / 60 for x in samples]

    def series(key):
        return [float("nan") if x[key] is None else x[key] for x in samples]

    fig, axes = plt.subplots(4, 1, figsize=(11, 12), sharex=True)
    ax = axes[0]
    for key, label in (("rss_mib", "driver + executors"), ("rss_driver_mib", "driver (Python, JVM, workers)"),
                       ("rss_executors_mib", "executor JVM")):
        ax.plot(minutes, series(key), label=label)
    ax.set_ylabel("RSS (MiB)")
    ax = axes[1]
    ax.plot(minutes, series("p50_ms"), label="p50")
    ax.plot(minutes, series("p99_ms"), label="p99")
    ax.set_yscale("log")  # a restart's seconds beside a batch's hundreds of ms
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_ylabel("latency, CreateTime to\nread_committed receipt (ms)")
    for a, b in windows:
        ax.axvspan(a / 60, b / 60, color="grey", alpha=0.15)
    ax = axes[2]
    ax.plot(minutes, series("lag"), label="lag (data end offset - committed)")
    ax.set_ylabel("lag (records)")
    ax = axes[3]
    ax.plot(minutes, series("checkpoint_mib"), label="checkpoint folder (MiB)")
    ax.plot(minutes, [v / 1024 for v in series("models_kib")], label="models topic on disk (MiB)")
    ax.set_ylabel("MiB")
    ax.set_xlabel("minutes")
    for ax in axes:
        for t, what in events:
            ax.axvline(t / 60, color="tab:red" if what.startswith("broker") else "tab:grey",
                       linestyle="--" if what.startswith("broker") else ":", linewidth=0.8)
        ax.legend(loc="upper left", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].set_title(title + "\n(dotted: model swaps; dashed red: broker restarts; shaded: the p99 windows compared)",
                      fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def print_table(samples: list[dict], events: list[tuple[float, str]]) -> None:
    rows, last = [], -1.0
    for k in range(int(SOAK_SECONDS / PRINT_EVERY) + 1):
        near = min(samples, key=lambda x: abs(x["t"] - k * PRINT_EVERY))
        if near["t"] > last:
            rows.append(near)
            last = near["t"]
    def fmt(v, f="{:,.0f}") -> str:
        return "-" if v is None else f.format(v)

    print("  min | RSS driver · executors · all MiB | p50 · p99 ms | lag | checkpoint MiB | models KiB (msgs)"
          " | since the row before")
    before = -1.0
    for x in rows:
        happened = "; ".join(what for t, what in events if before < t <= x["t"])
        print(f"  {x['t'] / 60:4.1f} | {fmt(x['rss_driver_mib'])} · {fmt(x['rss_executors_mib'])} · {fmt(x['rss_mib'])}"
              f" | {fmt(x['p50_ms'])} · {fmt(x['p99_ms'])} | {fmt(x['lag'])} | {fmt(x['checkpoint_mib'], '{:.2f}')}"
              f" | {fmt(x['models_kib'])} ({fmt(x['models_messages'])}) | {happened}")
        before = x["t"]


# -- the soak --------------------------------------------------------------------------------------

@pytest.fixture
def kraft(tmp_path):
    with KraftCluster(tmp_path / "kraft") as c:
        yield c


@pytest.mark.timeout(SOAK_SECONDS + 2400)
def test_an_hour_exactly_once_through_swaps_and_broker_restarts(kraft, cluster, tmp_path, monkeypatch):
    # The job's JVM with HotSpot's default tiers, as in production: the tests' C1-only setting
    # (harness/fixtures.py) is for jobs of a minute, and an hour's memory includes C2's code.
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", os.environ.get("SPARK_SUBMIT_OPTS", "").replace(
        "-XX:TieredStopAtLevel=1", "").strip())
    spark = {"master": cluster.master, "triggerInterval": "500ms",
             "conf": {**standalone_conf(1), "spark.cores.max": "1"}}
    # Five seconds of input a batch at most: a restart's backlog goes in a few batches.
    s = ReplicatedServing(kraft, tmp_path / "job", delivery="exactlyOnce", spark=spark,
                          kafka={"maxOffsetsPerTrigger": max(1000, int(RATE * 5))})
    rows = feed.wine_rows()
    pmml = {"tree": models.tree_pmml(rows), "linear": models.linear_pmml(rows)}
    s.publish(models.descriptor("tree", "1", "pmml", pmml["tree"]))
    published = {("tree", "1")}
    OUT.mkdir(parents=True, exist_ok=True)
    job = s.start()
    probe = Probe(s, kraft)
    stream = Stream(s, total=10**12, chunk=max(1, int(RATE * PAUSE)), pause=PAUSE, broken_every=BROKEN_EVERY)
    follower: Follower | None = None
    roll: Roll | None = None
    samples: list[dict] = []
    events: list[tuple[float, str]] = []
    rolls: list[tuple[int, float]] = []
    try:
        job.wait_ready(timeout=300)
        follower = Follower(s)
        stream.start()
        # The clock starts once the job keeps up: the executor's start and the first batches'
        # backlog are not the soak's.
        warmed = time.monotonic()
        wait_until(lambda: (job.proc.poll() is None or pytest.fail(job.tail(60)))
                   and (c := probe.committed()) and c >= stream.sent - RATE * 3,
                   timeout=900, what="the job keeping up with the stream", every=1)
        started = time.monotonic()
        print(f"\nsoak: the job kept up after {started - warmed:.0f}s of stream")
        next_sample, next_swap, next_roll = started, started + SWAP_EVERY, started
        origin = follower.received()  # what came during the warm-up is none of the first sample's
        sent_before = stream.sent
        swaps = rolled = 0
        previous = -1.0  # the last sample's t
        while (now := time.monotonic()) - started < SOAK_SECONDS:
            t = now - started
            if now >= next_swap:
                next_swap += SWAP_EVERY
                if t < SOAK_SECONDS - min(120, SWAP_EVERY / 2):  # each model scores a while
                    swaps += 1
                    name, version = ("linear" if swaps % 2 else "tree"), str(swaps + 1)
                    s.publish(models.descriptor(name, version, "pmml", pmml[name]))
                    published.add((name, version))
                    events.append((t, f"swap to {name} v{version}"))
            if now >= next_roll and (roll is None or not roll.is_alive()):
                next_roll += RESTART_EVERY
                if roll is not None:
                    rolls.append((roll.broker, roll.wait()))
                roll = Roll(kraft, rolled % 3)
                events.append((t, f"broker {rolled % 3} restarted"))
                rolled += 1
            if now >= next_sample:
                next_sample += SAMPLE_EVERY
                children = _children()
                driver = _rss_mib(_tree(job.proc.pid, children))
                executors = sum(_rss_mib(_executors(p.pid, children)) for p in cluster.procs[1:])
                received = follower.received()
                latest = follower.window(samples[-1]["received"] if samples else origin, received)
                committed, data, models_ends = probe.committed(), probe.ends("data"), probe.ends("models")
                samples.append({
                    "t": t, "rss_driver_mib": driver, "rss_executors_mib": executors, "rss_mib": driver + executors,
                    "p50_ms": _percentile(latest, 0.5), "p99_ms": _percentile(latest, 0.99), "scored": len(latest),
                    "lag": None if committed is None or data is None else data[1] - committed,
                    "checkpoint_mib": _mib(Path(s.checkpoint)), "models_kib": probe.models_kib(),
                    "models_messages": None if models_ends is None else models_ends[1] - models_ends[0],
                    "received": received, "event": "; ".join(w for at, w in events if at > previous)})
                previous = t
            assert stream.error is None and stream.is_alive(), stream.error
            assert follower.error is None, follower.error
            assert job.proc.poll() is None, job.tail(60)
            assert roll is None or roll.error is None, roll.error
            time.sleep(max(0.1, min(next_sample, next_swap, next_roll) - time.monotonic()))
        rate = (stream.stop() - sent_before) / SOAK_SECONDS
        if roll is not None:
            rolls.append((roll.broker, roll.wait()))
        ends = wait_until(lambda: probe.ends("data"), timeout=60, what="the data partition's end offset")
        n = ends[1]
        wait_until(lambda: (job.proc.poll() is None or pytest.fail(job.tail(60))) and probe.committed() == n,
                   timeout=900, what="every record committed")
        follower.wait_all(n, timeout=600)
        switches = job.get("/stats")["totals"]["modelSwitches"]
        assert job.stop() == 0
    finally:
        stream.stop()
        if roll is not None:  # a broker being started must not outlive the cluster's close
            roll.join(300)
        if follower is not None:
            follower.stop()
        probe.close()
        s.close()

    missing, twice, extra = follower.counts(n)
    dead = len(range(0, stream.sent, BROKEN_EVERY))
    stable, last = (WARM, 2 * WARM), (SOAK_SECONDS - WARM, SOAK_SECONDS)
    p99_stable, n_stable = window_p99(samples, follower, *stable)
    p99_last, n_last = window_p99(samples, follower, *last)
    growth = rss_growth_per_hour(samples)
    served = follower.versions

    title = (f"soak: {SOAK_SECONDS / 60:.0f} min, exactly-once on 3 brokers, {stream.sent:,} records"
             f" ({rate:,.0f}/s), a swap every {SWAP_EVERY / 60:g} min, a broker restart"
             f" every {RESTART_EVERY / 60:g} min")
    write_csv(samples, OUT / "soak.csv")
    plot(samples, events, [stable, last], OUT / "soak.png", title)
    print(title)
    print_table(samples, events)
    print(f"samples: {len(samples)} in {OUT / 'soak.csv'}; plot {OUT / 'soak.png'}")
    print("broker restarts, stop to in sync: " + ", ".join(f"broker {b} {s_:.0f}s" for b, s_ in rolls))
    print(f"records: {n:,} in the data partition ({stream.sent:,} sent, about {dead:,} of them dead letters);"
          f" read_committed over output and dead letters: {missing} missing, {twice} seen more than once"
          f" ({extra} extra copies); {swaps} swaps published, {switches} taken, {len(served)} versions served")
    rss_verdict = "" if SOAK_SECONDS >= 1800 else " (not asserted: a run under 30 minutes)"
    print(f"verdict: RSS growth after minute {WARM / 60:g}: {growth:+.1%} per hour (at most {MAX_RSS_GROWTH:.0%})"
          f"{rss_verdict}")
    print(f"verdict: p99 minutes {stable[0] / 60:g}-{stable[1] / 60:g} {p99_stable} ms ({n_stable:,} records),"
          f" minutes {last[0] / 60:g}-{last[1] / 60:g} {p99_last} ms ({n_last:,}):"
          f" {p99_last / p99_stable if p99_stable else float('nan'):.2f}x (at most {MAX_P99_DRIFT}x)")
    print(f"verdict: {missing} missing, {twice} duplicated (exactly-once: 0 and 0)")

    assert missing == 0, f"{missing} input offsets missing from output and dead letters"
    assert twice == 0, f"{twice} input offsets seen more than once ({extra} extra copies)"
    assert published <= served, f"published but never served: {sorted(published - served)}"
    assert switches == swaps, f"{switches} swaps taken of {swaps} published"
    assert p99_stable and p99_last is not None and p99_last <= MAX_P99_DRIFT * p99_stable, (p99_stable, p99_last)
    if SOAK_SECONDS >= 1800:
        assert growth <= MAX_RSS_GROWTH, f"RSS grew {growth:.1%} an hour after minute {WARM / 60:g}"
