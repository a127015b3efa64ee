"""The operator as users run it, against the tests' real control plane (tests/harness/cluster.py):
the chart installed by helm, the operator a process of its own with the token of the chart's
ServiceAccount (a verb the chart does not grant fails), each test in a namespace of its own.

What tests do with it: apply resources as kubectl would, read objects, wait for conditions, and
play the driver pod's life where kwok can't (it runs no container: a crash loop is written
into the pod's status)."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import pytest_asyncio
import requests
import yaml

from scorestream import naming
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.config import JobConfig
from scorestream.operator.settings import OperatorConfig
from scorestream.tools.local.broker import free_port
from scorestream.tools.local.process import JobProcess

from harness.cluster import ApiError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((REPO / "examples" / "wine-pmml.yaml").read_text())
MS = f"{naming.GROUP}/{s.VERSION}/{s.PLURAL}"
CLUSTER = None  # the namespace of cluster-scoped objects
_OWN = object()


class Api:
    """One test's view of the cluster: the admin's requests, in a namespace made for the test."""

    def __init__(self, cluster, installation, ns: str):
        self.cluster, self.installation, self.ns = cluster, installation, ns

    def request(self, method: str, path: str, body=None, content_type: str = "application/json", ok_missing=False):
        return self.cluster.request(method, path, body, content_type, ok_missing=ok_missing)

    def path(self, key: str, name: str | None = None, namespace=_OWN) -> str:
        ns = self.ns if namespace is _OWN else namespace
        group_version, plural = key.rsplit("/", 1)
        base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        base += f"/namespaces/{ns}/{plural}" if ns else f"/{plural}"
        return f"{base}/{name}" if name else base

    def patch(self, key: str, name: str, body: dict, namespace=_OWN, subresource: str = ""):
        return self.request("PATCH", self.path(key, name, namespace) + (f"/{subresource}" if subresource else ""),
                            body, content_type="application/merge-patch+json")

    def delete(self, key: str, name: str, namespace=_OWN):
        return self.request("DELETE", self.path(key, name, namespace), ok_missing=True)

    def create(self, key: str, body: dict, namespace=_OWN):
        return self.request("POST", self.path(key, None, namespace), body)

    def events(self, reason: str) -> list[dict]:
        return [e for e in self.request("GET", self.path("v1/events"))["items"] if e.get("reason") == reason]

    def namespace(self, name: str | None = None) -> str:
        """A namespace of the test's own (deleted with the test's)."""
        name = name or f"t-{uuid.uuid4().hex[:10]}"
        self.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        return name


@pytest.fixture
def api(kube, installed):
    made = Api(kube, installed, "")
    made.ns = made.namespace()
    made.extra = []
    yield made
    # The test's operators are gone: without their finalizer's handler a ModelServing (and so its
    # namespace) would never go. Not waited for: the namespace controller collects the rest.
    for ns in [made.ns, *made.extra]:
        for ms in made.request("GET", made.path(MS, namespace=ns), ok_missing=True).get("items", []):
            if ms["metadata"].get("finalizers"):
                made.request("PATCH", made.path(MS, ms["metadata"]["name"], namespace=ns),
                             {"metadata": {"finalizers": None}}, content_type="application/merge-patch+json",
                             ok_missing=True)
        made.delete("v1/namespaces", ns, namespace=CLUSTER)


class Operator:
    """The operator as a process of its own (`scorestream operator`), with the credentials of the
    chart's ServiceAccount; its log is kept for the test to read."""

    def __init__(self, api: Api, config: OperatorConfig, kubeconfig: Path | None = None):
        self.api, self.config = api, config
        self.kubeconfig = kubeconfig or api.installation.kubeconfig
        self.proc: subprocess.Popen | None = None
        self.logfile: Path | None = None

    async def start(self) -> None:
        workdir = Path(os.environ.get("PYTEST_TMPDIR", "/tmp")) / f"operator-{uuid.uuid4().hex[:8]}"
        workdir.mkdir(parents=True)
        port = free_port()
        # A port of this process's own: several operators run at once on one host here.
        config = self.config.model_copy(update={"health_port": port})
        (workdir / "operator.yaml").write_text(yaml.safe_dump(config.model_dump(by_alias=True, exclude_none=True)))
        self.logfile = workdir / "operator.log"
        with open(self.logfile, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "import sys; from scorestream.tools.cli import main; sys.exit(main())",
                 "operator", "--config", str(workdir / "operator.yaml"), "--verbose"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                # TMPDIR: the Kubernetes client writes a kubeconfig's CA to a temporary file it removes
                # only at a clean exit, and operators here are killed.
                env={**os.environ, "KUBECONFIG": str(self.kubeconfig), "TMPDIR": str(workdir)})

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"the operator exited ({self.proc.returncode}):\n{self.log[-3000:]}")
            try:
                return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        await until(healthy, timeout=60, what="the operator's /healthz")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def log(self) -> str:
        return self.logfile.read_text(errors="replace") if self.logfile else ""

    async def kill(self) -> None:
        """Not a graceful stop: SIGKILL wherever it is."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        await asyncio.to_thread(self.proc.wait, 10)

    async def stop(self) -> None:
        if not self.running:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            await asyncio.to_thread(self.proc.wait, 30)
        except subprocess.TimeoutExpired:
            await self.kill()
            raise AssertionError("the operator did not stop within 30 s of SIGTERM")


def operator_config(api: Api | None = None, **config) -> OperatorConfig:
    """The operator watches the test's namespace (given `api`), unless told otherwise: namespaces
    of earlier tests may still be going, with resources an all-namespaces operator would serve."""
    if "namespaces" not in config and "allNamespaces" not in config:
        config.update(namespaces=[api.ns]) if api is not None else config.update(allNamespaces=True)
    return OperatorConfig(**config)


@pytest_asyncio.fixture
async def operator(api, job, broker):
    """An operator of the test's namespace reading `job` (the module's stand-in for the job)."""
    op = Operator(api, operator_config(api, observeInterval=0.5, endpointTemplate=job.url))
    await op.start()
    yield op
    await op.stop()


class Operated:
    """An operator that reads the job's endpoint, and the job it runs as a local process standing
    in for the driver pod (kwok runs no container); both stopped at the end."""

    def __init__(self, api, **config):
        self.api, self.port, self.job = api, free_port(), None
        self.op = Operator(api, operator_config(api, endpointTemplate=f"http://127.0.0.1:{self.port}", **config))

    async def __aenter__(self) -> "Operated":
        await self.op.start()
        return self

    async def __aexit__(self, *exc) -> None:
        if self.job is not None:
            self.job.kill()
        await self.op.stop()

    async def restart_operator(self) -> None:
        """Kill the operator wherever it is (not a graceful stop) and start a new one."""
        await self.op.kill()
        self.op = Operator(self.api, self.op.config)
        await self.op.start()

    async def start_job(self, workdir: Path, master: str = "local[2]", conf: dict | None = None,
                        **overrides) -> JobProcess:
        """Run the ConfigMap the operator wrote, on `master` instead of the cluster's, once the
        driver pod the StatefulSet controller made is scheduled and running."""
        await driver_pod(self.api)
        raw = json.loads(obj(self.api, "v1/configmaps", "wine-job")["data"]["job.json"])
        raw["spark"].update(master=master, conf=conf or {})
        for section, values in overrides.items():
            raw[section].update(values)
        # The control token as the driver pod mounts it: the Secret the operator made, in a file.
        workdir.mkdir(parents=True, exist_ok=True)
        token_file = workdir / "control-token"
        secret = obj(self.api, "v1/secrets", "wine-control")
        token_file.write_bytes(base64.b64decode(secret["data"]["token"]))
        raw.update(http={"host": "127.0.0.1", "port": self.port, "controlTokenFile": str(token_file)},
                   checkpointLocation=str(workdir / "checkpoint"), workDir=str(workdir / "work"))
        self.job = JobProcess(JobConfig.model_validate(raw), workdir, "job.log").start()
        await asyncio.to_thread(self.job.wait_ready, 240)
        return self.job


@pytest.fixture
def topics(broker):
    suffix = uuid.uuid4().hex[:8]
    names = {"dataTopic": f"records-{suffix}", "outputTopic": f"predictions-{suffix}",
             "deadLetterTopic": f"dlq-{suffix}", "modelsTopic": f"models-{suffix}"}
    return names


def resource(topics, broker, name="wine", namespace=None, **spec):
    body = copy.deepcopy(EXAMPLE)
    body["metadata"] = {"name": name, **({"namespace": namespace} if namespace else {})}
    body["spec"]["kafka"].update(topics, bootstrapServers=broker.bootstrap)
    body["spec"]["kafka"].pop("secretRef")
    body["spec"].update(spec)
    return body


async def apply(api: Api, body: dict) -> dict:
    """kubectl apply's effect: create, or merge-patch the spec of what exists (the real server admits it)."""
    ns = body["metadata"].get("namespace") or api.ns
    body = {**body, "metadata": {**body["metadata"], "namespace": ns}}
    name = body["metadata"]["name"]
    if obj(api, MS, name, namespace=ns) is None:
        return api.create(MS, body, namespace=ns)
    return api.patch(MS, name, {"spec": body["spec"]}, namespace=ns)


