"""Shared fixtures and hooks: an Apache Kafka broker, the report's fixtures, serving jobs as processes, the
quick tier, and the figures and file timings shown after a run."""

from __future__ import annotations

import json
import os
import secrets
import sys
import uuid
from pathlib import Path

import pytest

from scorestream.config import JobConfig
from scorestream.tools.demo import feed, models
from scorestream.tools.local.broker import EmbeddedBroker, create_topics, free_port
from scorestream.tools.local.process import JobProcess, read_topic

REPO = Path(__file__).resolve().parents[2]
SHARED_WINE = Path(os.environ.get("SCORESTREAM_SHARED", REPO.parent / "shared")) / "data" / "wine"

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# The tests' Spark JVMs (serving jobs, the scorer's session) compile with C1 only. A test's job
# lives a minute or less: C2's compilations never pay back in that time, and on 2 cores shared by
# two workers they cost ~30% of the time of the files that start jobs (test_upgrades, test_hot_swap,
# test_canary_shadow, test_delivery: 3 min 44 s with HotSpot's default, 2 min 38 s with C1 only).
# What a job does is the same either way; the image, `make demo` and `make bench` keep the default.
C1_ONLY = "-XX:TieredStopAtLevel=1"
_submit_opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
if "TieredStopAtLevel" not in _submit_opts:  # a tier the caller chose stays
    os.environ["SPARK_SUBMIT_OPTS"] = f"{_submit_opts} {C1_ONLY}".strip()


# The quick tier (`make test-quick`, `pytest -m quick`): every test that needs none of these
# fixtures and has none of these marks: no Spark, no Kafka broker, no API server, no job process,
# no JVM of its own, no model trained, no package index.
SLOW_FIXTURES = frozenset({"broker", "acl_broker", "jvm_session", "kube", "serving", "wine_fixtures", "demo_models",
                           "frozen_graph", "optimized", "artifacts"})
SLOW_MARKS = ("spark", "broker", "jvm", "node", "index")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if not SLOW_FIXTURES.intersection(item.fixturenames) and not any(map(item.get_closest_marker, SLOW_MARKS)):
            item.add_marker(pytest.mark.quick)
    _longest_files_first(config, items)


# `--dist loadfile` hands each worker a whole file, in the order of the collection
# (`--no-loadscope-reorder`; xdist's own order is by number of tests). A file of few slow tests
# handed out last keeps one worker busy while the other idles: the files that took longest in the
# last run of the same selection go first (longest processing time first). Files without a time
# (a fresh clone, a new file) go before them: those with tests out of the quick tier first (they
# start brokers, Spark, API servers), the longest timeout a test of theirs is given first (what
# their authors expect them to take), then by number of tests; the many short files fill the end.
# A clone without pytest's cache (CI's) takes the times of a full run committed in
# tests/file-seconds.json (`python hack/file_seconds.py` copies the cache's there).
FILE_SECONDS = "scorestream/file-seconds"
COMMITTED_FILE_SECONDS = REPO / "tests" / "file-seconds.json"


def _selection_name(config) -> str:
    return config.option.markexpr or "all"


def _selection(config) -> str:
    return f"{FILE_SECONDS}/{_selection_name(config)}"


def _known_seconds(config) -> dict[str, float]:
    """Seconds per file of the last run of this selection: pytest's cache, over the committed ones."""
    committed = json.loads(COMMITTED_FILE_SECONDS.read_text()) if COMMITTED_FILE_SECONDS.exists() else {}
    cache = getattr(config, "cache", None)
    return {**committed.get(_selection_name(config), {}),
            **(cache.get(_selection(config), {}) if cache is not None else {})}


def _longest_files_first(config, items) -> None:
    seconds = _known_seconds(config)
    counts: dict[str, int] = {}
    slow: set[str] = set()
    timeouts: dict[str, float] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        counts[path] = counts.get(path, 0) + 1
        if not item.get_closest_marker("quick"):
            slow.add(path)
        if (mark := item.get_closest_marker("timeout")) and mark.args:
            timeouts[path] = max(timeouts.get(path, 0.0), float(mark.args[0]))

    def weight(item) -> tuple:
        path = item.nodeid.split("::")[0]
        known = seconds.get(path)
        if known is None:
            return (0, path not in slow, -timeouts.get(path, 0.0), -counts[path], path)
        return (1, 0, -known, 0, path)

    items.sort(key=weight)  # stable: a file's own tests keep their order


