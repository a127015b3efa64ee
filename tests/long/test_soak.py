"""An hour of ModelServings run by the operator on the real node (`make soak`, SOAK_SECONDS; outside `make test`).

The product as its users run it, for an hour: the images `make images` built, imported into the real node (tests/harness/node.py: containerd,
runc, the kubelet, NetworkPolicies enforced), the chart installed by helm (the operator as a pod),
two ModelServings applied with kubectl, one ``delivery: exactlyOnce`` and one ``atLeastOnce``,
each a driver pod and an executor pod, reading from and writing to the tests' three-broker KRaft
cluster (tests/harness/kraft_cluster.py: replication 3, ``min.insync.replicas`` 2, ``acks=all``)
on the host's end of the node's link. Both cores hold the control plane, the node, three brokers,
the operator, two drivers and two executors, the producers and the followers.

First each resource's maximum is measured on this node: a backlog of BACKLOG records on each data
topic, drained by both jobs side by side (the rate between a tenth and nine tenths of it answered).
The soak's stream is half of each (every 997th record not JSON: dead letters too). Then, for
SOAK_SECONDS from the moment both keep up: every SOAK_SWAP_SECONDS (5 min) spec.model changes on
both resources (tree and linear in turn), every third change (every 15 min) as a Canary the
operator analyses and promotes, the others Immediate; every SOAK_RESTART_SECONDS (20 min, from
minute 0) a broker's controlled restart, each broker once an hour.

Every SOAK_SAMPLE_SECONDS (10 s) a sample: the resident memory of each pod's processes (read from
the pod's cgroup): the drivers' JVMs and their Python processes, the executors' JVMs, the
executors' Python workers, the operator; the drivers' JVMs' heap and non-heap, used and
committed, as their own gauges report them (the job's /metrics); per resource the p50 and p99
latency of the predictions received in those seconds (the input's CreateTime to its receipt by a
``read_committed`` follower) and the lag (the data partition's end offset less the inputs answered); the checkpoint
volumes' size; the models topic's size on the brokers' disks and its message count. The samples go
to SOAK_OUT/soak.csv and SOAK_OUT/soak.png; a table of every twelfth of the run is
printed.

Verdicts, printed and asserted: the RSS of every pod together grows by at most 5% an hour after the
first sixth of the run (the operator's own growth printed beside it); each resource's p99 in the
last sixth within 1.2x that of the second sixth; every input answered (0 missing), none twice for
exactly-once (at-least-once's duplicates printed); every canary promoted with its version serving;
every model the spec named served.

A short run checks the harness (13 minutes here): `SOAK_SECONDS=480 SOAK_SWAP_SECONDS=60
SOAK_RESTART_SECONDS=160 SOAK_BACKLOG=60000 make soak`. SOAK_SPARK_CONF (JSON) adds to both
resources' spec.spark.conf, for a diagnostic run: e.g. the drivers' native memory tracking,
'{"spark.driver.extraJavaOptions": "-XX:NativeMemoryTracking=summary"}', read with jcmd from the host.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from array import array
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

import images
from e2e.test_cluster import NS, RELEASE, SYSTEM, Cluster, data_uri, install_operator, modelserving, release, \
    running_cluster, wait_ready
from harness import node as real_node
from harness.kraft_cluster import KraftCluster
from harness.streaming import Stream, wait_until
from scorestream import monitoring
from scorestream import naming
from scorestream.tools.demo import feed, models
from test_broker_failover import BROKEN_EVERY, Restart

WHY = real_node.missing()
pytestmark = [pytest.mark.node, pytest.mark.broker,
              pytest.mark.skipif(WHY is not None, reason=f"the real node's tests are skipped: {WHY}")]

REPO = Path(__file__).resolve().parents[2]
SOAK_SECONDS = float(os.environ.get("SOAK_SECONDS", "3600"))
SAMPLE_EVERY = float(os.environ.get("SOAK_SAMPLE_SECONDS", "10"))
SWAP_EVERY = float(os.environ.get("SOAK_SWAP_SECONDS", "300"))
RESTART_EVERY = float(os.environ.get("SOAK_RESTART_SECONDS", "1200"))
OUT = Path(os.environ.get("SOAK_OUT", REPO / "benchmarks" / "soak"))
WARM = SOAK_SECONDS / 6  # the first 10 minutes of an hour; each compared p99 window as long
PRINT_EVERY = SOAK_SECONDS / 12  # a table row every 5 minutes of an hour
MAX_RSS_GROWTH = 0.05  # per hour, of the RSS at the warm-up's end
MAX_P99_DRIFT = 1.2
PAUSE = 0.25  # the stream's pause between chunks (a producer each: harness.streaming.Stream)
RATE = float(os.environ.get("SOAK_RATE", "0"))  # records a second per resource; 0: half the measured maximum
BACKLOG = int(os.environ.get("SOAK_BACKLOG", "150000"))  # records per resource for the maximum's measure
SPARK_CONF: dict[str, str] = json.loads(os.environ.get("SOAK_SPARK_CONF", "{}"))
CANARY_EVERY = 3  # every third model change is a canary: every 15 minutes at a change every 5
RESOURCES = {"wine-eo": "exactlyOnce", "wine-alo": "atLeastOnce"}
# Two resources, each a driver and an executor, beside the operator (100m) on the node's two cores.
DRIVER = {"cpu": "400m", "memory": "1536Mi"}
EXECUTOR = {"cpu": "500m", "memory": "1Gi"}
# Records a batch at most (3-7 s of the soak's stream): a restart's backlog goes in a few batches,
# and the backlog that measures the maximum in fifteen, not one.
MAX_PER_BATCH = 10000
CANARY = {"percent": 20, "minRecords": 500, "maxErrorRate": 0.01,
          # promoted well before the next change (a minute of an hour's run; a third of a short run's)
          "promoteAfter": f"{int(min(60, SWAP_EVERY / 3))}s",
          # The tree and the linear model differ in cost per record; what the soak watches is the
          # operator's rollout through to promotion, not the candidate's speed (its latency is in
          # status all the same).
          "maxLatencyRatio": 100}


# -- sizes, and the output followed ------------------------------------------------------------

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


def _epoch_ms(iso: str) -> int:
    """timings.eventTime (the JVM scorer's ISO-8601 text) as epoch ms."""
    return round(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


class Follower(threading.Thread):
    """A read_committed consumer of the output and dead-letter partitions from their start, for
    the whole run: each prediction's end-to-end latency (receipt less its input's CreateTime, in
    order of receipt), how often each input offset was seen (a byte each: ten million inputs
    take ten MB), and the model versions served."""

    def __init__(self, bootstrap: str, out: str, dlq: str, group: str = "soak-follower"):
        super().__init__(daemon=True)
        self.bootstrap, self.out, self.dlq, self.group = bootstrap, out, dlq, group
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
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                      "enable.auto.commit": False, "isolation.level": "read_committed"})
        out, dlq = self.out, self.dlq
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