def obj(api: Api, key: str, name: str, namespace=_OWN) -> dict | None:
    found = api.request("GET", api.path(key, name, namespace), ok_missing=True)
    return None if found is None or found.get("metadata", {}).get("deletionTimestamp") else found


async def until(predicate, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def condition(api, name, ctype):
    ms = obj(api, MS, name) or {}
    return next((c for c in (ms.get("status") or {}).get("conditions", []) if c["type"] == ctype), {})


def _current_driver_pod(api, name: str) -> dict | None:
    """The driver's pod made from the StatefulSet's current revision and marked running by kwok."""
    sts, pod = obj(api, "apps/v1/statefulsets", f"{name}-driver"), obj(api, "v1/pods", f"{name}-driver-0")
    if not sts or not pod:
        return None
    revision = (sts.get("status") or {}).get("updateRevision")
    if not revision or pod["metadata"].get("labels", {}).get("controller-revision-hash") != revision:
        return None
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return pod if statuses and all(c.get("ready") for c in statuses) else None


async def driver_pod(api, name="wine", ready=True, waiting=None, restarts=0, timeout=60.0) -> dict:
    """The driver pod of the current template, once kwok runs it; where the test says it is not
    ready (or crash-looping), that is written into its status as a kubelet would: kwok marks a pod
    ready once, when it first runs it, and leaves its status alone after."""
    try:
        pod = await until(lambda: _current_driver_pod(api, name), timeout=timeout, what=f"{name}'s driver pod running")
    except AssertionError as e:
        sts = obj(api, "apps/v1/statefulsets", f"{name}-driver") or {}
        found = obj(api, "v1/pods", f"{name}-driver-0") or {}
        said = [f"{e['reason']}: {e.get('message', '')}" for e in api.request("GET", api.path("v1/events"))["items"]
                if e.get("type") == "Warning"]
        claims = {c["metadata"]["name"]: (c.get("status") or {}).get("phase")
                  for c in api.request("GET", api.path("v1/persistentvolumeclaims"))["items"]}
        raise AssertionError(f"{e}; StatefulSet status {sts.get('status')}, pod status {found.get('status')}, "
                             f"claims {claims}, warnings {said[-5:]}") from None
    if ready:
        return pod
    status = copy.deepcopy(pod["status"])
    for c in status["containerStatuses"]:
        c.update(ready=False, started=False, restartCount=restarts)
        if waiting:
            c["state"] = {"waiting": {"reason": waiting}}
            c["lastState"] = {"terminated": {"reason": "Error", "message": "Exception: bootstrap failed", "exitCode": 1}}
    for cond in status.get("conditions", []):
        if cond["type"] in ("Ready", "ContainersReady"):
            cond["status"] = "False"
    return api.patch("v1/pods", pod["metadata"]["name"], {"status": status}, subresource="status")


def events(api, reason):
    return api.events(reason)


__all__ = ["ApiError", "Api", "Operator", "Operated", "MS", "CLUSTER", "api", "apply", "condition", "driver_pod",
           "events", "obj", "operator_config", "resource", "topics", "until"]


class Installation:
    """A release of charts/scorestream installed by helm, and a kubeconfig with its ServiceAccount's token."""

    def __init__(self, kube, release: str, namespace: str, workdir: Path):
        self.kube, self.release, self.namespace = kube, release, namespace
        accounts = kube.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts"
                                       f"?labelSelector=app.kubernetes.io/instance={release}")["items"]
        (account,) = accounts
        self.service_account = account["metadata"]["name"]
        self.subject = f"system:serviceaccount:{namespace}:{self.service_account}"
        from harness.cluster import kubeconfig

        self.kubeconfig = workdir / f"{release}.kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump(kubeconfig(
            kube.server, kube.dir / "ca.crt", token=kube.token(namespace, self.service_account, seconds=86400))))


def tool(name: str, kube, *args: str, check: bool = True, timeout: float = 360,
         input: str | None = None) -> subprocess.CompletedProcess:
    """helm or kubectl as a user runs them, with the cluster admin's kubeconfig; those of the run's
    end of the compatibility matrix (harness/matrix.py)."""
    from harness import helm as tools
    from harness.matrix import END

    res = subprocess.run([str(tools.ensure(name, END.tools)), *args], capture_output=True, text=True, timeout=timeout,
                         input=input, env={**os.environ, "KUBECONFIG": str(kube.admin_config)})
    if check and res.returncode != 0:
        raise AssertionError(f"{name} {' '.join(args)} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return res


def helm_install(kube, workdir: Path, release: str, namespace: str, *flags: str) -> Installation:
    # Any image, unless the test says otherwise: the tests' resources run stand-in images, and the
    # chart's default allow-list (the project's own images) would refuse them at admission.
    tool("helm", kube, "install", release, str(REPO / "charts" / "scorestream"), "-n", namespace,
         "--create-namespace", "--wait", "--timeout", "5m", "--set-json", "allowedImages=[]", *flags)
    return Installation(kube, release, namespace, workdir)
