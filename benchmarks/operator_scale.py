"""The operator at scale, on the tests' real API server (tests/harness/cluster.py): 100 ModelServings
across 10 namespaces, then 1,000 across 20, created at once, then a spec change to all of them. Printed: the time until
all are Ready, reconcile p50/p99, the operator's RSS and CPU, and its API calls per minute at rest
and during the change; for the operator of each source tree given, side by side, with ratios.

Each tree runs in a control plane and broker of its own, with its own chart (CRD and RBAC) and its
operator as one process of that tree's source (`scorestream.operator.handlers.run`, no CLI, so a
tree where the CLI moved runs the same), with the chart ServiceAccount's token, the default
intervals, its metrics port for the reconcile histogram. The jobs are answered by that tree's typed
double (tests/harness/fake_job.py's FakeJob, its own contract in scorestream/api/job_http.py): one process
serving all 100 under /<namespace>/<name>/ (the operator's endpointTemplate), so that 100 doubles
cost one process and the figures are the operator's. Kafka: one embedded broker; all resources
share the data, output and dead-letter topics and each has its own models topic.

The spec change is spec.spark.triggerInterval 1s -> 2s: a job configuration change, so each
driver is rolled (the StatefulSet controller replaces the pod, kwok runs it) and the operator
follows the upgrade until the driver of the new configuration is ready. "Ready" after it:
observedGeneration is the new generation, Ready is True and Progressing False.

kwok's nodes take 110 pods each: one more node is made per 100 resources.

    python benchmarks/operator_scale.py [--before COMMIT] [--after COMMIT] [--sizes 100:10,1000:20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import requests
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from scorestream.naming import CONFIG_HASH_ANNOTATION  # noqa: E402
from scorestream.tools.local.broker import EmbeddedBroker, create_topics, free_port  # noqa: E402

from harness import orphans  # noqa: E402
from harness.cluster import ControlPlane, kwok_node, node_ready  # noqa: E402
from harness.operator import EXAMPLE, MS, Api, Installation, tool  # noqa: E402

DATA, OUTPUT, DLQ = "records", "predictions", "dlq"
# Small enough that 100 drivers fit the kwok node (64 CPUs, 256 GiB); the operator renders them the same.
DRIVER = {"cpu": "500m", "memory": "1Gi"}


# --- a source tree as a package: PYTHONPATH instead of the editable install ------------------------

def package_root(tree: Path, work: Path) -> Path:
    """A directory holding `scorestream` as `tree` lays it out (pyproject's package-dir: the kernel,
    operator/, runtime/ and tools/ as its subpackages), for PYTHONPATH. PYTHONPATH
    comes before the editable install's finder, which sys.meta_path holds after the path finder."""
    root = work / f"pkg-{uuid.uuid4().hex[:6]}"
    pkg = root / "scorestream"
    pkg.mkdir(parents=True)
    for entry in (tree / "scorestream").iterdir():
        (pkg / entry.name).symlink_to(entry)
    for sub in ("operator", "runtime", "tools"):
        if not (pkg / sub).exists() and (tree / sub).exists():
            (pkg / sub).symlink_to(tree / sub)
    return root


def tree_env(tree: Path, work: Path, **extra: str) -> dict[str, str]:
    root = package_root(tree, work)
    # TMPDIR: the Kubernetes client's copy of a kubeconfig's CA goes with the work folder, not /tmp
    # (it is removed only at a clean exit, and operators here are killed).
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(tree / "tests")]), "TMPDIR": str(work),
            **extra}


def checkout(commit: str, work: Path) -> Path:
    """The tree of `commit`, as a detached git worktree under `work` (removed by `drop_checkout`)."""
    path = work / f"tree-{commit}"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(path), commit],
                   check=True, capture_output=True)
    return path


def drop_checkout(path: Path) -> None:
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], capture_output=True)


# --- the jobs' double: one process, every job under /<namespace>/<name> ----------------------------