def rss_growth_per_hour(samples: list[dict], key: str = "rss_mib") -> float:
    """The least-squares growth per hour of the RSS (`key`) after the warm-up, as a share of its
    fitted value at the warm-up's end."""
    pts = [(x["t"], x[key]) for x in samples if x["t"] >= WARM and x[key]]
    if len(pts) < 2:
        return 0.0
    mt, my = statistics.fmean(t for t, _ in pts), statistics.fmean(y for _, y in pts)
    var = sum((t - mt) ** 2 for t, _ in pts)
    slope = 0.0 if var == 0 else sum((t - mt) * (y - my) for t, y in pts) / var
    return slope * 3600 / (my - slope * (mt - WARM))


def window_p99(samples: list[dict], follower: Follower, start: float, end: float,
               received: str = "received") -> tuple[int | None, int]:
    """(p99, records) of the predictions received between the samples at `start` and `end` s
    (`received`: the samples' key for the follower's count)."""
    def at(when: float) -> int:
        return min(samples, key=lambda x: abs(x["t"] - when))[received]

    ordered = follower.window(at(start), at(end))
    return _percentile(ordered, 0.99), len(ordered)


def write_csv(samples: list[dict], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(samples[0]) if samples else [])
        w.writeheader()
        for x in samples:
            w.writerow({k: (round(v, 2) if isinstance(v, float) else v) for k, v in x.items()})


