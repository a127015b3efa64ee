"""The product as its users run it: the images `make images` built, on a real node.

The node (tests/harness/node.py) runs containerd, runc, the kubelet, kube-proxy and CoreDNS, joined to the
tests' control plane; the images are imported as a user loads them into a cluster without a
registry. Then what a user does: `helm install` of the chart with the operator image (the operator
runs as a pod under its ServiceAccount), `kubectl apply` of a ModelServing naming a runtime image,
Spark's driver and executors as containers, records scored onto the output topic from a broker the
pods reach, `kubectl scale`, a canary promoted by the operator pod that replaced a killed one,
the node restarted mid-stream (the kubelet and containerd stopped, every container killed, then
started again) with nothing lost, `kubectl logs`, the API server stopped for
two minutes under the stream, `helm upgrade`, and `helm uninstall` leaving nothing running. The
time of each step, the node's memory and the host's state before and after are printed.

Skips, saying why, where the machine cannot run a node (not root, no containerd, no overlayfs).
"""

from __future__ import annotations

import base64
import collections
import json
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager

import pytest
import yaml

from harness import helm as helm_tool
import images
from harness import node as real_node
from harness.cluster import ControlPlane
from scorestream import naming
from scorestream.operator.publish import ROLLOUT_HEADER
from scorestream.tools.demo import feed, models
from scorestream.tools.local.broker import EmbeddedBroker, create_topics
from scorestream.tools.local.process import read_topic

WHY = real_node.missing()
pytestmark = [pytest.mark.node, pytest.mark.skipif(WHY is not None, reason=f"the real node's tests are skipped: {WHY}")]

NS = "ml"
SYSTEM = "scorestream-system"
RELEASE = "scorestream"
# Renames the release's objects and the operator pod's app.kubernetes.io/name; every job's
# NetworkPolicy must admit the operator all the same (naming.OPERATOR_POD_LABELS).
NAME_OVERRIDE = "scoring"