DOUBLES = r'''
import base64, os, asyncio, sys
import requests
from aiohttp import web
try:
    from harness.fake_job import FakeJob, served
except ImportError:  # a tree from before the harness moved to tests/harness/
    from fake_job import FakeJob, served

# The control token each job requires on POST /executors: the one in the Secret the operator made
# for its resource, read as the admin (as tests/harness/fake_job.py's fixture does).
kube = requests.Session()
kube.trust_env = False
kube.verify = os.environ["BENCH_KUBE_CA"]
kube.cert = (os.environ["BENCH_KUBE_CERT"], os.environ["BENCH_KUBE_KEY"])
jobs = {}

def control_token(ns, name):
    r = kube.get(f"{os.environ['BENCH_KUBE_SERVER']}/api/v1/namespaces/{ns}/secrets/{name}-control", timeout=10)
    return base64.b64decode(r.json()["data"]["token"]).decode() if r.status_code == 200 else None

def job(request):
    key = (request.match_info["ns"], request.match_info["name"])
    if key not in jobs:
        jobs[key] = FakeJob()
        # A blocking read here would hold every double's answers while the API server answers it.
        jobs[key].token_source = lambda: asyncio.to_thread(control_token, *key)
    return jobs[key]

def route(method):
    async def handle(request):
        return await getattr(job(request), method)(request)
    return handle

async def counts(request):
    return web.json_response({"refused": sum(j.refused for j in jobs.values()), "jobs": len(jobs)})

async def main():
    app = web.Application()
    for path, method in (("readyz", "readyz"), ("stats", "stats"), ("models", "models")):
        app.router.add_get("/{ns}/{name}/" + path, route(method))
    app.router.add_post("/{ns}/{name}/executors", route("scale"))
    app.router.add_get("/_counts", counts)
    async with served(app) as url:
        print(url, flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
'''


# --- measuring the operator's process ----------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Sampler(threading.Thread):
    """The operator's peak RSS per phase, sampled every 0.5 s."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.phase, self.peak = pid, "start", {}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            try:
                rss = rss_mib(self.pid)
            except OSError:
                return
            self.peak[self.phase] = max(self.peak.get(self.phase, 0.0), rss)


RECONCILE_SECONDS = "scorestream_operator_reconcile_seconds"
# The wait of a key queued by a watch event (a tree from before this histogram has none: "-").
QUEUE_SECONDS, CHANGE = "scorestream_operator_workqueue_queue_duration_seconds", 'priority="change"'


def metrics_text(port: int) -> str:
    """The operator's /metrics, read once for every figure of a snapshot."""
    return requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text


def histogram(text: str, name: str = RECONCILE_SECONDS, having: str = "") -> dict[float, float]:
    """One of the operator's histograms in its /metrics `text`, cumulative counts by upper bound,
    summed over its series (those whose labels contain `having`)."""
    out: dict[float, float] = {}
    for m in re.finditer(rf'^{name}_bucket\{{([^}}]*)\}} (\S+)$', text, re.M):
        if having not in m.group(1):
            continue
        le = re.search(r'le="([^"]+)"', m.group(1)).group(1)
        bound = float("inf") if le == "+Inf" else float(le)
        out[bound] = out.get(bound, 0.0) + float(m.group(2))
    return out


def quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float | None:
    """Prometheus's histogram_quantile over the reconciles between two snapshots: linear within
    the bucket the rank falls in (so no finer than the buckets: 10, 25, 50, 100, 250, 500 ms ...)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound, count in zip(bounds, counts):
        if count >= rank:
            if bound == float("inf"):
                return bound  # beyond the last finite bound: no figure but "more than that"
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = bound, count
    return lower


# --- the run ------------------------------------------------------------------------------------------

@dataclass
class Phase:
    started: float  # wall clock
    accepted: float = 0.0  # seconds the API server took to accept the phase's requests (creates, edits)
    ended: float = 0.0  # when a listing saw the last resource settle
    settled: float = 0.0  # when the last resource settled, by its conditions (settled_at)
    cpu: float = 0.0  # the operator's CPU seconds
    reconciles: int = 0
    p50: float | None = None
    p99: float | None = None
    calls: int = 0
    verbs: dict[str, int] = field(default_factory=dict)
    applies: dict[str, int] = field(default_factory=dict)  # child "kind/namespace/name" -> patches of it
    hist: dict[float, float] = field(default_factory=dict)  # the reconcile histogram at its start
    queued: dict[float, float] = field(default_factory=dict)  # the changed keys' queue waits at its start
    queue_p50: float | None = None
    queue_p99: float | None = None

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    def per_minute(self) -> float:
        return self.calls * 60 / self.seconds


@dataclass
class Failover:
    takeover: float  # seconds from the leader's kill to the changed resource's status of its new generation
    writes: dict[str, int]  # "verb resource" -> count: the new leader's writes in its first minute, but the change's


@dataclass
class Result:
    label: str
    phases: dict[str, Phase] = field(default_factory=dict)
    peak_rss: dict[str, float] = field(default_factory=dict)
    refused_scales: int = 0
    failover: Failover | None = None
    behind_driver: list[float] = field(default_factory=list)  # ready_after_driver, after create
    pod_after_set: list[float] = field(default_factory=list)  # driver_after_statefulset, after create


def spec_for(ns: str, name: str, broker: str) -> dict:
    body = json.loads(json.dumps(EXAMPLE))
    body["metadata"] = {"name": name, "namespace": ns}
    kafka = body["spec"]["kafka"]
    kafka.pop("secretRef")
    kafka.update(bootstrapServers=broker, dataTopic=DATA, outputTopic=OUTPUT, deadLetterTopic=DLQ,
                 modelsTopic=f"models-{ns}-{name}")
    body["spec"]["spark"]["driver"] = dict(DRIVER)
    # The change rolls every driver at once, and this control plane's StatefulSet controller (20
    # requests a second) takes longer than the default 10 minutes to roll a thousand: the last
    # would be rolled back (UpgradeRolledBack) for the cluster's pace, not the operator's.
    body["spec"]["upgradeTimeout"] = "60m"
    return body


def all_settled(api: Api, want: int, changed: bool) -> int:
    """How many of the resources are Ready at their current generation (and, after the change, done
    upgrading: Progressing False)."""
    return sum(1 for ms in api.request("GET", f"/apis/{MS}")["items"] if _settled(ms, changed))


def _settled(ms: dict, changed: bool) -> bool:
    st = ms.get("status") or {}
    conds = {c["type"]: c["status"] for c in st.get("conditions", [])}
    if st.get("observedGeneration") != ms["metadata"]["generation"] or conds.get("Ready") != "True":
        return False
    return not changed or (ms["spec"]["spark"].get("triggerInterval") == "2s" and conds.get("Progressing") == "False"
                           and (st.get("upgrade") or {}).get("phase") != "Failed")  # rolled back is not done


def unsettled(api: Api, changed: bool) -> str:
    """Why the resources not settled are not: how many of them say what (Ready's and Progressing's
    reasons, the upgrade's phase, whether the status is of the current generation)."""
    said: dict[str, int] = {}
    for ms in api.request("GET", f"/apis/{MS}")["items"]:
        if _settled(ms, changed):
            continue
        st = ms.get("status") or {}
        reasons = {c["type"]: f"{c['status']} {c.get('reason', '')}" for c in st.get("conditions", [])}
        what = (f"Ready {reasons.get('Ready', '-')}, Progressing {reasons.get('Progressing', '-')}, upgrade "
                f"{(st.get('upgrade') or {}).get('phase', '-')}"
                + ("" if st.get("observedGeneration") == ms["metadata"]["generation"] else ", status of an older generation"))
        said[what] = said.get(what, 0) + 1
    return "; ".join(f"{n} × {what}" for what, n in sorted(said.items(), key=lambda kv: -kv[1]))


def unsettled_sample(api: Api, changed: bool, n: int = 3) -> str:
    """A few of the unsettled resources in full: their status, their driver StatefulSet's rollout
    and their driver pod, for a run that does not settle (the control plane goes with the run)."""
    lines = []
    for ms in [ms for ms in api.request("GET", f"/apis/{MS}")["items"] if not _settled(ms, changed)][:n]:
        meta, st = ms["metadata"], ms.get("status") or {}
        ns, name = meta["namespace"], meta["name"]
        lines.append(f"  {ns}/{name} generation {meta['generation']}, status of {st.get('observedGeneration')}, "
                     f"phase {st.get('phase')}, upgrade {json.dumps(st.get('upgrade'))}")
        for c in st.get("conditions", []):
            lines.append(f"    {c['type']} {c['status']} {c.get('reason', '')}: {c.get('message', '')[:200]}")
        sts = api.request("GET", f"/apis/apps/v1/namespaces/{ns}/statefulsets/{name}-driver", ok_missing=True) or {}
        lines.append(f"    StatefulSet generation {sts.get('metadata', {}).get('generation')}: "
                     f"{json.dumps(sts.get('status'))}")
        pod = api.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}-driver-0", ok_missing=True) or {}
        pm = pod.get("metadata") or {}
        lines.append(f"    pod: created {pm.get('creationTimestamp')}, deleting {pm.get('deletionTimestamp')}, "
                     f"revision {(pm.get('labels') or {}).get('controller-revision-hash')}, hash "
                     f"{(pm.get('annotations') or {}).get(CONFIG_HASH_ANNOTATION)}, node "
                     f"{(pod.get('spec') or {}).get('nodeName')}, phase {(pod.get('status') or {}).get('phase')}, "
                     f"conditions {[(c['type'], c['status']) for c in (pod.get('status') or {}).get('conditions', [])]}")
    return "\n".join(lines)


