"""The upgrade from the last release (issue 50, item 6) on the real node, as docs/operations/upgrade.md
tells users to do it, under a stream.

The last release's chart and images, built from the commit releases/releases.toml records
(hack/images.py `release`), are installed by helm; two ModelServings serve a stream: `wine` runs
the chart's `runtimeImage`, `pinned` names its image in `spec.spark.image`. Then the documented
procedure: the new CRD applied, the old operator stopped, `pinned` moved to the new runtime image,
`helm upgrade` to this tree's chart. Shown: both resources Ready again on the new image, each
driver rolled at most once, 0 records lost (a consumer over the output and dead-letter topics
against the keys sent), no model published again (the new operator read the old status), and the
status read by the old operator too: `helm rollback`, same procedure backwards, the old operator
takes the resources over from the status the new one wrote. Printed: the counts, the rolls, how
long each job had no ready driver and the longest pause in its predictions, and each step's time.

`make test-upgrade`, outside `make test`: two releases' images (the 0.1.0 runtime holds
TensorFlow: gigabytes to build and import) and four driver rolls of two Spark jobs on the node.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import tomllib
from dataclasses import dataclass, field

import pytest
import yaml

import images  # hack/images.py
from e2e.test_cluster import Cluster, Producer, data_uri, modelserving, running_cluster
from harness import node as real_node
from scorestream.tools.demo import feed, models
from scorestream.tools.local.broker import create_topics
from scorestream.tools.local.process import read_topic

WHY = real_node.missing()
pytestmark = [pytest.mark.node, pytest.mark.skipif(WHY is not None, reason=f"the real node's tests are skipped: {WHY}")]

LAST = tomllib.loads(images.RELEASES.read_text())["release"][-1]["version"]
NS = "ml"
SYSTEM = "scorestream"  # the release's namespace and name, as the docs write them
RELEASE = "scorestream"
OPERATOR = f"app.kubernetes.io/instance={RELEASE}"
DRIVERS = "app.kubernetes.io/component=driver"
OLD_RUNTIME = images.release_ref("runtime", LAST)  # the last release had one runtime image
NEW_RUNTIME = f"localhost/{images.IMAGES['runtime-pmml'].name}:{images.VERSION}"
# wine leaves spec.spark.image to the chart's runtimeImage; pinned names its own.
PINNED = "pinned"
RESOURCES = ("wine", PINNED)
MODELS_TOPIC = "scorestream-models"  # what the last release's CRD defaulted spec.kafka.modelsTopic to
RATE = 20  # records a second onto each data topic
MALFORMED_EVERY = 20  # every 20th record is not JSON: a dead letter


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = time.monotonic()
    dist = tmp_path_factory.mktemp("dist")
    # This tree's chart and the images the two resources run after the upgrade; the last
    # release's images and chart from its commit (both cached by their inputs).
    new = images.dist(dist, archives=images.build(["operator", "runtime-pmml"]))
    old = images.build_release(LAST)
    old_chart = dist / f"scorestream-{LAST}.tgz"
    (chart,) = (f for f in new if f.name.endswith(".tgz"))
    # The jobs' NetworkPolicies enforced: the upgrade changes whom they admit.
    with running_cluster([*old.values(), *(f for f in new if f.name.endswith(".oci.tar"))], chart, started) as c:
        c.helm("package", str(images.release_tree(LAST)[0] / "charts" / "scorestream"), "-d", str(dist))
        yield c, old_chart


class Stream:
    """A stream onto each resource's data topic until stopped (e2e's Producer, one a resource), every
    MALFORMED_EVERY-th record unparsable (the job dead-letters it): what was sent is each resource's
    `sent` keys, which start with the phase's name."""

    def __init__(self, bootstrap: str, phase: str):
        self.phase = phase
        self.producers = {name: Producer(bootstrap, topics(name)["dataTopic"], f"{phase}-{name}", rate=RATE,
                                         malformed_every=MALFORMED_EVERY) for name in RESOURCES}

    @property
    def sent(self) -> dict[str, list[str]]:
        return {name: p.sent for name, p in self.producers.items()}

    def __enter__(self) -> "Stream":
        for p in self.producers.values():
            p.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for p in self.producers.values():
            p.__exit__(*exc)