@dataclass
class Cluster:
    cp: ControlPlane
    node: real_node.Node
    broker: Any  # the embedded broker or the three-broker cluster: .bootstrap
    kubeconfig: Path
    chart: Path  # the packaged chart `make dist` writes
    steps: dict[str, float] = field(default_factory=dict)

    def run(self, tool: str, *args: str, input: str | None = None, check: bool = True,
            timeout: float = 600) -> subprocess.CompletedProcess:
        res = subprocess.run([str(helm_tool.ensure(tool)), f"--kubeconfig={self.kubeconfig}", *args], input=input,
                             capture_output=True, text=True, timeout=timeout)
        if check and res.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} exited {res.returncode}:\n{res.stderr}\n{self.diagnose()}")
        return res

    def kubectl(self, *args: str, **kw) -> str:
        return self.run("kubectl", *args, **kw).stdout

    def helm(self, *args: str, **kw) -> str:
        return self.run("helm", *args, **kw).stdout

    @contextmanager
    def step(self, name: str):
        started = time.monotonic()
        yield
        self.steps[name] = time.monotonic() - started

    def pods(self, namespace: str, selector: str = "") -> list[dict]:
        out = self.kubectl("get", "pods", "-n", namespace, "-o", "json", *(["-l", selector] if selector else []))
        return json.loads(out)["items"]

    def running(self, namespace: str, selector: str) -> list[str]:
        return [p["metadata"]["name"] for p in self.pods(namespace, selector)
                if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
                and all(c.get("ready") for c in p["status"].get("containerStatuses", []))]

    def until(self, predicate, timeout: float, what: str, every: float = 2.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(every)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{self.diagnose()}")

    def diagnose(self) -> str:
        try:
            pods = subprocess.run([str(helm_tool.ensure("kubectl")), f"--kubeconfig={self.kubeconfig}", "get", "pods",
                                   "-A", "-o", "wide"], capture_output=True, text=True, timeout=30).stdout
            events = subprocess.run([str(helm_tool.ensure("kubectl")), f"--kubeconfig={self.kubeconfig}", "get",
                                     "events", "-A", "--sort-by=.lastTimestamp"], capture_output=True, text=True,
                                    timeout=30).stdout.splitlines()[-25:]
            logs = subprocess.run([str(helm_tool.ensure("kubectl")), f"--kubeconfig={self.kubeconfig}", "logs", "-n", NS,
                                   "-l", "app.kubernetes.io/component in (driver,executor)", "--tail=25",
                                   "--prefix"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError) as e:
            return f"(no diagnosis: {e})"
        return (f"pods:\n{pods}\nevents:\n" + "\n".join(events) + f"\njob logs:\n{logs}\n"
                + self.node.log_tail("kubelet", 15))


@contextmanager
def running_cluster(archives: list[Path], chart: Path, started: float,
                    brokers: Callable[[str], ContextManager[Any]] = lambda host: EmbeddedBroker(host=host)):
    """The real node with NetworkPolicies enforced, a control plane, `archives` imported into the
    node and `brokers(host)` (the embedded broker by default) started on the host's address, as a
    Cluster; stopped after, and the host checked to be as it was (sysctls, iptables/nftables,
    mounts, links, cgroups, paths)."""
    node = real_node.Node.network()
    node.policies = True  # the jobs' NetworkPolicies enforced for the whole run (kube-router)
    cp = None
    try:
        cp = ControlPlane(address=node.host_address, service_cidr=real_node.SERVICE_CIDR, fake_node=False).start()
        node.start(cp)
        for archive in archives:
            node.import_image(archive)
        with brokers(node.host_address) as broker:
            c = Cluster(cp, node, broker, cp.admin_config, chart)
            c.steps["cluster: control plane, node Ready, images imported, broker"] = time.monotonic() - started
            print(f"images imported: {', '.join(f'{k} {v:.0f} s' for k, v in node.import_seconds.items())}")
            yield c
            print("node's own memory (RSS MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in node.rss_mib().items()))
            print("steps (s): " + "; ".join(f"{k} {v:.1f}" for k, v in c.steps.items()))
    finally:
        if cp is not None:
            cp.stop()
        left = node.stop()
        print("host after the node: " + ("as it was (sysctls, iptables/nftables, mounts, links, cgroups, paths)"
                                         if not left else "\n  ".join(["DIFFERS:", *left])))
        assert not left, left


def release(dist: Path) -> tuple[list[Path], Path]:
    """What a user installs from: `make dist`'s image archives and chart package, written into
    `dist` (`make setup` built the images: this only finds them) and checked against their
    checksums. The operator's and the PMML flavour's archives: the TensorFlow flavour differs from
    the PMML one by TensorFlow alone, which test_images.py runs in its image."""
    files = images.dist(dist)
    subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=dist, check=True)
    archives = [f for target in ("operator", "runtime-pmml") for f in files
                if f.name == f"{images.IMAGES[target].name}-{images.VERSION}.oci.tar"]
    assert len(archives) == 2, [f.name for f in files]
    (chart,) = (f for f in files if f.name.endswith(".tgz"))
    return archives, chart


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = time.monotonic()
    with running_cluster(*release(tmp_path_factory.mktemp("dist")), started) as c:
        yield c


def data_uri(content: bytes, media: str) -> str:
    return f"data:{media};base64,{base64.b64encode(content).decode()}"


def modelserving(name: str, image: str, model: dict, topics: dict[str, str], bootstrap: str, **spec) -> dict:
    return {
        "apiVersion": "scorestream.dev/v1alpha1", "kind": "ModelServing",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "dataType": "wine", "replicas": 1, "model": model,
            "kafka": {"bootstrapServers": bootstrap, **topics},
            "spark": {"image": image, "imagePullPolicy": "Never", "triggerInterval": "1s",
                      # Two cores for everything (the operator's pod, the driver, two executors
                      # while scaled): a quarter of a core each was too little for a JVM to run
                      # a batch in minutes; this much fits on the node with room to spare.
                      "driver": {"cpu": "500m", "memory": "1536Mi"},
                      "executor": {"cpu": "600m", "memory": "1Gi"}},
            **spec,
        },
    }


def install_operator(c: Cluster, *extra: str) -> None:
    c.helm("upgrade", "--install", RELEASE, str(c.chart), "-n", SYSTEM, "--create-namespace",
           "--set", f"image.repository=localhost/{images.IMAGES['operator'].name}",
           "--set", f"image.tag={images.VERSION}", "--set", "image.pullPolicy=Never",
           "--set", f"watch.namespaces={{{NS}}}", "--set", "watch.createNamespaces=true",
           "--set", "operator.observeInterval=3", "--set", f"nameOverride={NAME_OVERRIDE}", *extra,
           "--wait", "--timeout", "5m")


class Producer:
    """Keyed wine records onto the data topic, until stopped: a stream, not a batch. With
    `malformed_every`, every so many records (the last of each run of that many) is not JSON: the
    job dead-letters it."""

    MALFORMED = b'{"dataType": "wine", "alcohol": '

    def __init__(self, bootstrap: str, topic: str, prefix: str, rate: float = 50.0, malformed_every: int = 0):
        self.bootstrap, self.topic, self.prefix, self.rate = bootstrap, topic, prefix, rate
        self.malformed_every = malformed_every
        self.sent: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rows = feed.wine_rows()
        p = feed.producer(self.bootstrap)
        i = 0
        while not self._stop.is_set():
            key = f"{self.prefix}-{i}"
            malformed = self.malformed_every and i % self.malformed_every == self.malformed_every - 1
            p.produce(self.topic, key=key.encode(), value=self.MALFORMED if malformed else feed.wine_json(rows[i % len(rows)]))
            self.sent.append(key)
            i += 1
            p.poll(0)
            time.sleep(1 / self.rate)
        assert p.flush(30) == 0

    def __enter__(self) -> "Producer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(60)


def scored_keys(c: Cluster, topic: str, keys: set[str], timeout: float = 300) -> set[str]:
    """The keys on the output topic, read until every one of `keys` is there (or `timeout`): the
    job may still be catching up on what was produced last."""
    deadline = time.monotonic() + timeout
    while True:
        scored = {m.key().decode() for m in read_topic(c.broker.bootstrap, topic, idle=3, timeout=120) if m.key()}
        if keys <= scored or time.monotonic() > deadline:
            return scored
        time.sleep(2)


def remove(c: Cluster, name: str) -> None:
    """The resource and the release gone, whatever became of the test: the next one starts on an
    empty node (a job left running would hold its CPU)."""
    c.kubectl("delete", "-n", NS, f"modelserving/{name}", "--ignore-not-found", "--wait=true", "--timeout=300s",
              check=False, timeout=400)
    c.helm("uninstall", RELEASE, "-n", SYSTEM, "--ignore-not-found", "--wait", "--timeout", "5m", check=False)


def wait_ready(c: Cluster, name: str, timeout: str = "600s") -> None:
    c.kubectl("wait", "-n", NS, "--for=condition=Ready", f"modelserving/{name}", f"--timeout={timeout}", timeout=700)


def topics_and_operator(c: Cluster, prefix: str, partitions: int) -> dict[str, str]:
    """A resource's topics (the data topic made, as a producer's would be), and the operator
    installed by helm."""
    topics = {"dataTopic": f"{prefix}-records", "outputTopic": f"{prefix}-predictions", "deadLetterTopic": f"{prefix}-dlq"}
    create_topics(c.broker.bootstrap, {topics["dataTopic"]: partitions})
    with c.step(f"{prefix}: helm install (operator pod Ready)"):
        install_operator(c)
    return topics


# An upgrade of the control plane, an etcd hiccup: the API server away for a minute, in which the
# operator's and the kubelet's requests to it time out.
OUTAGE = 60


def restarts(c: Cluster, namespace: str, selector: str) -> dict[str, int]:
    """Each pod's uid with its containers' restarts: the same after a fault where nothing restarted."""
    return {p["metadata"]["uid"]: sum(s.get("restartCount", 0) for s in p["status"].get("containerStatuses", []))
            for p in c.pods(namespace, selector)}


def api_server_outage(c: Cluster, topics: dict[str, str]) -> None:
    """The API server stopped for OUTAGE seconds while records stream: the job scores on without it
    (what was sent in the first half is scored before it is back), no job pod restarts, nothing is
    lost, and once it is back the operator answers a control request: its watches and status
    writes are back."""
    job = "scorestream.dev/modelserving=wine"
    pods_before = restarts(c, NS, job)
    operator_before = restarts(c, SYSTEM, f"app.kubernetes.io/instance={RELEASE}")
    with Producer(c.broker.bootstrap, topics["dataTopic"], "outage", rate=100) as producer:
        time.sleep(3)
        with c.cp.frozen("kube-apiserver"):
            back = time.monotonic() + OUTAGE
            first_sent = len(producer.sent)
            time.sleep(OUTAGE / 2)
            meanwhile = set(producer.sent[first_sent:])
            scored = scored_keys(c, topics["outputTopic"], meanwhile, timeout=max(0.0, back - time.monotonic() - 5))
            scored_meanwhile = len(meanwhile & scored)
            time.sleep(max(0.0, back - time.monotonic()))
        resumed = time.monotonic()
        request = f"after-outage-{int(time.time())}"
        c.kubectl("annotate", "-n", NS, "modelserving/wine", f"{naming.PROMOTE_ANNOTATION}={request}", "--overwrite")
        c.until(lambda: (json.loads(c.kubectl("get", "-n", NS, "modelserving/wine", "-o", "json"))["status"]
                         .get("controls") or {}).get("promote") == request, 300, "a control request answered", every=0.5)
        answered = time.monotonic() - resumed
        time.sleep(3)
    sent = set(producer.sent)
    lost = sent - scored_keys(c, topics["outputTopic"], sent)
    operator_restarts = sum(restarts(c, SYSTEM, f"app.kubernetes.io/instance={RELEASE}").values()) \
        - sum(operator_before.values())
    print(f"API server stopped {OUTAGE} s: of {len(meanwhile)} records sent in its first half, {scored_meanwhile}"
          f" scored before it was back; {len(sent)} sent in all, {len(lost)} lost; a control request answered"
          f" {answered:.1f} s after it was back; operator container restarts: {operator_restarts}")
    assert scored_meanwhile == len(meanwhile), "the job stopped scoring without the API server"
    assert not lost, f"{len(lost)} records lost, e.g. {sorted(lost)[:5]}"
    assert restarts(c, NS, job) == pods_before, "a job pod restarted or was replaced"


# A client pod's connections to the driver's two ports, after kube-router has had a few seconds
# to add the new pod to its sets (a pod it does not know yet is refused everywhere).
PROBE = """
import socket, sys, time
time.sleep(8)
for target in sys.argv[1:]:
    host, port = target.split(":")
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        print(target, "reached")
    except OSError:
        print(target, "refused")
"""


def network_policy_refusals(c: Cluster, driver: str) -> None:
    """What the job's NetworkPolicy refuses, on the real node's enforcer: a pod in another namespace
    (wearing the operator's and Prometheus's labels) reaches neither port; Prometheus in the
    monitoring namespace reaches the read-only port and not the control port. (The operator reaching
    the control port is the rest of the test: status, scaling, the canary.)"""
    ip = json.loads(c.kubectl("get", "pod", "-n", NS, driver, "-o", "json"))["status"]["podIP"]
    targets = [f"{ip}:{naming.HTTP_PORT}", f"{ip}:{naming.METRICS_PORT}"]
    image = f"localhost/{images.IMAGES['operator'].name}:{images.VERSION}"
    clients = {"monitoring": {"app.kubernetes.io/name": "prometheus"},
               "tenant-b": {"app.kubernetes.io/name": "prometheus", **naming.OPERATOR_POD_LABELS}}
    for namespace, labels in clients.items():
        c.kubectl("create", "namespace", namespace)
        c.kubectl("apply", "-f", "-", input=yaml.safe_dump({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": namespace, "labels": labels},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": False,
                     "containers": [{"name": "probe", "image": image, "imagePullPolicy": "Never",
                                     "command": ["python", "-c", PROBE, *targets]}]}}))
    try:
        seen = {ns: dict(line.split() for line in c.until(
            lambda: (lambda out: out if out.count("\n") == len(targets) else None)(
                c.kubectl("logs", "-n", ns, "probe", check=False)), 120, f"{ns}'s probe", every=1).splitlines())
            for ns in clients}
    finally:
        for namespace in clients:
            c.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    print(f"NetworkPolicy on the real node: {seen}")
    assert seen["monitoring"] == {targets[0]: "refused", targets[1]: "reached"}, seen
    assert seen["tenant-b"] == {targets[0]: "refused", targets[1]: "refused"}, seen