# A plot's panels: (y label, [(sample key, legend)], logarithmic).
Panels = list[tuple[str, list[tuple[str, str]], bool]]



def plot(samples: list[dict], events: list[tuple[float, str]], windows: list[tuple[float, float]], path: Path,
         title: str, panels: Panels) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    minutes = [x["t"] / 60 for x in samples]

    def series(key):
        return [float("nan") if x.get(key) is None else x[key] for x in samples]

    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 3 * len(panels)), sharex=True)
    for ax, (ylabel, lines, log) in zip(axes, panels):
        for key, label in lines:
            ax.plot(minutes, series(key), label=label)
        ax.set_ylabel(ylabel)
        if log:  # a restart's seconds beside a batch's hundreds of ms
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
            ax.yaxis.set_minor_formatter(ticker.NullFormatter())
            for a, b in windows:
                ax.axvspan(a / 60, b / 60, color="grey", alpha=0.15)
    axes[-1].set_xlabel("minutes")
    for ax in axes:
        for t, what in events:
            ax.axvline(t / 60, color="tab:red" if what.startswith("broker") else "tab:grey",
                       linestyle="--" if what.startswith("broker") else ":", linewidth=0.8)
        ax.legend(loc="upper left", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].set_title("\n".join(textwrap.wrap(title, 140)) + "\n(dotted: model changes; dashed red: broker restarts;"
                      " shaded: the p99 windows compared)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def fmt(v, f="{:,.0f}") -> str:
    return "-" if v is None else f.format(v)


def print_table(samples: list[dict], events: list[tuple[float, str]], columns) -> None:
    """A row every twelfth of the run, with what happened since the row before."""
    rows, last = [], -1.0
    for k in range(int(SOAK_SECONDS / PRINT_EVERY) + 1):
        near = min(samples, key=lambda x: abs(x["t"] - k * PRINT_EVERY))
        if near["t"] > last:
            rows.append(near)
            last = near["t"]
    print("  min | " + " | ".join(header for header, _ in columns) + " | since the row before")
    before = -1.0
    for x in rows:
        happened = "; ".join(what for t, what in events if before < t <= x["t"])
        print(f"  {x['t'] / 60:4.1f} | " + " | ".join(cell(x) for _, cell in columns) + f" | {happened}")
        before = x["t"]


# -- what runs on the node ------------------------------------------------------------------------

@dataclass
class Resource:
    """One ModelServing, its topics on the three brokers, its stream and its follower."""

    name: str
    delivery: str
    bootstrap: str
    topics: dict[str, str] = field(init=False)
    follower: Follower | None = None
    stream: Stream | None = None

    def __post_init__(self):
        self.topics = {"dataTopic": f"{self.name}-records", "outputTopic": f"{self.name}-predictions",
                       "deadLetterTopic": f"{self.name}-dlq"}

    def produce(self, records) -> int:  # what Stream calls
        return feed.produce(self.bootstrap, self.topics["dataTopic"], records)

    def follow(self) -> None:
        self.follower = Follower(self.bootstrap, self.topics["outputTopic"], self.topics["deadLetterTopic"],
                                 group=f"soak-{self.name}")

    def answered(self) -> int:
        """Inputs answered at least once (a prediction or a dead letter)."""
        return self.follower.distinct


def manifest(r: Resource, model: dict) -> dict:
    ms = modelserving(r.name, f"localhost/{images.IMAGES['runtime-pmml'].name}:{images.VERSION}", model, r.topics,
                      r.bootstrap, delivery=r.delivery)
    ms["spec"]["kafka"]["maxOffsetsPerTrigger"] = MAX_PER_BATCH
    ms["spec"]["spark"].update(driver=DRIVER, executor=EXECUTOR)
    if SPARK_CONF:
        ms["spec"]["spark"]["conf"] = {**ms["spec"]["spark"].get("conf", {}), **SPARK_CONF}
    return ms


def model_spec(k: int, pmml: dict[str, bytes]) -> dict:
    """The k-th model (0: the first): tree and linear in turn, version k + 1."""
    name = "linear" if k % 2 else "tree"
    return {"name": f"wine-{name}", "version": str(k + 1), "format": "pmml",
            "uri": data_uri(pmml[name], "application/xml")}


def pod_processes(c: Cluster):
    """(pod name, part, pid) of every process of the job's and the operator's pods, from the pods'
    cgroups; part: driver, executor or operator."""
    pods = c.cp.get(f"/api/v1/namespaces/{NS}/pods")["items"] + c.cp.get(f"/api/v1/namespaces/{SYSTEM}/pods")["items"]
    # The memory controller's hierarchy under cgroup v1, the one hierarchy under v2; the kubelet's
    # cgroupfs driver names a pod's group pod<uid>.
    hierarchy = Path("/sys/fs/cgroup/memory") if Path("/sys/fs/cgroup/memory").is_dir() else Path("/sys/fs/cgroup")
    root = hierarchy / c.node.cgroup_root.lstrip("/")
    groups = {d.name.removeprefix("pod"): d for d in root.rglob("pod*") if d.is_dir()}
    for pod in pods:
        labels = pod["metadata"].get("labels", {})
        part = labels.get("app.kubernetes.io/component") if labels.get(naming.MODELSERVING_LABEL) else \
            "operator" if naming.OPERATOR_POD_LABELS.items() <= labels.items() else None
        group = groups.get(pod["metadata"]["uid"])
        if part in ("driver", "executor", "operator") and group is not None:
            for pid in (int(p) for f in group.rglob("cgroup.procs") for p in f.read_text().split()):
                yield pod["metadata"]["name"], part, pid


def pods_memory(processes: list[tuple[str, str, int]]) -> dict[str, float]:
    """RSS (MiB) of the pods' `processes` (``pod_processes``), by part: the drivers' JVMs, the
    drivers' Python processes, the executors' JVMs, the executors' Python workers, the operator."""
    out = {"driver": 0.0, "driver_python": 0.0, "executor": 0.0, "python": 0.0, "operator": 0.0}
    for _, part, pid in processes:
        rss = real_node.tree_rss(pid, children=False) / 1024
        python = _command(pid).startswith("python")
        out["python" if part == "executor" and python else "driver_python" if python else part] += rss
    return out


# The job's own /metrics, read inside a driver pod's network namespace (nsenter: the test runs as
# root on the node's host), so that neither the NetworkPolicy nor a port-forward stands between.
METRICS_OF_POD = ("import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
                  f"'http://127.0.0.1:{naming.METRICS_PORT}/metrics', timeout=5).read().decode())")


# The drivers' JVMs' own gauges, as the samples name them.
JVM_KEYS = [f"jvm_{area}_{kind}_mib" for area in ("heap", "nonheap") for kind in ("used", "committed")]


def drivers_jvm(processes: list[tuple[str, str, int]]) -> dict[str, float]:
    """The drivers' JVMs as they report themselves (MiB, summed over the drivers of the pods'
    `processes`): heap and non-heap, used and committed. What tells a heap growing toward its
    limit (the collector commits more before it collects) from memory that grows without one."""
    out = dict.fromkeys(JVM_KEYS, 0.0)
    kinds = {monitoring.JVM_MEMORY_USED.name: "used", monitoring.JVM_MEMORY_COMMITTED.name: "committed"}
    # a process of each driver pod: they share its network namespace
    pods = {name: pid for name, part, pid in processes if part == "driver"}
    for pid in pods.values():
        try:
            res = subprocess.run(["nsenter", "-t", str(pid), "-n", sys.executable, "-c", METRICS_OF_POD],
                                 capture_output=True, text=True, timeout=20)
        except subprocess.TimeoutExpired:  # a driver too busy to answer: none this time
            continue
        if res.returncode != 0:  # a driver restarting: no answer this time
            continue
        for family in text_string_to_metric_families(res.stdout):
            for x in family.samples:
                if x.name in kinds:
                    out[f"jvm_{x.labels['area']}_{kinds[x.name]}_mib"] += x.value / 2**20
    return out


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


class Ends:
    """The data partitions' end offsets and the models topic's, from one consumer (it never joins a group)."""

    def __init__(self, kraft: KraftCluster):
        self.c = Consumer({"bootstrap.servers": kraft.bootstrap, "group.id": "soak-node-ends",
                           "enable.auto.commit": False})

    def end(self, topic: str) -> tuple[int, int] | None:
        try:
            return self.c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
        except Exception:  # a broker restarting: no answer this time
            return None

    def close(self) -> None:
        self.c.close()


# -- the cluster -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = time.monotonic()
    logs = tmp_path_factory.mktemp("kraft")
    with running_cluster(*release(tmp_path_factory.mktemp("dist")), started,
                         brokers=lambda host: KraftCluster(logs, host=host)) as c:
        yield c


def measure_maximum(resources: list[Resource], ends: Ends) -> dict[str, float]:
    """Each job's rate draining a backlog of BACKLOG records, both at once: records a second
    between a tenth and nine tenths of its backlog answered."""
    streams = {r.name: Stream(r, total=BACKLOG, chunk=5000, pause=0.0) for r in resources}
    for s in streams.values():
        s.start()
    marks: dict[str, dict[str, float]] = {r.name: {} for r in resources}
    deadline = time.monotonic() + 1200
    while any(len(m) < 2 for m in marks.values()):
        assert time.monotonic() < deadline, f"the backlog not drained in 20 minutes: {marks}"
        for r in resources:
            done = r.answered()
            for q in (0.1, 0.9):
                if done >= q * BACKLOG and q not in marks[r.name]:
                    marks[r.name][q] = time.monotonic()
        time.sleep(0.2)
    for s in streams.values():
        s.stop()
        assert s.error is None, s.error
    return {name: 0.8 * BACKLOG / (m[0.9] - m[0.1]) for name, m in marks.items()}


NODE_PANELS: Panels = [
    ("RSS (MiB)", [("rss_mib", "every pod"), ("rss_driver_mib", "drivers' JVMs"),
                   ("rss_driver_python_mib", "drivers' Python"),
                   ("rss_executor_mib", "executors' JVMs"), ("rss_python_mib", "executors' Python workers"),
                   ("rss_operator_mib", "operator")], False),
    ("latency, CreateTime to\nread_committed receipt (ms)",
     [(f"{k}_{name}", f"{name} {k[:3]}") for name in RESOURCES for k in ("p50_ms", "p99_ms")], True),
    ("the drivers' JVMs,\nas they report (MiB)",
     [(k, k.removeprefix("jvm_").removesuffix("_mib").replace("_", " ")) for k in JVM_KEYS], False),
    ("lag (records)", [(f"lag_{name}", name) for name in RESOURCES], False),
    ("MiB", [("checkpoint_mib", "checkpoint volumes"), ("models_mib", "models topic on disk")], False),
]

NODE_COLUMNS = [
    ("RSS drivers' JVMs · Python · executors · workers · operator · all MiB",
     lambda x: " · ".join(fmt(x[f"rss_{k}_mib"]) for k in ("driver", "driver_python", "executor", "python", "operator"))
     + f" · {fmt(x['rss_mib'])}"),
    ("drivers' heap used · committed · non-heap used · committed MiB",
     lambda x: " · ".join(fmt(x[k]) for k in JVM_KEYS)),
    *[(f"{name} p50 · p99 ms · lag", lambda x, name=name: f"{fmt(x[f'p50_ms_{name}'])} · {fmt(x[f'p99_ms_{name}'])}"
       f" · {fmt(x[f'lag_{name}'])}") for name in RESOURCES],
    ("checkpoints MiB", lambda x: fmt(x["checkpoint_mib"], "{:.2f}")),
    ("models KiB (msgs)", lambda x: f"{fmt(x['models_kib'])} ({fmt(x['models_messages'])})"),
]


@pytest.mark.timeout(SOAK_SECONDS + 3600)
def test_an_hour_of_modelservings_on_the_real_node_through_model_changes_canaries_and_broker_restarts(cluster):
    c = cluster
    kraft: KraftCluster = c.broker
    rows = feed.wine_rows()
    pmml = {"tree": models.tree_pmml(rows), "linear": models.linear_pmml(rows)}
    resources = [Resource(name, delivery, kraft.bootstrap) for name, delivery in RESOURCES.items()]
    models_topic = naming.namespace_models_topic(NS)
    kraft.create_topics({t: 1 for r in resources for t in r.topics.values()} | {models_topic: 1},
                        {models_topic: {"cleanup.policy": "compact"}})
    OUT.mkdir(parents=True, exist_ok=True)
    ends = Ends(kraft)
    roll: Roll | None = None
    samples: list[dict] = []
    events: list[tuple[float, str]] = []
    rolls: list[tuple[int, float]] = []
    canaries: list[tuple[str, str, dict]] = []  # (resource, version, its rollout status at the next change)
    on_trial: dict[str, int] = {}  # resource -> its canary's index in `canaries`, until looked at
    named = {("wine-tree", "1")}
    try:
        with c.step("helm install (operator pod Ready)"):
            install_operator(c)
        with c.step("kubectl apply of two ModelServings -> Ready"):
            for r in resources:
                c.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest(r, model_spec(0, pmml))))
            for r in resources:
                wait_ready(c, r.name)
                r.follow()
        with c.step("each job's maximum, draining a backlog side by side"):
            maximum = measure_maximum(resources, ends)
        rates = {name: RATE or m / 2 for name, m in maximum.items()}
        print("\nmaximum (rec/s, both draining at once): " + ", ".join(f"{k} {v:,.0f}" for k, v in maximum.items())
              + "; the soak's rate: " + ", ".join(f"{k} {v:,.0f}" for k, v in rates.items()))
        first = {r.name: ends.end(r.topics["dataTopic"])[1] for r in resources}
        for r in resources:
            r.stream = Stream(r, total=10**12, chunk=max(1, int(rates[r.name] * PAUSE)), pause=PAUSE,
                              start=first[r.name], broken_every=BROKEN_EVERY)
            r.stream.start()
        warmed = time.monotonic()
        wait_until(lambda: all(r.answered() >= first[r.name] + r.stream.sent - rates[r.name] * 5 for r in resources),
                   timeout=900, what="both jobs keeping up with the stream", every=1)
        started = time.monotonic()
        print(f"soak: both jobs kept up after {started - warmed:.0f}s of stream")
        next_sample, next_change, next_roll = started, started + SWAP_EVERY, started
        origin = {r.name: r.follower.received() for r in resources}
        changes = rolled = 0
        previous = -1.0
        while (now := time.monotonic()) - started < SOAK_SECONDS:
            t = now - started
            if now >= next_change:
                next_change += SWAP_EVERY
                verdicts(c, canaries, on_trial)  # the canary before this change has had its five minutes
                if t < SOAK_SECONDS - min(180, SWAP_EVERY / 2):  # each model scores a while
                    changes += 1
                    model = model_spec(changes, pmml)
                    canary = changes % CANARY_EVERY == 0
                    rollout = {"strategy": "Canary", "canary": CANARY} if canary else {"strategy": "Immediate"}
                    for r in resources:
                        c.kubectl("patch", "-n", NS, f"modelserving/{r.name}", "--type=merge",
                                  "-p", json.dumps({"spec": {"model": model, "rollout": rollout}}))
                        if canary:
                            on_trial[r.name] = len(canaries)
                            canaries.append((r.name, model["version"], {}))
                    named.add((model["name"], model["version"]))
                    events.append((t, f"{'canary' if canary else 'change'} to {model['name']} v{model['version']}"))
            if now >= next_roll and (roll is None or not roll.is_alive()):
                next_roll += RESTART_EVERY
                if roll is not None:
                    rolls.append((roll.broker, roll.wait()))
                roll = Roll(kraft, rolled % 3)
                events.append((t, f"broker {rolled % 3} restarted"))
                rolled += 1
            if now >= next_sample:
                next_sample += SAMPLE_EVERY
                samples.append(sample(c, kraft, ends, resources, samples, origin, models_topic, t,
                                      "; ".join(w for at, w in events if at > previous)))
                previous = t
            for r in resources:
                assert r.stream.error is None and r.stream.is_alive(), r.stream.error
                assert r.follower.error is None, r.follower.error
            assert roll is None or roll.error is None, roll.error
            time.sleep(max(0.1, min(next_sample, next_change, next_roll) - time.monotonic()))
        sent = {r.name: r.stream.stop() for r in resources}
        if roll is not None:
            rolls.append((roll.broker, roll.wait()))
        verdicts(c, canaries, on_trial)
        totals = {r.name: wait_until(lambda r=r: (e := ends.end(r.topics["dataTopic"])) and e[1], timeout=60,
                                     what="the data partition's end offset") for r in resources}
        for r in resources:
            r.follower.wait_all(totals[r.name], timeout=900)
        restarts = {p["metadata"]["name"]: sum(s.get("restartCount", 0) for s in p["status"].get("containerStatuses", []))
                    for p in c.pods(NS) + c.pods(SYSTEM)}
    finally:
        for r in resources:
            if r.stream is not None:
                r.stream.stop()
        if roll is not None:  # a broker being started must not outlive the cluster's close
            roll.join(300)
        for r in resources:
            if r.follower is not None:
                r.follower.stop()
        ends.close()
        for r in resources:
            c.kubectl("delete", "-n", NS, f"modelserving/{r.name}", "--ignore-not-found", "--wait=true",
                      "--timeout=300s", check=False, timeout=400)
        c.helm("uninstall", RELEASE, "-n", SYSTEM, "--ignore-not-found", "--wait", "--timeout", "5m", check=False)

    stable, last = (WARM, 2 * WARM), (SOAK_SECONDS - WARM, SOAK_SECONDS)
    title = (f"soak on the real node: {SOAK_SECONDS / 60:.0f} min, two ModelServings (exactly-once, at-least-once)"
             f" on 3 brokers at {' and '.join(f'{v:,.0f}' for v in rates.values())} rec/s, a model change every"
             f" {SWAP_EVERY / 60:g} min (a canary every {CANARY_EVERY * SWAP_EVERY / 60:g}), a broker restart every"
             f" {RESTART_EVERY / 60:g} min")
    write_csv(samples, OUT / "soak.csv")
    plot(samples, events, [stable, last], OUT / "soak.png", title, NODE_PANELS)
    print(title)
    print_table(samples, events, NODE_COLUMNS)
    print(f"samples: {len(samples)} in {OUT / 'soak.csv'}; plot {OUT / 'soak.png'}")
    print("broker restarts, stop to in sync: " + ", ".join(f"broker {b} {s_:.0f}s" for b, s_ in rolls))
    print(f"container restarts over the run: {sum(restarts.values())} ({restarts})")
    growth, operator_growth = rss_growth_per_hour(samples), rss_growth_per_hour(samples, "rss_operator_mib")
    rss_verdict = "" if SOAK_SECONDS >= 1800 else " (not asserted: a run under 30 minutes)"
    print(f"verdict: RSS of every pod, growth after minute {WARM / 60:g}: {growth:+.1%} per hour (at most"
          f" {MAX_RSS_GROWTH:.0%}){rss_verdict}; the operator's alone {operator_growth:+.1%} per hour,"
          f" {samples[-1]['rss_operator_mib']:,.0f} MiB at the end")
    failures = []
    for r in resources:
        missing, twice, extra = r.follower.counts(totals[r.name])
        p99_stable, n_stable = window_p99(samples, r.follower, *stable, received=f"received_{r.name}")
        p99_last, n_last = window_p99(samples, r.follower, *last, received=f"received_{r.name}")
        served = r.follower.versions
        print(f"verdict {r.name} ({r.delivery}): {totals[r.name]:,} records ({sent[r.name]:,} in the soak),"
              f" {missing} missing, {twice} seen more than once ({extra} extra copies);"
              f" p99 minutes {stable[0] / 60:g}-{stable[1] / 60:g} {p99_stable} ms ({n_stable:,}),"
              f" minutes {last[0] / 60:g}-{last[1] / 60:g} {p99_last} ms ({n_last:,}):"
              f" {p99_last / p99_stable if p99_stable and p99_last else float('nan'):.2f}x (at most {MAX_P99_DRIFT}x);"
              f" {len(served)} versions served of {len(named)} named")
        failures += [f"{r.name}: {missing} inputs missing"] if missing else []
        failures += [f"{r.name}: {twice} inputs seen twice"] if twice and r.delivery == "exactlyOnce" else []
        failures += [f"{r.name}: named but never served: {sorted(named - served)}"] if not named <= served else []
        if not (p99_stable and p99_last is not None and p99_last <= MAX_P99_DRIFT * p99_stable):
            failures.append(f"{r.name}: p99 drifted {p99_stable} -> {p99_last} ms")
    for name, version, rollout in canaries:
        print(f"canary {name} v{version}: {rollout.get('phase')} (current v{rollout.get('current')})")
        if rollout.get("phase") != "Promoted" or rollout.get("current") != version:
            failures.append(f"canary {name} v{version} not promoted: {rollout}")
    if SOAK_SECONDS >= 1800 and growth > MAX_RSS_GROWTH:
        failures.append(f"RSS grew {growth:.1%} an hour after minute {WARM / 60:g}")
    assert not failures, failures