@pytest.fixture(scope="session", autouse=True)
def orphans_of_killed_runs_stopped():
    """What a run killed midway left running (harness/orphans.py) is stopped before this one
    starts its own; what this run starts is marked as its own."""
    from harness import orphans

    orphans.mark_this_process()
    for killed in orphans.sweep():
        print(f"stopped an orphan of a killed test run: {killed}")
    if os.geteuid() == 0:  # only root makes test hosts (harness/netns.py)
        from harness import netns

        for host in netns.sweep_stale():
            print(f"removed a killed test run's test host: {host}")
    for folder in orphans.sweep_folders():
        print(f"removed a killed test run's folder: {folder}")


@pytest.fixture(scope="session", autouse=True)
def scratch_under_pytest(tmp_path_factory):
    """Operators' work folders and Spark's scratch folders under pytest's own temporary folder,
    which pytest prunes (the last three runs kept), not in /tmp: a job killed -9 on purpose never
    removes its own."""
    base = tmp_path_factory.getbasetemp()
    (base / "spark").mkdir(exist_ok=True)
    os.environ["PYTEST_TMPDIR"] = str(base)
    os.environ["SPARK_LOCAL_DIRS"] = str(base / "spark")


@pytest.fixture(scope="session", autouse=True)
def run_dirs_restored():
    """/run/netns and /run/containerd as they were before the session (harness/netns.py)."""
    from harness import netns

    absent = netns.absent_run_dirs() if os.geteuid() == 0 else []
    yield
    for d in netns.remove_idle_run_dirs(absent):
        print(f"removed {d}, made by the tests' namespaces or the real node")


@pytest.fixture(scope="session")
def wine_fixtures() -> Path:
    """The report's own models and data (../shared/data/wine). CI has it; a user's clone may not."""
    if not (SHARED_WINE / "winequalityDecisionTreeClassification.pmml").is_file():
        pytest.skip(f"report fixtures not found at {SHARED_WINE} (set SCORESTREAM_SHARED to the shared/ folder)")
    return SHARED_WINE