@pytest.mark.timeout(2400)
def test_a_pmml_modelserving_on_a_real_node_from_helm_install_to_uninstall(cluster):
    c = cluster
    rows = feed.wine_rows()
    topics = topics_and_operator(c, "wine", 2)
    (operator_pod,) = c.pods(SYSTEM, f"app.kubernetes.io/instance={RELEASE}")
    assert operator_pod["spec"]["serviceAccountName"].startswith(RELEASE)
    assert operator_pod["spec"]["nodeName"] == real_node.NODE_NAME
    assert operator_pod["metadata"]["labels"]["app.kubernetes.io/name"] == NAME_OVERRIDE
    assert operator_pod["status"]["containerStatuses"][0]["state"].get("running")

    tree = data_uri(models.tree_pmml(rows), "application/xml")
    ms = modelserving("wine", f"localhost/{images.IMAGES['runtime-pmml'].name}:{images.VERSION}",
                      {"name": "wine-tree", "version": "1", "format": "pmml", "uri": tree}, topics, c.broker.bootstrap)
    try:
        with c.step("kubectl apply -> Ready (driver and executor containers)"):
            c.kubectl("apply", "-f", "-", input=yaml.safe_dump(ms))
            wait_ready(c, "wine")
        driver = c.until(lambda: c.running(NS, "scorestream.dev/modelserving=wine,app.kubernetes.io/component=driver"),
                         300, "the driver pod running")
        c.until(lambda: len(c.running(NS, "scorestream.dev/modelserving=wine,app.kubernetes.io/component=executor")) == 1,
                300, "one executor pod running")

        with c.step("200 records scored onto the output topic"):
            feed.produce(c.broker.bootstrap, topics["dataTopic"], feed.wine_records(rows[:200]))
            first = {f"wine-{i}" for i in range(200)}
            scored = scored_keys(c, topics["outputTopic"], first)
            assert scored >= first, f"{len(first & scored)} of 200 scored\n{c.diagnose()}"

        with c.step("NetworkPolicy: another namespace refused, monitoring on the read-only port only"):
            network_policy_refusals(c, driver[0])

        logs = c.kubectl("logs", "-n", NS, driver[0], "-c", "driver", "--tail=200")
        assert logs.strip(), "kubectl logs of the driver is empty"

        with c.step("kubectl scale 1 -> 2 executors -> 1"):
            executors = "scorestream.dev/modelserving=wine,app.kubernetes.io/component=executor"
            c.kubectl("scale", "-n", NS, "modelserving/wine", "--replicas=2")
            c.until(lambda: len(c.running(NS, executors)) == 2, 300, "two executor pods running")
            c.kubectl("scale", "-n", NS, "modelserving/wine", "--replicas=1")
            c.until(lambda: len(c.running(NS, executors)) == 1, 300, "one executor pod running again")

        with c.step("canary rollout, the operator killed mid-analysis, promoted"), \
                Producer(c.broker.bootstrap, topics["dataTopic"], "canary", rate=200):
            linear = data_uri(models.linear_pmml(rows), "application/xml")
            c.kubectl("patch", "-n", NS, "modelserving/wine", "--type=merge", "-p", json.dumps({"spec": {
                "model": {"name": "wine-linear", "version": "2", "format": "pmml", "uri": linear},
                "rollout": {"strategy": "Canary", "canary": {"percent": 50, "minRecords": 200, "promoteAfter": "20s",
                                                              "maxErrorRate": 0.01, "maxLatencyRatio": 100}}}}))

            def model_status() -> dict:
                return json.loads(c.kubectl("get", "-n", NS, "modelserving/wine", "-o", "json"))["status"].get("model", {})

            c.until(lambda: (model_status().get("rollout") or {}).get("phase") == "Analyzing", 300, "the canary analyzed")
            published = model_status()["published"]
            # The operator's pod killed (no grace) while the canary is on trial: the next one, once it
            # holds the Lease, takes the analysis up from the job and status, and publishes nothing again.
            (operator_pod,) = c.pods(SYSTEM, f"app.kubernetes.io/instance={RELEASE}")
            c.kubectl("delete", "pod", "-n", SYSTEM, operator_pod["metadata"]["name"], "--grace-period=0", "--force")
            c.until(lambda: (model_status().get("rollout") or {}).get("phase") == "Promoted", 600, "the canary promoted")
            status = model_status()
            assert status["current"]["version"] == "2", status
            # The candidate's message once, and the promotion's (the model as the serving one) once.
            sent = collections.Counter(dict(m.headers() or []).get(ROLLOUT_HEADER, b"").decode()
                                       for m in read_topic(c.broker.bootstrap, naming.namespace_models_topic(NS), idle=2.0))
            assert sent[published] == 1 and sent[status["published"]] == 1, (published, status["published"], sent)
            (successor,) = c.pods(SYSTEM, f"app.kubernetes.io/instance={RELEASE}")
            assert successor["metadata"]["uid"] != operator_pod["metadata"]["uid"]

        with c.step("node restarted mid-stream (kubelet, containerd, every container) -> Ready again"):
            # Every container killed at once, driver and executor mid-batch, as a reboot does; the
            # kubelet makes them anew and the job goes on from its checkpoint.
            driver_pod = "app.kubernetes.io/component=driver,scorestream.dev/modelserving=wine"

            def driver_run() -> tuple[str, int]:  # the pod and its container's restarts
                (pod,) = c.pods(NS, driver_pod)
                return pod["metadata"]["uid"], pod["status"]["containerStatuses"][0]["restartCount"]

            before = driver_run()
            with Producer(c.broker.bootstrap, topics["dataTopic"], "restart", rate=100) as producer:
                time.sleep(5)
                c.node.restart()
                c.until(lambda: c.running(NS, driver_pod) and driver_run() != before, 300, "the driver running again",
                        every=3)
                c.until(lambda: len(c.running(NS, executors)) == 1, 300, "an executor running again", every=3)
                wait_ready(c, "wine")
                time.sleep(5)
            sent = set(producer.sent)
            scored = scored_keys(c, topics["outputTopic"], sent)
            lost = sent - scored
            print(f"node restarted mid-stream: {len(sent)} records sent, {len(lost)} lost")
            assert not lost, f"{len(lost)} records lost, e.g. {sorted(lost)[:5]}"

        with c.step(f"API server stopped {OUTAGE} s under the stream"):
            api_server_outage(c, topics)

        with c.step("helm upgrade (operator rolls; the job keeps serving)"):
            install_operator(c, "--set", "operator.observeInterval=5")
            wait_ready(c, "wine", "300s")

        with c.step("kubectl delete ms, helm uninstall: nothing left running"):
            c.kubectl("delete", "-n", NS, "modelserving/wine", "--wait=true", "--timeout=300s", timeout=400)
            c.helm("uninstall", RELEASE, "-n", SYSTEM, "--wait", "--timeout", "5m")
            c.until(lambda: not c.pods(NS) and not c.pods(SYSTEM), 300, "every pod gone")
    finally:
        remove(c, "wine")