def verdicts(c: Cluster, canaries: list[tuple[str, str, dict]], on_trial: dict[str, int]) -> None:
    """Each canary on trial given its resource's rollout phase and serving version, from status."""
    for name, i in on_trial.items():
        model = (c.cp.get(f"/apis/scorestream.dev/v1alpha1/namespaces/{NS}/modelservings/{name}") or {}) \
            .get("status", {}).get("model", {})
        canaries[i] = (*canaries[i][:2], {"phase": (model.get("rollout") or {}).get("phase"),
                                          "current": (model.get("current") or {}).get("version")})
    on_trial.clear()


def sample(c: Cluster, kraft: KraftCluster, ends: Ends, resources: list[Resource], samples: list[dict],
           origin: dict[str, int], models_topic: str, t: float, event: str) -> dict:
    processes = list(pod_processes(c))  # one listing of the pods and their cgroups for both
    memory = pods_memory(processes)
    x: dict = {"t": t, **{f"rss_{k}_mib": v for k, v in memory.items()}, "rss_mib": sum(memory.values()),
               **drivers_jvm(processes)}
    for r in resources:
        received = r.follower.received()
        latest = r.follower.window(samples[-1][f"received_{r.name}"] if samples else origin[r.name], received)
        data = ends.end(r.topics["dataTopic"])
        x |= {f"p50_ms_{r.name}": _percentile(latest, 0.5), f"p99_ms_{r.name}": _percentile(latest, 0.99),
              f"lag_{r.name}": None if data is None else max(0, data[1] - r.answered()),
              f"received_{r.name}": received}
    models = ends.end(models_topic)
    models_kib = max(_mib(kraft.root / f"node-{i + 1}" / "data" / f"{models_topic}-0") for i in range(3)) * 1024
    return x | {"checkpoint_mib": _mib(c.cp.dir / "volumes"), "models_kib": models_kib, "models_mib": models_kib / 1024,
                "models_messages": None if models is None else models[1] - models[0], "event": event}