@pytest.fixture(scope="session")
def jvm_session():
    """A batch SparkSession (local[1], no streaming query) with the scorer's jars: for tests that
    drive the JVM scorer directly."""
    from pyspark.sql import SparkSession

    from scorestream.runtime import jvm, job

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", job.TF_LOG_LEVEL)
    session = (
        SparkSession.builder.master("local[1]").appName("scorestream-tests")
        .config("spark.jars", ",".join(str(p) for p in jvm.spark_jars()))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def helm() -> Path:
    """The pinned helm binary `make setup` fetches (tests/harness/helm.py), of the run's end of the
    compatibility matrix (harness/matrix.py)."""
    from harness import helm as helm_tool
    from harness.matrix import END

    try:
        return helm_tool.ensure(toolset=END.tools)
    except helm_tool.HelmUnavailable as e:
        pytest.fail(f"helm is part of the test setup (`make setup` fetches it): {e}")


@pytest.fixture(scope="session")
def kube():
    """The tests' Kubernetes control plane (tests/harness/cluster.py), one per session, at the run's
    end of the compatibility matrix (harness/matrix.py)."""
    from harness.cluster import ControlPlane
    from harness.matrix import END

    with ControlPlane(version=END.kube) as cp:
        yield cp


@pytest.fixture(scope="session")
def installed(kube, tmp_path_factory):
    """The chart, cluster-wide, installed by helm as a user installs it: the CRDs, and the
    ServiceAccount whose token the tests' operators run with."""
    from harness.operator import helm_install

    return helm_install(kube, tmp_path_factory.mktemp("install"), "scorestream", "scorestream-system",
                        "--set", "watch.allNamespaces=true")


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """One single-node Apache Kafka broker for the session, of the run's end of the compatibility
    matrix (harness/matrix.py); its log is broker*/kafka.log."""
    from harness.matrix import END

    log = tmp_path_factory.mktemp("broker") / "kafka.log"
    with EmbeddedBroker(log=log, jars=END.broker_jars) as b:
        yield b


class Serving:
    """One test's serving setup: its own topics on the shared broker, and job processes on them."""

    def __init__(self, broker: EmbeddedBroker, workdir: Path, partitions: int = 2, **config):
        self.broker = broker
        self.workdir = workdir
        p = "t" + uuid.uuid4().hex[:8]
        self.topics = {"data": f"{p}-data", "out": f"{p}-out", "dlq": f"{p}-dlq", "models": f"{p}-models"}
        create_topics(
            broker.bootstrap,
            {self.topics["data"]: partitions, self.topics["out"]: 2, self.topics["dlq"]: 1, self.topics["models"]: 1},
            {self.topics["models"]: {"cleanup.policy": "compact"}},
        )
        self.partitions = partitions
        self.name = config.pop("name", "wine")
        self.overrides = config
        self.jobs: list[JobProcess] = []
        self.checkpoint = str(workdir / "checkpoint")
        # The control token, as the operator's Secret holds it: POST /executors requires it.
        workdir.mkdir(parents=True, exist_ok=True)
        self.token_file = workdir / "control-token"
        self.token_file.write_text(secrets.token_urlsafe(32))

    @property
    def resource_topics(self) -> dict[str, str]:
        """The topics as spec.kafka names them."""
        t = self.topics
        return {"dataTopic": t["data"], "outputTopic": t["out"], "deadLetterTopic": t["dlq"], "modelsTopic": t["models"]}

    def config(self, **extra) -> JobConfig:
        raw = {
            "name": self.name,
            "namespace": "test",
            "dataTypes": ["wine"],
            "kafka": {
                "bootstrapServers": self.broker.bootstrap,
                "dataTopic": self.topics["data"],
                "outputTopic": self.topics["out"],
                "deadLetterTopic": self.topics["dlq"],
                "modelsTopic": self.topics["models"],
            },
            "input": {"fields": list(feed.WINE_COLUMNS)},
            "spark": {"master": "local[2]", "triggerInterval": "500ms", "warmUpBatches": TEST_WARM_UP_BATCHES},
            "http": {"host": "127.0.0.1", "port": free_port(), "metricsPort": free_port(),
                     "controlTokenFile": str(self.token_file)},
            "checkpointLocation": self.checkpoint,
            "workDir": str(self.workdir / "work"),
            "restoreTimeoutSeconds": 30,
        }
        _merge(raw, self.overrides)
        _merge(raw, extra)
        return JobConfig.model_validate(raw)

    def start(self, **extra) -> JobProcess:
        job = JobProcess(self.config(**extra), self.workdir, log_name=f"job{len(self.jobs)}.log")
        self.jobs.append(job)
        return job.start()

    def produce(self, records) -> int:
        return feed.produce(self.broker.bootstrap, self.topics["data"], records, partitions=self.partitions)

    @property
    def address(self) -> tuple[str, str]:
        """The job's namespace and name: the models topic's keys for it start with them."""
        c = self.config()
        return c.namespace, c.name

    def key(self, data_type: str = "wine", candidate: bool = False) -> bytes:
        """The models-topic key of this job's model (or candidate) for a dataType."""
        return feed.model_key(self.address, data_type, candidate)

    def publish(self, descriptor) -> None:
        feed.publish_model(self.broker.bootstrap, self.topics["models"], descriptor, to=self.address)

    def withdraw(self, data_type: str = "wine") -> None:
        feed.withdraw_candidate(self.broker.bootstrap, self.topics["models"], data_type, to=self.address)

    def read(self, which: str, expect: int | None = None, **kw) -> list:
        return read_topic(self.broker.bootstrap, self.topics[which], expect=expect, **kw)

    def outputs(self, expect: int | None = None) -> list[dict]:
        return [json.loads(m.value()) for m in self.read("out", expect)]

    def close(self) -> None:
        for job in self.jobs:
            job.kill()


# A real-time job's warm-up (spark.warmUpBatches) in the tests' jobs: a few batches, so the path
# runs beside everything else (exactly-once, executors in their own JVMs, kill -9) in seconds; the
# default's 300 take 20-60 s a start, which only the warm-up's own test (test_real_time.py) and the
# latency benchmarks need.
TEST_WARM_UP_BATCHES = 5


def _merge(into: dict, extra: dict) -> None:
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


@pytest.fixture
def serving(broker, tmp_path):
    made: list[Serving] = []

    def make(on: EmbeddedBroker | None = None, **config) -> Serving:
        """A serving setup on the shared broker, or `on` another."""
        s = Serving(on or broker, tmp_path / f"s{len(made)}", **config)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


@pytest.fixture(scope="session")
def demo_models():
    """The demo's models as descriptors (trained on the packaged wine data), built once."""
    rows = feed.wine_rows()
    return {
        "tree": models.descriptor("tree", "1", "pmml", models.tree_pmml(rows)),
        "linear": models.descriptor("linear", "2", "pmml", models.linear_pmml(rows)),
        "keras": models.descriptor("keras", "3", "tensorflow", models.keras_savedmodel_zip(rows, epochs=3)),
        "shallow": models.descriptor("shallow", "4", "pmml", models.tree_pmml(rows, max_depth=2)),
    }


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """The demo's models as files, as a volume would hold them (the report's own models are
    covered by the runtime tests)."""
    rows = feed.wine_rows()
    folder = tmp_path_factory.mktemp("models")
    made = {"tree": ("pmml", models.tree_pmml(rows)), "linear": ("pmml", models.linear_pmml(rows)),
            "keras": ("tensorflow", models.keras_savedmodel_zip(rows, epochs=3))}
    # A model of a field the records do not carry: it loads (the resource names no input fields
    # to check it against) and fails on every record it is given.
    made["broken"] = ("pmml", made["linear"][1].replace(b'"alcohol"', b'"alcohol_pct"'))
    made["shallow"] = ("pmml", models.tree_pmml(rows, max_depth=2))  # a classifier to shadow the tree
    made["corrupt"] = ("pmml", made["tree"][1][: len(made["tree"][1]) // 2])  # a truncated upload
    out = {}
    for name, (fmt, data) in made.items():
        path = folder / f"{name}.{'pmml' if fmt == 'pmml' else 'zip'}"
        path.write_bytes(data)
        out[name] = {"format": fmt, "uri": path.as_uri()}
    return out


def pytest_terminal_summary(terminalreporter):
    """The figures the tests print (their captured stdout), shown after the run: with `-n`, a
    worker's output never reaches the terminal, but its reports carry what it captured."""
    lines = []
    for report in terminalreporter.stats.get("passed", []):
        for name, content in report.sections:
            if name == "Captured stdout call" and content.strip():
                lines.append(f"{report.nodeid}:\n{content.rstrip()}")
    if lines:
        terminalreporter.section("figures printed by the tests")
        terminalreporter.write_line("\n".join(lines))
    _file_times(terminalreporter)


def _file_times(terminalreporter, top: int = 12) -> None:
    """Seconds per test file, set-up and teardown included: `--dist loadfile` gives each file to one
    worker whole, so these, not single tests, decide how long the suite takes on 2 workers."""
    seconds: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if hasattr(report, "duration") and hasattr(report, "nodeid"):
                path = report.nodeid.split("::")[0]
                seconds[path] = seconds.get(path, 0.0) + report.duration
    cache = getattr(terminalreporter.config, "cache", None)
    if seconds and cache is not None and not terminalreporter.config.option.keyword:  # -k times part of a file
        key = _selection(terminalreporter.config)
        cache.set(key, {**cache.get(key, {}), **{p: round(s, 1) for p, s in seconds.items()}})
    if seconds:
        terminalreporter.section("slowest test files")
        for path, s in sorted(seconds.items(), key=lambda kv: -kv[1])[:top]:
            terminalreporter.write_line(f"{s:8.1f} s  {path}")
        terminalreporter.write_line(f"{sum(seconds.values()):8.1f} s  all {len(seconds)} files, "
                                    f"over {terminalreporter.config.option.numprocesses or 1} worker(s)")