@dataclass
class Drivers:
    """Each resource's driver pods, polled every second: a new pod is a roll; also their
    containers' restarts, the image each ran, and how long no driver of a resource was ready."""

    c: Cluster
    pods: dict[str, dict[str, str]] = field(default_factory=lambda: {n: {} for n in RESOURCES})  # uid -> image
    restarts: dict[str, int] = field(default_factory=dict)  # uid -> restarts
    unready: dict[str, float] = field(default_factory=lambda: {n: 0.0 for n in RESOURCES})  # seconds
    ready_image: dict[str, str | None] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._poll(None)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(1.0):
            now = time.monotonic()
            self._poll(now - last)
            last = now

    def _poll(self, elapsed: float | None) -> None:
        try:
            res = self.c.run("kubectl", "get", "pods", "-n", NS, "-l", DRIVERS, "-o", "json", check=False, timeout=30)
        except subprocess.TimeoutExpired:
            return
        if res.returncode != 0:
            return
        ready: dict[str, str] = {}
        for pod in json.loads(res.stdout)["items"]:
            name = pod["metadata"]["labels"].get("scorestream.dev/modelserving")
            if name not in self.pods:
                continue
            uid, statuses = pod["metadata"]["uid"], pod["status"].get("containerStatuses", [])
            self.pods[name].setdefault(uid, pod["spec"]["containers"][0]["image"])
            self.restarts[uid] = sum(s.get("restartCount", 0) for s in statuses)
            if statuses and all(s.get("ready") for s in statuses) and not pod["metadata"].get("deletionTimestamp"):
                ready[name] = self.pods[name][uid]
        self.ready_image = {n: ready.get(n) for n in RESOURCES}
        for n in RESOURCES:
            if elapsed is not None and n not in ready:
                self.unready[n] += elapsed

    def rolls(self) -> dict[str, int]:
        return {n: len(uids) - 1 for n, uids in self.pods.items()}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def topics(name: str) -> dict[str, str]:
    return {"dataTopic": f"{name}-records", "outputTopic": f"{name}-predictions", "deadLetterTopic": f"{name}-dlq"}


def resource(c: Cluster, name: str, image: str | None) -> dict:
    tree = data_uri(models.tree_pmml(feed.wine_rows()), "application/xml")
    ms = modelserving(name, image or "", {"name": "wine-tree", "version": "1", "format": "pmml", "uri": tree},
                      topics(name), c.broker.bootstrap)
    ms["spec"]["spark"].update(driver={"cpu": "500m", "memory": "1536Mi"}, executor={"cpu": "400m", "memory": "1Gi"})
    if image is None:
        del ms["spec"]["spark"]["image"]
    return ms


def status(c: Cluster, name: str) -> dict:
    return json.loads(c.kubectl("get", "-n", NS, f"modelserving/{name}", "-o", "json")).get("status") or {}


def ready(st: dict) -> bool:
    return any(k["type"] == "Ready" and k["status"] == "True" for k in st.get("conditions", []))


def served(st: dict) -> tuple[str, str] | None:
    current = (st.get("model") or {}).get("current")
    return (current["name"], current["version"]) if current else None


def show(c: Cluster, when: str) -> None:
    print(f"kubectl get ms ({when}):\n" + c.kubectl("get", "ms", "-n", NS).rstrip())


def serving_on(c: Cluster, drivers: Drivers, want: dict[str, str], timeout: float = 900) -> None:
    """Each resource Ready with a ready driver of the image it should now run."""
    c.until(lambda: all(drivers.ready_image.get(n) == image and ready(status(c, n)) for n, image in want.items()),
            timeout, f"the resources Ready on {want}", every=3)


def models_published(c: Cluster) -> int:
    return len(read_topic(c.broker.bootstrap, MODELS_TOPIC, idle=2.0))


def stop_operator(c: Cluster) -> None:
    """The documented step before a helm upgrade or rollback: no two operators of different
    versions act on one resource (each restores at once the job's objects the other renders).
    Deleted rather than scaled to 0: helm makes it again, and no replica count of kubectl's is
    left for helm's server-side apply to conflict with."""
    c.kubectl("delete", "-n", SYSTEM, f"deployment/{RELEASE}", "--cascade=foreground", "--timeout=180s", timeout=240)
    c.until(lambda: not c.pods(SYSTEM, OPERATOR), 180, "the operator's pod gone")


