"""A real Kubernetes control plane for the tests: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, built from source at pinned releases and run on loopback.

The Go modules under tests/cluster/ pin each component (go.mod + go.sum: a tampered or moved
module fails the build). `build()` compiles them once into a cache outside git keyed by those
pins and the Go toolchain; a warm cache builds nothing. `ControlPlane` starts them the way
controller-runtime's envtest starts its API server — secure port, a CA of its own, service-account
signing keys, RBAC authorization — plus the controllers (StatefulSets, garbage collection,
namespaces) and kwok, which plays the kubelet of fake nodes: pods are scheduled onto them and
marked Running and Ready, and no container runs.

The control plane is built at two releases: the newest (KUBE_VERSION, tests/cluster/kube/), which
every test runs on, and the oldest Kubernetes the chart admits (OLDEST_KUBE_VERSION,
tests/cluster/kube-1.30/: its API server, controller manager and scheduler; etcd and kwok are
shared), which `make test-compat` runs a few files on (tests/harness/matrix.py).

`make setup` runs this file as a script to build (`--oldest`: the oldest's, as `make test-compat`
does); the tests call `ControlPlane().start()` (`ControlPlane(version=OLDEST_KUBE_VERSION)`).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import requests
import yaml

SOURCES = Path(__file__).resolve().parents[1] / "cluster"
KUBE_VERSION = "v1.34.4"
# The oldest Kubernetes the chart admits (Chart.yaml kubeVersion), built by a module of its own: the
# compatibility tier (`make test-compat`, tests/harness/matrix.py) runs the API-level user paths on it.
OLDEST_KUBE_VERSION = "v1.30.14"
# Each version's module: its API server, controller manager and scheduler.
KUBE_MODULES = {KUBE_VERSION: "kube", OLDEST_KUBE_VERSION: "kube-1.30"}
CACHE = Path(os.environ.get("SCORESTREAM_CACHE", Path.home() / ".cache" / "scorestream")) / "cluster"
NODE = "kwok-node-0"
PROVISIONER = "scorestream.dev/test-hostpath"


class BuildFailed(RuntimeError):
    pass


def _kube_version(module: str) -> str:
    """The Kubernetes release a module is built for: its own for a control plane's, else the newest."""
    return next((v for v, m in KUBE_MODULES.items() if m == module), KUBE_VERSION)


def _ldflags(module: str = "kube") -> str:
    if module == "syft":  # syft names itself, with this version, in every SBOM it writes
        return f"-s -w -X main.version={_required_version('syft', 'github.com/anchore/syft')}"
    version = _kube_version(module)
    major, minor = version.lstrip("v").split(".")[:2]
    stamps = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamps += [f"-X {pkg}.gitVersion={version}", f"-X {pkg}.gitMajor={major}", f"-X {pkg}.gitMinor={minor}",
                   f"-X {pkg}.gitTreeState=clean", f"-X {pkg}.buildDate=1970-01-01T00:00:00Z"]
    return " ".join(["-s", "-w", *stamps])


# module directory → the packages it builds (binary name = last path element; "." = the module's name).
# The control plane is kube's first three, etcd and kwok; the real node (tests/harness/node.py) adds the
# kubelet, kube-proxy, CoreDNS, the pod sandbox's pause and kube-router's NetworkPolicy enforcer.
BUILDS = {
    "kube": ["k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager",
             "k8s.io/kubernetes/cmd/kube-scheduler", "k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kube-proxy"],
    "etcd": ["."],
    "kwok": ["sigs.k8s.io/kwok/cmd/kwok"],
    "coredns": ["github.com/coredns/coredns"],
    "pause": ["."],
    # The real node's NetworkPolicy enforcer: kube-router's firewall alone (tests/cluster/kube-router/go.mod says why).
    "kube-router": ["github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"],
    # Not the control plane's: Google Cloud Storage's JSON API for the object-store tests.
    "fakegcs": ["github.com/fsouza/fake-gcs-server"],
    # Not the tests' either: `make release` writes each image's bill of materials with it.
    "syft": ["github.com/anchore/syft/cmd/syft"],
    # The oldest admitted Kubernetes' control plane, for `make test-compat` (built at its first start).
    "kube-1.30": ["k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager",
                  "k8s.io/kubernetes/cmd/kube-scheduler"],
}
# What `make setup` builds: all but the release's tool and the compatibility tier's control plane,
# built at their first use.
SETUP_BUILDS = tuple(m for m in BUILDS if m not in ("syft", KUBE_MODULES[OLDEST_KUBE_VERSION]))