def settled_at(api: Api) -> float:
    """When the last resource settled, by its own conditions: the latest lastTransitionTime of Ready
    and Progressing (Ready turning True, an upgrade ending), in whole seconds. Unlike the time the
    listing saw it, this holds where a loaded API server answered a listing late."""
    latest = 0.0
    for ms in api.request("GET", f"/apis/{MS}")["items"]:
        for c in (ms.get("status") or {}).get("conditions", []):
            if c["type"] in ("Ready", "Progressing"):
                latest = max(latest, _when(c["lastTransitionTime"]))
    return latest


def _when(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _ready_since(conditions: list[dict]) -> float | None:
    """When a Ready condition that holds turned True (None: not Ready)."""
    ready = next((c for c in conditions if c["type"] == "Ready" and c["status"] == "True"), None)
    return _when(ready["lastTransitionTime"]) if ready else None


@dataclass(frozen=True)
class DriverPod:
    ready_at: float  # when it turned Ready
    statefulset: str | None  # the StatefulSet that made it


def ready_driver_pods(api: Api) -> dict[tuple[str, str], DriverPod]:
    """The driver pods that are Ready, by their resource's namespace and name."""
    pods = {}
    for pod in api.request("GET", "/api/v1/pods?labelSelector=app.kubernetes.io/component=driver")["items"]:
        at = _ready_since(pod["status"].get("conditions", []))
        owner = (pod["metadata"].get("labels") or {}).get("scorestream.dev/modelserving")
        if at is not None and owner:
            made_by = next((o["name"] for o in pod["metadata"].get("ownerReferences", []) if o["kind"] == "StatefulSet"),
                           None)
            pods[(pod["metadata"]["namespace"], owner)] = DriverPod(at, made_by)
    return pods


def ready_after_driver(api: Api, pods: dict[tuple[str, str], DriverPod]) -> list[float]:
    """For each resource, the seconds from its driver pod turning Ready to the resource turning
    Ready (whole seconds, by both conditions): the operator's share of the time to Ready, the
    cluster's (StatefulSet controller, scheduler, kubelet) aside."""
    gaps = []
    for ms in api.request("GET", f"/apis/{MS}")["items"]:
        pod = pods.get((ms["metadata"]["namespace"], ms["metadata"]["name"]))
        at = _ready_since((ms.get("status") or {}).get("conditions", []))
        if pod is not None and at is not None:
            gaps.append(max(0.0, at - pod.ready_at))
    return sorted(gaps)


def driver_after_statefulset(api: Api, pods: dict[tuple[str, str], DriverPod]) -> list[float]:
    """For each resource, the seconds from its driver's StatefulSet being made (by the operator) to
    its driver pod turning Ready (whole seconds): the cluster's share of the time to Ready (the
    StatefulSet controller, the volume claims, the scheduler, kwok), the operator's aside."""
    made = {(x["metadata"]["namespace"], x["metadata"]["name"]): _when(x["metadata"]["creationTimestamp"])
            for x in api.request("GET", "/apis/apps/v1/statefulsets?labelSelector=app.kubernetes.io/managed-by"
                                        "=scorestream-operator")["items"]}
    return sorted(max(0.0, pod.ready_at - made[(ns, pod.statefulset)])
                  for (ns, _), pod in pods.items() if (ns, pod.statefulset) in made)


async def wait_settled(api: Api, want: int, changed: bool, timeout: float, what: str) -> None:
    deadline, last = time.monotonic() + timeout, -1
    while True:
        try:
            done = await asyncio.to_thread(all_settled, api, want, changed)
        except requests.RequestException as e:  # an API server starved by a loaded machine: ask again
            print(f"    {time.strftime('%H:%M:%S')} {what}: listing failed ({type(e).__name__}), asking again")
            done = last
        if done != last:
            print(f"    {time.strftime('%H:%M:%S')} {what}: {done}/{want}", flush=True)
            last = done
        if done >= want:
            return
        if time.monotonic() > deadline:
            why = await asyncio.to_thread(unsettled, api, changed)
            print(await asyncio.to_thread(unsettled_sample, api, changed), flush=True)
            raise TimeoutError(f"{what}: {done} of {want} after {timeout:.0f} s; the others: {why}")
        await asyncio.sleep(1.0)


def audit_calls(kube: ControlPlane, subject: str) -> list[tuple[float, str, str]]:
    """(time received, "verb resource", "resource/namespace/name") of each request the operator made
    (its watches aside: they are its event source, one per kind, not requests per resource)."""
    out = []
    for e in kube.audit(subject):
        if e.get("stage") not in (None, "ResponseComplete") or e.get("verb") == "watch":
            continue
        ref = e.get("objectRef") or {}
        at = datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
        res = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        out.append((at, f"{e['verb']} {res}", f"{res}/{ref.get('namespace')}/{ref.get('name')}"))
    return out


# The chart's election (both trees run this tree's default): a follower takes over once the dead
# leader's Lease is leaseDuration old.
ELECTION = {"namespace": "scorestream-system", **{k: v for k, v in yaml.safe_load(
    (REPO / "charts" / "scorestream" / "values.yaml").read_text())["leaderElection"].items() if k != "enabled"}}


def start_operator(tree: Path, work: Path, installed: Installation, job_url: str, metrics_port: int,
                   election: bool = False, name: str = "operator", wait: bool = True,
                   workers: int | None = None) -> tuple[subprocess.Popen, Path]:
    health = free_port()
    config = {"allNamespaces": True, "endpointTemplate": job_url + "/{namespace}/{name}",
              "metricsPort": metrics_port, "healthPort": health, **({"workers": workers} if workers else {})}
    if election:
        config["leaderElection"] = ELECTION
    (work / f"{name}.yaml").write_text(yaml.safe_dump(config))
    log = work / f"{name}.log"
    launch = ("import sys, yaml; from scorestream.operator import handlers; "
              "from scorestream.operator.settings import OperatorConfig; "
              "handlers.run(OperatorConfig.model_validate(yaml.safe_load(open(sys.argv[1]))))")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", launch, str(work / f"{name}.yaml")], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                env=tree_env(tree, work, KUBECONFIG=str(installed.kubeconfig)),
                                cwd=work)  # not this checkout: `python -c` puts the cwd before PYTHONPATH
    deadline = time.monotonic() + 90
    while wait:
        if proc.poll() is not None:
            raise RuntimeError(f"the operator of {tree} exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if requests.get(f"http://127.0.0.1:{health}/healthz", timeout=1).status_code == 200:
                return proc, log
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the operator of {tree} did not answer /healthz")
        time.sleep(0.5)
    return proc, log


def stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


CHILD_RESOURCES = {"configmaps", "serviceaccounts", "services", "roles", "rolebindings", "statefulsets",
                   "networkpolicies"}


def extra_nodes(kube: ControlPlane, resources: int) -> None:
    """kwok nodes beside the harness's one (110 pods each), enough for a driver pod per resource."""
    for i in range(1, resources // 100 + 1):
        kube.create(kwok_node(f"kwok-node-{i}"))
    deadline = time.monotonic() + 120
    while not all(node_ready(kube.get(f"/api/v1/nodes/kwok-node-{i}")) for i in range(1, resources // 100 + 1)):
        if time.monotonic() > deadline:
            raise TimeoutError("the extra kwok nodes did not get Ready")
        time.sleep(0.5)


async def run_tree(label: str, tree: Path, args: argparse.Namespace, namespaces: int, per_namespace: int) -> Result:
    work = Path(tempfile.mkdtemp(prefix=f"operator-scale-{label.split()[0]}-"))
    print(f"\n== {label}: {namespaces * per_namespace} resources, {tree} (work files in {work})", flush=True)
    result = Result(label)
    names = [(f"scale-{i}", f"wine-{j}") for i in range(namespaces) for j in range(per_namespace)]
    want = len(names)
    doubles = op = None
    with ControlPlane() as kube, EmbeddedBroker(log=work / "kafka.log") as broker:
        try:
            tool("helm", kube, "install", "scorestream", str(tree / "charts" / "scorestream"), "-n",
                 "scorestream-system", "--create-namespace", "--wait", "--timeout", "5m",
                 "--set", "watch.allNamespaces=true", "--set", f"leaderElection.enabled={str(args.failover).lower()}")
            installed = Installation(kube, "scorestream", "scorestream-system", work)
            api = Api(kube, installed, "")
            extra_nodes(kube, want)
            for i in range(namespaces):
                api.namespace(f"scale-{i}")
            create_topics(broker.bootstrap, {DATA: 1})
            doubles = subprocess.Popen([sys.executable, "-c", DOUBLES], stdout=subprocess.PIPE, text=True,
                                       stderr=open(work / "doubles.log", "wb"), start_new_session=True, cwd=work,
                                       env=tree_env(tree, work, BENCH_KUBE_SERVER=kube.server,
                                                    BENCH_KUBE_CA=str(kube.dir / "ca.crt"),
                                                    BENCH_KUBE_CERT=str(kube.dir / "admin.crt"),
                                                    BENCH_KUBE_KEY=str(kube.dir / "admin.key")))
            job_url = doubles.stdout.readline().strip()
            metrics_port = free_port()
            op, log = start_operator(tree, work, installed, job_url, metrics_port, election=args.failover,
                                     workers=args.workers)
            sampler = Sampler(op.pid)
            sampler.start()

            def phase(name: str) -> Phase:
                sampler.phase = name
                text = metrics_text(metrics_port)
                p = Phase(started=time.time(), cpu=cpu_seconds(op.pid), hist=histogram(text),
                          queued=histogram(text, QUEUE_SECONDS, CHANGE))
                result.phases[name] = p
                return p

            def end(p: Phase) -> None:
                p.ended = time.time()
                p.cpu = cpu_seconds(op.pid) - p.cpu
                text = metrics_text(metrics_port)
                after = histogram(text)
                p.reconciles = int(after.get(float("inf"), 0) - p.hist.get(float("inf"), 0))
                p.p50, p.p99 = quantile(0.5, p.hist, after), quantile(0.99, p.hist, after)
                queued = histogram(text, QUEUE_SECONDS, CHANGE)
                p.queue_p50, p.queue_p99 = quantile(0.5, p.queued, queued), quantile(0.99, p.queued, queued)

            pool = ThreadPoolExecutor(32)
            created = phase("create")
            list(pool.map(lambda n: api.create(MS, spec_for(n[0], n[1], broker.bootstrap), namespace=n[0]), names))
            created.accepted = time.time() - created.started
            await wait_settled(api, want, False, args.timeout, "Ready after create")
            end(created)
            created.settled = await asyncio.to_thread(settled_at, api)
            pods = await asyncio.to_thread(ready_driver_pods, api)
            result.behind_driver = await asyncio.to_thread(ready_after_driver, api, pods)
            result.pod_after_set = await asyncio.to_thread(driver_after_statefulset, api, pods)

            await asyncio.sleep(args.settle)
            rest = phase("rest")
            await asyncio.sleep(args.window)
            end(rest)

            changed = phase("change")
            list(pool.map(lambda n: api.patch(MS, n[1], {"spec": {"spark": {"triggerInterval": "2s"}}},
                                              namespace=n[0]), names))
            changed.accepted = time.time() - changed.started
            await wait_settled(api, want, True, args.timeout, "Ready after the change")
            end(changed)
            changed.settled = await asyncio.to_thread(settled_at, api)
            if args.failover:
                follower = start_operator(tree, work, installed, job_url, free_port(), election=True, name="follower",
                                          workers=args.workers,
                                          wait=False)[0]
                try:
                    result.failover = await failover(kube, api, installed, op, names[0])
                finally:
                    stop(follower)
            sampler.stopped.set()
            result.peak_rss = dict(sampler.peak)
            result.refused_scales = requests.get(f"{job_url}/_counts", timeout=5).json()["refused"]

            calls = audit_calls(kube, installed.subject)
            for p in result.phases.values():
                mine = [(what, obj) for at, what, obj in calls if p.started <= at < p.ended]
                p.calls = len(mine)
                for what, obj in mine:
                    p.verbs[what] = p.verbs.get(what, 0) + 1
                    verb, _, res = what.partition(" ")
                    if verb == "patch" and res in CHILD_RESOURCES:
                        p.applies[obj] = p.applies.get(obj, 0) + 1
            print(f"    operator log: {log}", flush=True)
        finally:
            stop(op)
            stop(doubles)
    return result


async def failover(kube: ControlPlane, api: Api, installed: Installation, leader: subprocess.Popen,
                   changed: tuple[str, str]) -> Failover:
    """kill -9 of the leader with a follower waiting; one resource changed at once: how long until
    its new generation is reconciled, and what the new leader writes in its first minute besides."""
    await asyncio.sleep(5)  # the follower is up, waiting for the Lease
    ns, name = changed
    os.killpg(leader.pid, 9)
    killed = time.time()
    generation = api.patch(MS, name, {"spec": {"spark": {"triggerInterval": "3s"}}}, namespace=ns)["metadata"]["generation"]
    while (api.request("GET", api.path(MS, name, ns)).get("status") or {}).get("observedGeneration") != generation:
        if time.time() - killed > 300:
            raise TimeoutError("no operator reconciled the change within 300 s of the leader's kill")
        await asyncio.sleep(0.2)
    takeover = time.time() - killed
    await asyncio.sleep(max(0.0, killed + 60 + takeover - time.time()))
    writes: dict[str, int] = {}
    for at, what, where in audit_calls(kube, installed.subject):
        verb, _, res = what.partition(" ")
        if killed <= at and verb in ("create", "update", "patch", "delete") and res not in ("leases", "events") \
                and f"/{ns}/{name}" not in where and f"/{ns}/{name}-" not in where:
            writes[what] = writes.get(what, 0) + 1
    return Failover(takeover, writes)


def spread(seconds: list[float]) -> str:
    if not seconds:
        return "-"
    at = lambda q: seconds[min(len(seconds) - 1, int(q * len(seconds)))]  # noqa: E731
    return f"{at(0.5):.0f} s · {at(0.99):.0f} s · {seconds[-1]:.0f} s"


def ms(value: float | None) -> str:
    if value == float("inf"):
        return "> its last bucket"
    return "-" if value is None else f"{value * 1000:,.0f} ms"


def ratio(after: float | None, before: float | None) -> str:
    if not after or not before or float("inf") in (after, before):
        return "-"
    return f"{after / before:.2f}×"


def per_resource_at_rest(rest: Phase, n: int) -> float:
    """API calls per resource and minute at rest, the leader election's (one Lease, whatever the
    number of resources) aside."""
    calls = sum(count for what, count in rest.verbs.items() if not what.endswith(" leases"))
    return calls * 60 / rest.seconds / n


def rows(r: Result, n: int) -> dict[str, tuple[str, float | None]]:
    c, rest, ch = r.phases["create"], r.phases["rest"], r.phases["change"]
    return {
        "API server accepting the creates": (f"{c.accepted:.1f} s", c.accepted),
        "time until all Ready after create (conditions)": (f"{c.settled - c.started:.0f} s", c.settled - c.started),
        "time until all Ready after the change (conditions)": (f"{ch.settled - ch.started:.0f} s",
                                                              ch.settled - ch.started),
        "Ready after its driver pod was, p50 · p99 · max (create)": (spread(r.behind_driver), None),
        "driver pod Ready after its StatefulSet was made, p50 · p99 · max (create)": (spread(r.pod_after_set), None),
        "... as the 1 s listing saw it, create · change": (f"{c.seconds:.1f} s · {ch.seconds:.1f} s", None),
        "reconciles, create · change": (f"{c.reconciles} · {ch.reconciles}", None),
        "reconciles per resource to create": (f"{c.reconciles / n:.1f}", c.reconciles / n),
        "children applied per resource in the change": (f"{sum(ch.applies.values()) / n:.1f}",
                                                         sum(ch.applies.values()) / n),
        "most applies of one child in the change": (f"{max(ch.applies.values(), default=0)}", None),
        "a changed key's wait in the queue, p50 · p99 (create)": (f"{ms(c.queue_p50)} · {ms(c.queue_p99)}", None),
        "reconcile p50, create": (ms(c.p50), c.p50),
        "reconcile p99, create": (ms(c.p99), c.p99),
        "reconciles per resource a minute at rest": (f"{rest.reconciles * 60 / rest.seconds / n:.2f}",
                                                     rest.reconciles * 60 / rest.seconds / n),
        "reconcile p50, at rest": (ms(rest.p50), rest.p50),
        "reconcile p99, at rest": (ms(rest.p99), rest.p99),
        "reconcile p50, change": (ms(ch.p50), ch.p50),
        "reconcile p99, change": (ms(ch.p99), ch.p99),
        "operator peak RSS": (f"{max(r.peak_rss.values()):.0f} MiB", max(r.peak_rss.values())),
        "operator CPU at rest (cores)": (f"{rest.cpu / rest.seconds:.3f}", rest.cpu / rest.seconds),
        "operator CPU, create · change (cores)": (f"{c.cpu / c.seconds:.2f} · {ch.cpu / ch.seconds:.2f}", None),
        "operator CPU s, create + change": (f"{c.cpu + ch.cpu:.1f}", c.cpu + ch.cpu),
        "API calls/min at rest (all)": (f"{rest.per_minute():,.0f}", rest.per_minute()),
        "API calls/min at rest per resource": (f"{rest.per_minute() / n:.1f}", rest.per_minute() / n),
        "... of them for the resources (the leader's Lease aside)": (
            f"{per_resource_at_rest(rest, n):.2f}", per_resource_at_rest(rest, n)),
        "API calls/min during the change (all)": (f"{ch.per_minute():,.0f}", ch.per_minute()),
        "API calls during the change per resource": (f"{ch.calls / n:.1f}", ch.calls / n),
    }


async def finished(run) -> Result | None:
    """A tree's run, or None where its resources did not all settle in time (said, and the other
    tree and size still run): an operator that does not keep up at this size is a result too."""
    try:
        return await run
    except TimeoutError as e:
        print(f"    did not finish: {e}", flush=True)
        return None


def report(results: list[Result], n: int) -> None:
    tables = [rows(r, n) for r in results]
    head = ["", *(r.label for r in results)] + (["after / before"] if len(results) == 2 else [])
    print("\n| " + " | ".join(head) + " |")
    print("|---" + "|---:" * (len(head) - 1) + "|")
    for key in tables[0]:
        cells = [t[key][0] for t in tables]
        if len(results) == 2:
            cells.append(ratio(tables[1][key][1], tables[0][key][1]))
        print(f"| {key} | " + " | ".join(cells) + " |")
    for r in results:
        print(f"\n{r.label}: API calls by verb and resource (per minute at rest · in the change)")
        rest, ch = r.phases["rest"], r.phases["change"]
        for what in sorted({*rest.verbs, *ch.verbs}, key=lambda w: -(rest.verbs.get(w, 0) + ch.verbs.get(w, 0))):
            print(f"    {rest.verbs.get(what, 0) * 60 / rest.seconds:8.1f} · {ch.verbs.get(what, 0) * 60 / ch.seconds:8.1f}"
                  f"  {what}")
        if r.failover is not None:
            f = r.failover
            print(f"    leader killed: the changed resource reconciled {f.takeover:.1f} s after the kill; the new "
                  f"leader's writes to resources that did not change in its first minute: "
                  f"{sum(f.writes.values())} {f.writes or ''}")
        if r.refused_scales:
            print(f"    (the doubles refused {r.refused_scales} scale requests without the resource's control token)")


async def main(args: argparse.Namespace) -> None:
    # What a run killed midway left (its control plane, broker, operators, jobs) is stopped, and
    # what this one starts is marked so that the next run, or the next test session, can do the same.
    for killed in [*orphans.sweep(), *orphans.sweep_folders()]:
        print(f"stopped or removed what a killed run left: {killed}", flush=True)
    orphans.mark_this_process()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores "
          f"(a shared machine: other work may run beside this)", flush=True)
    work = Path(tempfile.mkdtemp(prefix="operator-scale-"))
    before = checkout(args.before, work) if args.before else None
    after = checkout(args.after, work) if args.after else REPO
    try:
        for size in args.sizes.split(","):
            total, namespaces = (int(x) for x in size.split(":"))
            results = []
            if before is not None:
                results.append(await finished(run_tree(f"before ({args.before})", before, args, namespaces,
                                                       total // namespaces)))
            results.append(await finished(run_tree(f"after ({args.after or 'this tree'})", after, args, namespaces,
                                                   total // namespaces)))
            results = [r for r in results if r is not None]
            if not results:
                continue
            print(f"\n### {total} ModelServings in {namespaces} namespaces")
            report(results, total)
    finally:
        for tree in (before, after):
            if tree is not None and tree != REPO:
                drop_checkout(tree)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="fb3c3ad",
                        help="a commit whose operator runs first, for comparison ('' for this tree only); "
                             "the default is the last before the work queue (ADR 31)")
    parser.add_argument("--after", default="",
                        help="a commit whose operator runs second ('': this working tree, edits included)")
    parser.add_argument("--sizes", default="100:10,1000:20",
                        help="resources:namespaces for each run, comma-separated")
    parser.add_argument("--window", type=float, default=60.0, help="seconds counted at rest")
    parser.add_argument("--failover", action="store_true",
                        help="the operators elect a leader (ELECTION); after the change, kill -9 the leader beside a "
                             "follower and measure the takeover")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds after all are Ready before the rest window")
    parser.add_argument("--workers", type=int, default=None,
                        help="the operators' reconciles at once (operator.workers; default: the setting's own)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for all Ready, each time")
    asyncio.run(main(parser.parse_args()))