def counted(c: Cluster, stream: Stream) -> dict[str, dict]:
    """For each resource: the keys the stream sent, and what a consumer reads of them on the output
    and dead-letter topics (read until every key is there, or 5 minutes)."""
    def of_phase(topic: str) -> list:
        return [m for m in read_topic(c.broker.bootstrap, topic, idle=3, timeout=120)
                if m.key() and m.key().decode().startswith(f"{stream.phase}-")]

    out = {}
    for name in RESOURCES:
        sent = set(stream.sent[name])
        deadline = time.monotonic() + 300
        while True:
            scored, dead = of_phase(topics(name)["outputTopic"]), of_phase(topics(name)["deadLetterTopic"])
            seen = {m.key().decode() for m in scored + dead}
            if sent <= seen or time.monotonic() > deadline:
                break
            time.sleep(3)
        stamps = sorted(m.timestamp()[1] / 1000 for m in scored)
        out[name] = {"sent": len(sent), "scored": len(scored), "dead": len(dead), "lost": sorted(sent - seen),
                     "twice": len(scored) + len(dead) - len(seen),
                     "pause": max((b - a for a, b in zip(stamps, stamps[1:])), default=0.0)}
    return out


def report(phase: str, counts: dict[str, dict], drivers: Drivers, took: float) -> None:
    rolls = drivers.rolls()
    for name, n in counts.items():
        print(f"{phase}: {name}: {n['sent']} sent, {n['scored']} predictions + {n['dead']} dead letters, "
              f"{len(n['lost'])} lost, {n['twice']} read twice; driver rolled {rolls[name]}x, no ready driver "
              f"{drivers.unready[name]:.0f} s, longest pause in predictions {n['pause']:.1f} s")
    print(f"{phase}: {took:.0f} s from its first step to both resources Ready on the image they moved to")
    for name, n in counts.items():
        assert not n["lost"], f"{phase}: {name} lost {len(n['lost'])} records, e.g. {n['lost'][:5]}"
        assert n["dead"] > 0, f"{phase}: {name}: no dead letter of the malformed records"
        assert rolls[name] <= 1, f"{phase}: {name}'s driver rolled {rolls[name]} times: {drivers.pods[name]}"
    assert not any(drivers.restarts.values()), f"{phase}: a driver container restarted: {drivers.restarts}"


def upgrade(c: Cluster, chart: str, values: list[str], moved: dict[str, str], back: bool = False) -> None:
    """docs/operations/upgrade.md: the CRD of the version to come first (a rollback's too: the API
    server wrote the newer CRD's defaults into every resource, and an older operator refuses fields
    it does not know), the operator stopped, on a rollback the status's last stable spec cleared
    and the drivers' StatefulSets deleted with their pods orphaned, the resources that name a
    runtime image moved to the image of the version to come, then helm (upgrade, or rollback to
    the first revision)."""
    phase = "rollback" if back else "upgrade"
    with c.step(f"{phase}: helm show crds | kubectl apply --server-side"):
        crds = c.helm("show", "crds", chart)
        c.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=crds)
    with c.step(f"{phase}: the operator stopped"):
        stop_operator(c)
    if back:
        # The spec the newer operator last ran ready, kept whole (the CRD preserves its fields): an
        # older operator refuses the fields it does not know, and records it again from the spec.
        for name in RESOURCES:
            c.kubectl("patch", "-n", NS, f"modelserving/{name}", "--subresource=status", "--type=merge",
                      "-p", json.dumps({"status": {"lastStableSpec": None}}))
        # The drivers' StatefulSets, their pods left running: the older operator renders
        # podManagementPolicy otherwise, which no update may change, and makes them again.
        c.kubectl("delete", "statefulset", "-n", NS, "--cascade=orphan",
                  "-l", "app.kubernetes.io/component=driver,app.kubernetes.io/managed-by=scorestream-operator")
    for name, image in moved.items():
        c.kubectl("patch", "-n", NS, f"modelserving/{name}", "--type=merge",
                  "-p", json.dumps({"spec": {"spark": {"image": image}}}))
    with c.step(f"{phase}: helm {'rollback' if back else 'upgrade'} (the operator's pod Ready)"):
        if back:
            c.helm("rollback", RELEASE, "1", "-n", SYSTEM, "--wait", "--timeout", "5m")
        else:
            c.helm("upgrade", RELEASE, chart, "-n", SYSTEM, "--reset-then-reuse-values", *values,
                   "--wait", "--timeout", "5m")
        c.kubectl("rollout", "status", "-n", SYSTEM, f"deployment/{RELEASE}", "--timeout=300s")


def earlier_procedure(c: Cluster, chart: str) -> None:
    """What the docs' earlier procedure does on this cluster, server-side dry runs: printed, the
    reason for the steps the docs now have."""
    crds = c.helm("show", "crds", chart)
    plain = c.run("kubectl", "apply", "--server-side", "--dry-run=server", "-f", "-", input=crds, check=False)
    reuse = c.run("helm", "upgrade", RELEASE, chart, "-n", SYSTEM, "--reuse-values", "--dry-run=server", check=False)
    for what, res in (("kubectl apply --server-side (no --force-conflicts)", plain), ("helm upgrade --reuse-values", reuse)):
        said = (res.stderr or res.stdout).strip().splitlines()
        print(f"earlier procedure: {what}: exit {res.returncode}" + (f": {said[0][:300]}" if res.returncode else ""))