def _required_version(module: str, path: str) -> str:
    """The version of `path` that tests/cluster/<module>/go.mod pins."""
    for line in (SOURCES / module / "go.mod").read_text().splitlines():
        words = line.removeprefix("require ").split()
        if words[:1] == [path]:
            return words[1]
    raise BuildFailed(f"tests/cluster/{module}/go.mod requires no {path}")


def _binary_names(module: str) -> list[str]:
    return [module if p == "." else p.rsplit("/", 1)[-1] for p in BUILDS[module]]


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildFailed("go not found: the control plane is built from source (Go >= 1.24)")
    return go


def module_dir(module: str) -> Path:
    """The cache directory of one module's binaries, for its pins and this Go toolchain: a module
    that changes rebuilds alone."""
    digest = hashlib.sha256()
    digest.update(subprocess.run([_go(), "version"], capture_output=True, text=True, check=True).stdout.encode())
    digest.update(_ldflags(module).encode())
    for name in ("go.mod", "go.sum", "main.go"):
        p = SOURCES / module / name
        if p.is_file():
            digest.update(f"{name}\0".encode() + p.read_bytes())
    return CACHE / f"{module}-{_kube_version(module)}-{digest.hexdigest()[:12]}"


def build(modules=tuple(BUILDS), verbose: bool = False) -> dict[str, Path]:
    """Build what is missing; returns every binary of these modules by name."""
    env = {**os.environ, "GOFLAGS": "-mod=readonly -buildvcs=false", "CGO_ENABLED": "0"}
    binaries = {}
    for module in modules:
        packages, names, out = BUILDS[module], _binary_names(module), module_dir(module)
        binaries.update({n: out / n for n in names})
        if all((out / n).is_file() for n in names):
            continue
        CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"build-{module}-", dir=CACHE))
        try:
            started = time.monotonic()
            target = staging / module if packages == ["."] else staging
            res = subprocess.run([_go(), "build", "-trimpath", f"-ldflags={_ldflags(module)}", "-o", f"{target}{'' if packages == ['.'] else '/'}",
                                  *packages], cwd=SOURCES / module, env=env, capture_output=not verbose, text=True)
            if res.returncode != 0:
                raise BuildFailed(f"go build in tests/cluster/{module} failed:\n{(res.stderr or '')[-3000:]}")
            out.mkdir(parents=True, exist_ok=True)
            for n in names:
                (staging / n).replace(out / n)
            print(f"built {', '.join(names)} in {time.monotonic() - started:.0f} s", file=sys.stderr)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return binaries


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_pki(d: Path, address: str, service_ip: str) -> None:
    """A CA, the API server's serving certificate, an admin client certificate (system:masters)
    and the service-account signing key pair — what envtest generates for its API server."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=scorestream-test-ca", cwd=d)
    (d / "server.ext").write_text(f"subjectAltName=IP:127.0.0.1,IP:{address},DNS:localhost,DNS:kubernetes,"
                                  "DNS:kubernetes.default,DNS:kubernetes.default.svc,"
                                  f"DNS:kubernetes.default.svc.cluster.local,IP:{service_ip}\n"
                                  "extendedKeyUsage=serverAuth\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subject, ext in (("server", "/CN=kube-apiserver", "server.ext"),
                               ("admin", "/O=system:masters/CN=scorestream-test-admin", "client.ext")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", subject, cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "2", "-extfile", ext, cwd=d)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


def kubeconfig(server: str, ca: Path, *, cert: Path | None = None, key: Path | None = None,
               token: str | None = None, namespace: str = "default") -> dict:
    user = {"token": token} if token else {"client-certificate-data": base64.b64encode(cert.read_bytes()).decode(),
                                           "client-key-data": base64.b64encode(key.read_bytes()).decode()}
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server,
                                                  "certificate-authority-data": base64.b64encode(ca.read_bytes()).decode()}}],
        "users": [{"name": "test", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": namespace}}],
    }


class ApiError(AssertionError):
    def __init__(self, status: int, body: dict):
        super().__init__(f"{status}: {body.get('message', body)}")
        self.status, self.body = status, body


@dataclass
class ControlPlane:
    bins: dict[str, Path] | None = None
    dir: Path | None = None
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    server: str = ""
    # Where the API server listens. Loopback, unless a real node's pods must reach it (tests/harness/node.py):
    # then an address of the project's own test network, which is also the `kubernetes` Service's
    # endpoint.
    address: str = "127.0.0.1"
    service_cidr: str = "10.0.0.0/24"
    # kwok's fake node, where pods are marked running and no container runs; off beside a real node,
    # so the scheduler places every pod where it really runs.
    fake_node: bool = True
    # The Kubernetes release of the API server, controller manager and scheduler (KUBE_MODULES).
    version: str = KUBE_VERSION

    # ----------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 120) -> "ControlPlane":
        self.bins = self.bins or build((KUBE_MODULES[self.version], "etcd", "kwok"))
        self.dir = Path(tempfile.mkdtemp(prefix="scorestream-kube-"))
        from harness import orphans  # here: `make setup` runs this file as a script, to build

        orphans.mark_folder(self.dir)  # a killed run's goes at the next session's start
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        d = self.dir
        service_ip = _first_address(self.service_cidr)
        _make_pki(d, self.address, service_ip)
        etcd_port, etcd_peer, api_port = _free_port(), _free_port(), _free_port()
        self.server = f"https://{self.address}:{api_port}"
        self._spawn("etcd", "--name=test", f"--data-dir={d / 'etcd'}", "--unsafe-no-fsync",
                    f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                    f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                    f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                    f"--initial-cluster=test=http://127.0.0.1:{etcd_peer}", "--log-level=warn")
        # Every request's metadata, for the tests that check what a subject did (the RBAC audit).
        (d / "audit-policy.yaml").write_text(yaml.safe_dump({
            "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived", "ResponseStarted"],
            "rules": [{"level": "Metadata"}]}))
        self._spawn("kube-apiserver", f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                    f"--audit-policy-file={d / 'audit-policy.yaml'}", f"--audit-log-path={d / 'audit.log'}",
                    "--audit-log-format=json", "--audit-log-mode=blocking",
                    f"--bind-address={self.address}", f"--advertise-address={self.address}", f"--secure-port={api_port}",
                    f"--tls-cert-file={d / 'server.crt'}", f"--tls-private-key-file={d / 'server.key'}",
                    f"--client-ca-file={d / 'ca.crt'}", "--authorization-mode=RBAC",
                    f"--service-account-issuer={self.server}", f"--service-account-key-file={d / 'sa.pub'}",
                    f"--service-account-signing-key-file={d / 'sa.key'}", f"--service-cluster-ip-range={self.service_cidr}",
                    "--allow-privileged=true", "--enable-priority-and-fairness=false",
                    # the `kubernetes` Service's endpoint can't be a loopback address (envtest does the same)
                    *(["--endpoint-reconciler-type=none"] if self.address.startswith("127.") else []),
                    # `kubectl logs` and `exec` reach a real node's kubelet as the admin, at its address
                    *([] if self.fake_node else [
                        f"--kubelet-client-certificate={d / 'admin.crt'}", f"--kubelet-client-key={d / 'admin.key'}",
                        f"--kubelet-certificate-authority={d / 'ca.crt'}", "--kubelet-preferred-address-types=InternalIP"]),
                    # what a production cluster runs besides the defaults, so a chart that needs a
                    # permission there fails here too
                    "--enable-admission-plugins=OwnerReferencesPermissionEnforcement")
        self.admin_config = d / "admin.kubeconfig"
        self.admin_config.write_text(yaml.safe_dump(kubeconfig(self.server, d / "ca.crt", cert=d / "admin.crt",
                                                               key=d / "admin.key")))
        self.session = requests.Session()
        self.session.trust_env = False  # REQUESTS_CA_BUNDLE would replace our CA, and a proxy must not see loopback
        self.session.verify, self.session.cert = str(d / "ca.crt"), (str(d / "admin.crt"), str(d / "admin.key"))
        self._wait(self._ready, timeout, "kube-apiserver /readyz")
        cfg = str(self.admin_config)
        # The controllers and the scheduler talk to the API server as system:masters, as kwok does:
        # they are the cluster, not what is tested.
        self._spawn("kube-controller-manager", f"--kubeconfig={cfg}", "--leader-elect=false",
                    "--bind-address=127.0.0.1", "--secure-port=0", f"--root-ca-file={d / 'ca.crt'}",
                    f"--service-account-private-key-file={d / 'sa.key'}",
                    "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route",
                    # The node lifecycle controller takes the not-ready taint off the kwok node, but when
                    # kwok's lease renewal is late on a starved CPU it marks the node's pods NotReady (only
                    # their Ready condition), and kwok, unlike a kubelet, never reports them ready again: a
                    # CI run's operator pod stayed Ready=False with ContainersReady=True on a Ready node.
                    # No test fails a node, so the node is given time to renew however slow the machine.
                    "--node-monitor-grace-period=10m", "--node-startup-grace-period=10m",
                    "--concurrent-statefulset-syncs=5", "--concurrent-gc-syncs=10")
        self._spawn("kube-scheduler", f"--kubeconfig={cfg}", "--leader-elect=false",
                    "--bind-address=127.0.0.1", "--secure-port=0",
                    # A pod set aside as unschedulable waits for an event that may make it fit, or
                    # 5 minutes by default, past every test's timeout (see the StorageClass below).
                    # Here 10 s (the scheduler looks every 30).
                    "--pod-max-in-unschedulable-pods-duration=10s")
        if self.fake_node:
            self._spawn("kwok", f"--kubeconfig={cfg}", "--manage-all-nodes=false",
                        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                        "--cidr=10.0.1.0/24", "--node-ip=127.0.0.1", "--server-address=127.0.0.1:0")
            self.create(kwok_node())
            self._wait(lambda: node_ready(self.get(f"/api/v1/nodes/{NODE}")), timeout, f"node {NODE} Ready")
        self._wait(lambda: self.get("/api/v1/namespaces/default/serviceaccounts/default") is not None, timeout,
                   "the default ServiceAccount")
        # WaitForFirstConsumer, as kind's default class: the scheduler places the pod, then waits
        # for its volume before binding it. With Immediate it tried the pod before the claim was
        # bound and set it aside as unschedulable; in one CI run it did not try it again, and the
        # pod stayed Pending for the test's whole minute.
        self.request("POST", "/apis/storage.k8s.io/v1/storageclasses", {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer"})
        self._stopping = threading.Event()
        self._provisioner = threading.Thread(target=self._provision, name="test-provisioner", daemon=True)
        self._provisioner.start()

    def _provision(self) -> None:
        """The default StorageClass's provisioner, as a cluster has one (kind's local-path, a
        cloud's disks): a volume for each claim the PV controller hands to it, deleted once
        released. The volumes are host paths under the control plane's directory (a real node
        mounts them; kwok's pods mount nothing)."""
        while not self._stopping.wait(0.25):
            try:
                for claim in self.request("GET", "/api/v1/persistentvolumeclaims")["items"]:
                    meta = claim["metadata"]
                    if (meta.get("annotations", {}).get("volume.kubernetes.io/storage-provisioner") != PROVISIONER
                            or claim.get("spec", {}).get("volumeName")):
                        continue
                    name = f"pvc-{meta['uid']}"
                    if self.get(f"/api/v1/persistentvolumes/{name}") is None:
                        # A real node mounts it: the directory exists, writable by the pod's user.
                        path = self.dir / "volumes" / name
                        path.mkdir(parents=True, exist_ok=True)
                        path.chmod(0o777)
                        self.request("POST", "/api/v1/persistentvolumes", {
                            "apiVersion": "v1", "kind": "PersistentVolume",
                            "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
                            "spec": {"capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
                                     "accessModes": claim["spec"]["accessModes"],
                                     "persistentVolumeReclaimPolicy": "Delete",
                                     "storageClassName": claim["spec"].get("storageClassName", "standard"),
                                     "hostPath": {"path": str(path)},
                                     "claimRef": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}}})
                for volume in self.request("GET", "/api/v1/persistentvolumes")["items"]:
                    if (volume["metadata"].get("annotations", {}).get("pv.kubernetes.io/provisioned-by") == PROVISIONER
                            and volume.get("status", {}).get("phase") == "Released"):
                        self.request("DELETE", f"/api/v1/persistentvolumes/{volume['metadata']['name']}", ok_missing=True)
            except (requests.RequestException, ApiError):
                continue  # the API server is going away, or a claim went meanwhile: look again

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.dir / f"{name}.log", "wb")
        self.procs[name] = subprocess.Popen([str(self.bins[name]), *args], stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

    def _ready(self) -> bool:
        return self.session.get(f"{self.server}/readyz", timeout=5).status_code == 200

    def _wait(self, predicate, timeout: float, what: str) -> None:
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited ({p.returncode}) while waiting for {what}:\n" + self.log_tail(name))
            try:
                if predicate():
                    return
            except (requests.RequestException, ApiError) as e:
                last = e
            time.sleep(0.1)
        raise TimeoutError(f"timed out waiting for {what}" + (f" (last: {last})" if last else ""))

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.dir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    @contextmanager
    def frozen(self, name: str = "kube-apiserver"):
        """One of the control plane's processes stopped (SIGSTOP) for the block, and resumed
        however it ends: its clients' connections hang and time out, as through an outage of
        its host. A process resumed carries on where it was; nothing is left behind. The API
        server is waited for until it answers /readyz again: every client reconnects at once, and
        on a starved CI machine a request sent straight after the thaw met a TLS handshake timeout
        before the server had caught up."""
        proc = self.procs[name]
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            yield proc
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        if name == "kube-apiserver":
            self._wait(self._ready, 120, "kube-apiserver /readyz after it was resumed")

    def stop(self) -> None:
        if getattr(self, "_stopping", None) is not None:
            self._stopping.set()
            self._provisioner.join(5)
        # Clients first, the store last, as a control plane is shut down.
        for name in ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            stop_group(self.procs.pop(name, None))
        if self.dir is not None and not os.environ.get("SCORESTREAM_KEEP_CLUSTER"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ----------------------------------------------------------------- requests as the admin
    def request(self, method: str, path: str, body=None, content_type: str = "application/json",
                ok_missing: bool = False):
        for attempt in range(50):
            r = self.session.request(method, self.server + path, timeout=30,
                                     data=None if body is None else json.dumps(body),
                                     headers={"Content-Type": content_type, "Accept": "application/json"})
            # A CRD just installed (helm) serves 429 until its storage is ready: as kubectl, retry.
            if r.status_code != 429:
                break
            time.sleep(min(float(r.headers.get("Retry-After") or 0.2), 1.0))
        data = r.json() if r.content else {}
        if ok_missing and r.status_code == 404:
            return None
        if r.status_code >= 300:
            raise ApiError(r.status_code, data)
        return data

    def audit(self, username: str) -> list[dict]:
        """The audit log's events of one subject: verb, objectRef, responseStatus..."""
        events = []
        with open(self.dir / "audit.log") as log:
            for line in log:
                event = json.loads(line)
                if event.get("user", {}).get("username") == username:
                    events.append(event)
        return events

    def get(self, path: str):
        return self.request("GET", path, ok_missing=True)

    def create(self, obj: dict) -> dict:
        return self.request("POST", collection_path(obj), obj)

    def token(self, namespace: str, service_account: str, seconds: int = 3600) -> str:
        """A bound token of a ServiceAccount, as `kubectl create token` asks for it."""
        answer = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
                              {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                               "spec": {"expirationSeconds": seconds}})
        return answer["status"]["token"]


def stop_group(p: subprocess.Popen | None, grace: float = 10) -> None:
    """SIGTERM to a process's group (it was started in a session of its own), SIGKILL after `grace`."""
    if p is None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(5)
    except ProcessLookupError:
        pass


def _first_address(cidr: str) -> str:
    """The first host address of a range: the `kubernetes` Service's ClusterIP."""
    return str(next(ipaddress.ip_network(cidr).hosts()))


def collection_path(obj: dict) -> str:
    api_version, kind = obj["apiVersion"], obj["kind"]
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    plural = kind.lower() + ("es" if kind.endswith("s") else "s")
    ns = obj["metadata"].get("namespace")
    return f"{prefix}/namespaces/{ns}/{plural}" if ns else f"{prefix}/{plural}"


def kwok_node(name: str = NODE) -> dict:
    """A node kwok plays (its annotation): 64 CPUs, 256 GiB, 110 pods."""
    capacity = {"cpu": "64", "memory": "256Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "type": "kwok"}},
            "status": {"allocatable": capacity, "capacity": capacity}}


def node_ready(node: dict | None) -> bool:
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the harness package, for start()
    started = time.monotonic()
    # --oldest: the oldest admitted Kubernetes' control plane instead (make test-compat).
    version = OLDEST_KUBE_VERSION if "--oldest" in sys.argv else KUBE_VERSION
    modules = (KUBE_MODULES[version], "etcd", "kwok") if "--oldest" in sys.argv else SETUP_BUILDS
    where = build(modules, verbose="-v" in sys.argv)
    print(f"control plane {version}: {len(where)} binaries in {CACHE} ({time.monotonic() - started:.0f} s)")
    if "--start" in sys.argv:
        started = time.monotonic()
        with ControlPlane(bins=where, version=version) as cp:
            print(f"started in {time.monotonic() - started:.1f} s at {cp.server}: {cp.get('/version')['gitVersion']}")