@pytest.mark.timeout(3600)
def test_an_upgrade_from_the_last_release_under_a_stream_loses_nothing_and_rolls_each_driver_once(cluster):
    c, old_chart = cluster
    for name in RESOURCES:
        create_topics(c.broker.bootstrap, {topics(name)["dataTopic"]: 2})
    with c.step(f"{LAST}: helm install (operator pod Ready)"):
        c.helm("install", RELEASE, str(old_chart), "-n", SYSTEM, "--create-namespace",
               "--set", f"image.repository=localhost/{images.IMAGES['operator'].name}", "--set", "image.pullPolicy=Never",
               "--set", f"runtimeImage={OLD_RUNTIME}", "--set", f"watch.namespaces={{{NS}}}",
               "--set", "watch.createNamespaces=true", "--set", "operator.observeInterval=3", "--wait", "--timeout", "5m")
    drivers = None
    try:
        with c.step(f"{LAST}: kubectl apply -> both Ready"):
            for name in RESOURCES:
                c.kubectl("apply", "-f", "-", input=yaml.safe_dump(resource(c, name, OLD_RUNTIME if name == PINNED else None)))
            drivers = Drivers(c)
            serving_on(c, drivers, {n: OLD_RUNTIME for n in RESOURCES})
        show(c, f"{LAST}'s operator")
        before = {n: status(c, n) for n in RESOURCES}
        published = models_published(c)
        with Stream(c.broker.bootstrap, "upgrade") as stream:
            time.sleep(15)
            drivers.stop()
            drivers = Drivers(c)
            earlier_procedure(c, str(c.chart))
            started = time.monotonic()
            upgrade(c, str(c.chart), ["--set", f"runtimeImage={NEW_RUNTIME}"], {PINNED: NEW_RUNTIME})
            with c.step("upgrade: the new operator -> both Ready on the new runtime image"):
                serving_on(c, drivers, {n: NEW_RUNTIME for n in RESOURCES})
            took = time.monotonic() - started
            time.sleep(15)
        show(c, f"{images.VERSION}'s operator")
        report("upgrade", counted(c, stream), drivers, took)
        after = {n: status(c, n) for n in RESOURCES}
        for name in RESOURCES:
            assert "reason" in after[name], after[name]  # a field the old operator does not write
            # The new operator took the model over from the old status: the same model, none sent again.
            assert served(after[name]) == served(before[name]) == ("wine-tree", "1"), (before[name], after[name])
            assert after[name]["observedGeneration"] == json.loads(c.kubectl(
                "get", "-n", NS, f"modelserving/{name}", "-o", "json"))["metadata"]["generation"], after[name]
        assert models_published(c) == published, "the new operator published a model again"

        # The status the new operator wrote, read by the old one: the documented rollback.
        drivers.stop()
        drivers = Drivers(c)
        with Stream(c.broker.bootstrap, "rollback") as stream:
            time.sleep(15)
            started = time.monotonic()
            upgrade(c, str(old_chart), [], {PINNED: OLD_RUNTIME}, back=True)
            with c.step(f"rollback: {LAST}'s operator -> both Ready on its runtime image"):
                serving_on(c, drivers, {n: OLD_RUNTIME for n in RESOURCES})
                # a status the old operator wrote: it drops the fields it does not know (status.reason)
                c.until(lambda: all("reason" not in status(c, n) for n in RESOURCES), 120, "the old operator's status")
            took = time.monotonic() - started
            time.sleep(15)
        show(c, f"{LAST}'s operator again")
        report("rollback", counted(c, stream), drivers, took)
        logs = c.kubectl("logs", "-n", SYSTEM, "-l", OPERATOR, "--tail=-1")
        assert "Traceback" not in logs and "validation error" not in logs, logs[-3000:]
    finally:
        if drivers is not None:
            drivers.stop()
        for name in RESOURCES:
            c.kubectl("delete", "-n", NS, f"modelserving/{name}", "--ignore-not-found", "--wait=true", "--timeout=300s",
                      check=False, timeout=400)
        c.helm("uninstall", RELEASE, "-n", SYSTEM, "--ignore-not-found", "--wait", "--timeout", "5m", check=False)
