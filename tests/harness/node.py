"""A real Kubernetes node for the tests: containers run.

containerd, runc and the CNI plugins are Debian's packages; the kubelet, kube-proxy, CoreDNS and
the sandbox's pause are built from Go with the control plane (tests/harness/cluster.py). They run in a
network namespace of the tests' own, joined to this one by a veth pair in 198.18.0.0/15
(RFC 2544's test range): the node's address, its bridge, the pods' range and the Services' range
are all in it, so every route, iptables rule and netns-scoped sysctl the node makes lives and dies
with that namespace, and no packet is routed off the machine (this namespace does not forward).
The API server and the tests' Kafka broker listen on this end of the pair, where pods reach them.

The node's state (containerd's root and state, the kubelet's root, the pods' logs, the CNI
addresses) lives in one temporary directory, and its pods' cgroups under one cgroup root. What the
node changes on the host all the same — the kubelet's kernel sysctls, /var/log/containers,
xtables' lock — is recorded by `HostState` before it starts and restored by `stop()`, which runs
however a test ends; the differences before and after are printed into the test log.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import sys
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness import cluster as kube_cluster
from harness import netns as own_hosts
from harness import orphans
from harness.cluster import ControlPlane

NODE_NAME = "scorestream-node"
# The node's link is the first /30 of this /24 no address on the host holds yet: a node another run
# left behind (or runs beside this one) keeps its own, and packets are never answered on the wrong link.
LINK_NETWORK = "198.19.0.0/24"
POD_CIDR = "198.19.64.0/24"
SERVICE_CIDR = "198.19.96.0/24"
CNI_BIN = Path("/usr/lib/cni")
PAUSE_IMAGE = "localhost/scorestream-pause:3.10"

# Sysctls that move by themselves: counters and random state, not settings.
VOLATILE_SYSCTLS = ("kernel.random.", "fs.dentry-state", "fs.inode-", "fs.file-nr", "kernel.ns_last_pid",
                    "kernel.pty.nr", "fs.aio-nr", "fs.quota.", "net.netfilter.nf_conntrack_count",
                    "kernel.perf_event_max_sample_rate", "fs.binfmt_misc.", "net.ipv4.tcp_mem", "net.ipv4.udp_mem",
                    "kernel.sched_domain.", "vm.stat_refresh", "fs.fanotify.", "fs.inotify.")
# What others change on the host meanwhile: tests beside the node (tests/harness/netns.py's hosts,
# buildah's image mounts) and a sandbox's process manager, which makes a cgroup per command it runs
# (`process_api`): printed, not held against the node.
# /run/netns itself: shared with those hosts, so left while one of them is up, and put back by
# the session (harness/fixtures.py: run_dirs_restored).
FOREIGN = ("/run/netns/ss-", "link added: ss-", "link removed: ss-", "/images/storage/overlay", "/process_api/",
           "mount added: /run/netns /run/netns", "/buildah-buildah")  # the last: a build's RUN step beside it
# Paths the kubelet and kube-proxy write on any host, whatever their flags say.
HOST_PATHS = (Path("/var/log/containers"), Path("/var/log/pods"), Path("/run/xtables.lock"), Path("/var/lib/kubelet"))


class Unavailable(RuntimeError):
    """This machine cannot run a real node: the reason says what is missing."""


def missing() -> str | None:
    """Why a real node cannot run here, or None."""
    if os.geteuid() != 0:
        return "a real node needs root (containerd, network namespaces, cgroups)"
    for tool in ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "iptables", "ip", "conntrack", "ipset"):
        if shutil.which(tool) is None:
            return f"{tool} not found: the real node uses Debian's containerd, runc, iptables, conntrack, ipset and iproute2"
    if not (CNI_BIN / "bridge").is_file():
        return f"the CNI plugins are not in {CNI_BIN}: apt-get install containernetworking-plugins"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "the kernel has no overlayfs"
    if not Path("/sys/fs/cgroup/memory").is_dir() and not Path("/sys/fs/cgroup/cgroup.controllers").is_file():
        return "no cgroup memory controller mounted"
    return None


# ----------------------------------------------------------------------------- the host, before and after
def _run(*cmd: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and res.returncode != 0:
        raise Unavailable(f"{' '.join(cmd)}: {(res.stderr or res.stdout).strip()[:500]}")
    return res


def _sysctls() -> dict[str, str]:
    values = {}
    for path in Path("/proc/sys").rglob("*"):
        key = ".".join(path.relative_to("/proc/sys").parts)
        if key.startswith(VOLATILE_SYSCTLS) or not path.is_file():
            continue
        try:
            values[key] = path.read_text().strip()
        except OSError:
            continue  # write-only, or refused to this reader
    return values


def _cgroups() -> set[str]:
    root = Path("/sys/fs/cgroup")
    return {str(p) for p in root.rglob("*") if p.is_dir() and (p / "cgroup.procs").exists()}


@dataclass
class HostState:
    sysctls: dict[str, str]
    iptables: str
    mounts: list[str]
    links: list[str]
    cgroups: set[str]
    paths: dict[str, bool]

    @classmethod
    def capture(cls) -> "HostState":
        rules = "".join(_run(tool, check=False).stdout for tool in ("iptables-save", "ip6tables-save"))
        rules += _run("nft", "list", "ruleset", check=False).stdout if shutil.which("nft") else ""
        return cls(
            sysctls=_sysctls(),
            # counters change with traffic; the rules are what matters
            iptables="\n".join(l for l in rules.splitlines() if not l.startswith("#") and not l.startswith(":")),
            mounts=sorted(" ".join(l.split()[3:5]) for l in Path("/proc/self/mountinfo").read_text().splitlines()),
            links=sorted(l.split(":")[1].strip().split("@")[0] for l in _run("ip", "-o", "link").stdout.splitlines()),
            cgroups=_cgroups(),
            paths={str(p): p.exists() for p in HOST_PATHS},
        )

    def diff(self, after: "HostState") -> list[str]:
        lines = [f"sysctl {k}: {self.sysctls[k]!r} -> {after.sysctls.get(k)!r}"
                 for k in sorted(self.sysctls) if after.sysctls.get(k, self.sysctls[k]) != self.sysctls[k]]
        if self.iptables != after.iptables:
            lines.append("iptables/nftables rules differ:\n" + _unified(self.iptables, after.iptables))
        lines += [f"mount added: {m}" for m in sorted(set(after.mounts) - set(self.mounts))]
        lines += [f"mount removed: {m}" for m in sorted(set(self.mounts) - set(after.mounts))]
        lines += [f"link added: {l}" for l in sorted(set(after.links) - set(self.links))]
        lines += [f"cgroup added: {c}" for c in sorted(after.cgroups - self.cgroups)]
        lines += [f"path {p}: existed {self.paths[p]}, exists {after.paths[p]}" for p in self.paths
                  if self.paths[p] != after.paths[p]]
        return lines

    def restore(self, node_cgroup: str) -> None:
        """Put back what the node changed: sysctls, the paths it made, its cgroups."""
        now = HostState.capture()
        for key, value in self.sysctls.items():
            if now.sysctls.get(key, value) != value:
                try:
                    Path("/proc/sys", *key.split(".")).write_text(value)
                except OSError:
                    pass  # read-only: reported by diff()
        for path, existed in self.paths.items():
            p = Path(path)
            if not existed and (p.exists() or p.is_symlink()):
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        for cgroup in sorted(now.cgroups - self.cgroups, key=len, reverse=True):
            if node_cgroup in cgroup:
                _kill_cgroup(Path(cgroup))
                try:
                    os.rmdir(cgroup)
                except OSError:
                    pass  # reported by diff()


def _unified(a: str, b: str) -> str:
    import difflib

    return "\n".join(difflib.unified_diff(a.splitlines(), b.splitlines(), "before", "after", lineterm="", n=0))


def _kill_cgroup(cgroup: Path) -> None:
    try:
        for pid in (cgroup / "cgroup.procs").read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    except OSError:
        pass


# ----------------------------------------------------------------------------- the node
@dataclass
class Node:
    """A node joined to `ControlPlane(address=node.host_address, service_cidr=SERVICE_CIDR, fake_node=False)`."""

    cp: ControlPlane
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    dir: Path | None = None
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    before: HostState | None = None
    absent_run_dirs: list[Path] = field(default_factory=list)  # /run/netns, /run/containerd before it
    host_address: str = ""  # this end of the pair: the API server and the broker listen here
    node_address: str = ""  # the node's InternalIP; CoreDNS listens here
    import_seconds: dict[str, float] = field(default_factory=dict)  # archive name -> seconds
    # NetworkPolicies enforced (kube-router's firewall, in the node's namespace like kube-proxy);
    # off, the bridge admits every packet, as a cluster without a policy-aware network does.
    policies: bool = False

    @property
    def netns(self) -> str:
        return netns_of(self.tag)

    @property
    def cgroup_root(self) -> str:
        return cgroup_root_of(self.tag)

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    # ------------------------------------------------------------------ network first, then the control plane
    @classmethod
    def network(cls, tag: str | None = None) -> "Node":
        """The node's namespace and link, made before the control plane, which listens on this
        end of it. Records the host first: whatever happens next, `stop()` restores it."""
        why = missing()
        if why:
            raise Unavailable(why)
        for stale in sweep_stale():
            print(f"removed a node a killed run left behind: {stale}")
        node = cls(cp=None, **({"tag": tag} if tag else {}))  # type: ignore[arg-type]
        node.before = HostState.capture()
        node.absent_run_dirs = own_hosts.absent_run_dirs()
        node.host_address, node.node_address = free_link_pair()
        node.dir = Path(tempfile.mkdtemp(prefix=f"ss-node-{node.tag}-", dir="/tmp"))
        orphans.mark_folder(node.dir)
        try:
            host_link, node_link = host_link_of(node.tag), node_link_of(node.tag)
            _run("ip", "netns", "add", node.netns)
            _run("ip", "link", "add", host_link, "type", "veth", "peer", "name", node_link)
            _run("ip", "link", "set", node_link, "netns", node.netns)
            _run("ip", "addr", "add", f"{node.host_address}/30", "dev", host_link)
            _run("ip", "link", "set", host_link, "up")
            for args in (("addr", "add", f"{node.node_address}/30", "dev", node_link), ("link", "set", node_link, "up"),
                         ("link", "set", "lo", "up"), ("route", "add", "default", "via", node.host_address)):
                node.ns("ip", *args)
            # The node routes its pods' packets (inside its namespace only) and passes bridged
            # traffic through iptables, as kube-proxy requires.
            node.ns("sysctl", "-qw", "net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1")
        except BaseException:
            node.stop()
            raise
        return node

    def ns(self, *cmd: str) -> subprocess.CompletedProcess:
        return _run("ip", "netns", "exec", self.netns, *cmd)

    # ------------------------------------------------------------------ the node's processes
    def start(self, cp: ControlPlane, timeout: float = 120) -> "Node":
        self.cp = cp
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        bins = kube_cluster.build(("kube", "coredns", "pause", *(("kube-router",) if self.policies else ())))
        d = self.dir
        self._cgroup_root()
        self._serving_certificate()
        kubeconfig = d / "admin.kubeconfig"
        kubeconfig.write_text(self.cp.admin_config.read_text())
        self._containerd(timeout)
        self._reach_api_server()
        self.import_image(self._pause_archive(bins["pause"]))
        self._kubelet(bins["kubelet"])
        self._spawn("kube-proxy", str(bins["kube-proxy"]), f"--kubeconfig={kubeconfig}",
                    f"--hostname-override={NODE_NAME}", f"--cluster-cidr={POD_CIDR}", "--proxy-mode=iptables",
                    # leave the host's conntrack table size and timeouts alone
                    "--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0",
                    "--conntrack-tcp-timeout-close-wait=0", f"--metrics-bind-address={self.node_address}:10249",
                    f"--healthz-bind-address={self.node_address}:10256")
        corefile = d / "Corefile"
        corefile.write_text(f""".:53 {{
    bind {self.node_address}
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
""")
        self._spawn("coredns", str(bins["coredns"]), "-conf", str(corefile))
        self._wait(lambda: kube_cluster.node_ready(self.cp.get(f"/api/v1/nodes/{NODE_NAME}")), timeout,
                   f"node {NODE_NAME} Ready")
        if self.policies:  # it finds its node by the Node object, which the kubelet registers
            self._policy_enforcer(bins["kube-router"], kubeconfig)
        self._wait(lambda: self.cp.get("/api/v1/namespaces/default/serviceaccounts/default") is not None, timeout,
                   "the default ServiceAccount")

    def _containerd(self, timeout: float) -> None:
        self._spawn("containerd", "containerd", "--config", str(self._containerd_config()))
        self._wait(lambda: self.socket.exists() and self.ctr("version", check=False).returncode == 0, timeout,
                   "containerd")

    def _kubelet(self, binary: Path) -> None:
        self._spawn("kubelet", str(binary), f"--config={self._kubelet_config()}",
                    f"--kubeconfig={self.dir / 'admin.kubeconfig'}", f"--root-dir={self.dir / 'kubelet'}",
                    f"--hostname-override={NODE_NAME}", f"--node-ip={self.node_address}", "--v=1")

    def _kill_pods(self) -> None:
        """Every pod's processes, then the shims that ran them (they outlive containerd)."""
        for cgroup in sorted(_cgroups(), key=len, reverse=True):
            if self.cgroup_root in cgroup:
                _kill_cgroup(Path(cgroup))
        _run("pkill", "-KILL", "-f", f"containerd-shim.*{self.dir}", check=False)

    def restart(self, timeout: float = 180) -> None:
        """What a reboot does to the node: the kubelet stopped, every container killed with its
        shim, containerd stopped; then containerd and the kubelet started again on the state they
        left, and the kubelet makes the pods' sandboxes and containers anew. (kube-proxy and CoreDNS
        run as the node's processes here, not as pods: they stay.)"""
        kube_cluster.stop_group(self.procs.pop("kubelet", None), grace=20)
        self._kill_pods()
        kube_cluster.stop_group(self.procs.pop("containerd", None), grace=20)
        self._containerd(timeout)
        self._kubelet(kube_cluster.build(("kube",))["kubelet"])
        self._wait(lambda: kube_cluster.node_ready(self.cp.get(f"/api/v1/nodes/{NODE_NAME}")), timeout,
                   f"node {NODE_NAME} Ready again")

    def _policy_enforcer(self, binary: Path, kubeconfig: Path) -> None:
        """kube-router's firewall alone: its iptables chains and ipsets are made in the node's
        namespace and go with it. Its router and service proxy stay off (kube-proxy is the node's);
        no health or metrics port is opened."""
        self._spawn("kube-router", str(binary), f"--kubeconfig={kubeconfig}", f"--hostname-override={NODE_NAME}",
                    "--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false",
                    "--enable-ipv6=false", f"--service-cluster-ip-range={SERVICE_CIDR}", "--health-port=0",
                    "--metrics-port=0")
        self._wait(lambda: "KUBE-ROUTER-FORWARD" in self.ns("iptables-save", "-t", "filter").stdout, 120,
                   "kube-router's NetworkPolicy chains")

    def _reach_api_server(self) -> None:
        """Fail in seconds, saying why, when the node's namespace cannot reach the API server
        (rather than after the kubelet's two minutes of `i/o timeout`)."""
        url = urllib.parse.urlsplit(self.cp.server)
        probe = f"import socket; socket.create_connection(({url.hostname!r}, {url.port}), timeout=5).close()"
        res = subprocess.run(["nsenter", f"--net=/run/netns/{self.netns}", "--", sys.executable, "-c", probe],
                             capture_output=True, text=True)
        if res.returncode != 0:
            routes = _run("ip", "-o", "route", "show", "to", "match", url.hostname, check=False).stdout
            raise RuntimeError(f"the node's namespace cannot reach the API server at {url.netloc}: "
                               f"{res.stderr.strip().splitlines()[-1:]}\nthe host's routes to it:\n{routes}")

    def _cgroup_root(self) -> None:
        """The pods' cgroup root, in every hierarchy: the kubelet requires it to exist. A v1
        cpuset starts empty; it gets its parent's CPUs and memory nodes."""
        for hierarchy in Path("/sys/fs/cgroup").iterdir():
            if not (hierarchy / "cgroup.procs").exists():
                continue
            path = hierarchy / self.cgroup_root.lstrip("/")
            path.mkdir(exist_ok=True)
            for inherited in ("cpuset.cpus", "cpuset.mems"):
                if (path / inherited).exists():
                    (path / inherited).write_text((hierarchy / inherited).read_text())

    def _serving_certificate(self) -> None:
        """The kubelet's serving certificate for its address, from the control plane's CA, so the
        API server verifies it (`kubectl logs`)."""
        d, ca = self.dir, self.cp.dir
        (d / "kubelet.ext").write_text(f"subjectAltName=IP:{self.node_address},DNS:{NODE_NAME}\nextendedKeyUsage=serverAuth\n")
        kube_cluster._openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "kubelet.key", "-out", "kubelet.csr",
                              "-subj", f"/CN={NODE_NAME}", cwd=d)
        kube_cluster._openssl("x509", "-req", "-in", "kubelet.csr", "-CA", str(ca / "ca.crt"), "-CAkey", str(ca / "ca.key"),
                              "-CAcreateserial", "-out", "kubelet.crt", "-days", "2", "-extfile", "kubelet.ext", cwd=d)

    def _containerd_config(self) -> Path:
        d = self.dir
        net = d / "cni" / "net.d"
        net.mkdir(parents=True, exist_ok=True)  # again at a restart
        (net / "10-scorestream.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "scorestream",
            "plugins": [
                {"type": "bridge", "bridge": "ss0", "isGateway": True, "ipMasq": True, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]], "routes": [{"dst": "0.0.0.0/0"}],
                          "dataDir": str(d / "cni" / "ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ]}))
        cri = {
            "sandbox_image": PAUSE_IMAGE,
            # This VM withholds CAP_SYS_RESOURCE: without this, runc fails every sandbox
            # (`can't get final child's PID from pipe: EOF`) raising its oom_score_adj.
            "restrict_oom_score_adj": True,
            "netns_mounts_under_state_dir": True,
            "enable_selinux": False,
            "containerd": {"snapshotter": "overlayfs", "default_runtime_name": "runc",
                           "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2",
                                                 "options": {"SystemdCgroup": False}}}},
            "cni": {"bin_dir": str(CNI_BIN), "conf_dir": str(net)},
        }
        config = d / "containerd.toml"
        config.write_text(_toml({
            "version": 2, "root": str(d / "containerd" / "root"), "state": str(d / "containerd" / "state"),
            "disabled_plugins": ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.aufs",
                                 "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"],
            "grpc": {"address": str(self.socket)},
            "ttrpc": {"address": str(d / "containerd-ttrpc.sock")},
            "plugins": {"io.containerd.grpc.v1.cri": cri,
                        "io.containerd.internal.v1.opt": {"path": str(d / "containerd" / "opt")}},
        }))
        return config

    def _kubelet_config(self) -> Path:
        d = self.dir
        resolv = d / "resolv.conf"
        resolv.write_text("")  # pods resolve cluster names only: nothing outside is reachable anyway
        config = d / "kubelet.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self.cp.dir / "ca.crt")}},
            "authorization": {"mode": "Webhook"},
            "address": self.node_address, "healthzBindAddress": self.node_address,
            "tlsCertFile": str(d / "kubelet.crt"), "tlsPrivateKeyFile": str(d / "kubelet.key"),
            "cgroupDriver": "cgroupfs", "cgroupRoot": self.cgroup_root, "cgroupsPerQOS": True,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "clusterDNS": [self.node_address], "clusterDomain": "cluster.local", "resolvConf": str(resolv),
            "podLogsDir": str(d / "pods"), "failSwapOn": False,
            "podCIDR": POD_CIDR, "maxPods": 50, "serializeImagePulls": False,
            # The images are imported, never pulled; no eviction or image GC on a test VM's disk.
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "syncFrequency": "5s", "fileCheckFrequency": "5s", "nodeStatusUpdateFrequency": "5s",
        }))
        return config

    def _pause_archive(self, binary: Path) -> Path:
        """An OCI archive holding the pause binary: the sandbox image, made here (no registry)."""
        return oci_archive(self.dir / "pause.oci.tar", PAUSE_IMAGE, {"pause": binary}, entrypoint=["/pause"])

    def import_image(self, archive: Path) -> None:
        started = time.monotonic()
        self.ctr("images", "import", "--no-unpack=false", str(archive), timeout=900)
        self.import_seconds[archive.name] = time.monotonic() - started


    def ctr(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return _run("ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args, check=check, timeout=timeout)

    def _spawn(self, name: str, binary: str, *args: str) -> None:
        log = open(self.dir / f"{name}.log", "wb")
        self.procs[name] = subprocess.Popen(["nsenter", f"--net=/run/netns/{self.netns}", "--", binary, *args],
                                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, env={**os.environ, "PATH": os.environ["PATH"]})
        log.close()

    def _wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited ({p.returncode}) while waiting for {what}:\n{self.log_tail(name)}")
            try:
                if predicate():
                    return
            except (OSError, subprocess.SubprocessError, kube_cluster.ApiError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"timed out waiting for {what}:\n" + "\n".join(self.log_tail(n, 10) for n in self.procs))

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.dir / f"{name}.log"
        return f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def rss_mib(self) -> dict[str, float]:
        """Resident memory of the node's own processes (not its pods'), MiB."""
        out = {}
        for name, p in self.procs.items():
            out[name] = tree_rss(p.pid) / 1024
        shims = [int(pid) for pid in _run("pgrep", "-f", f"containerd-shim.*{self.socket}", check=False).stdout.split()]
        out["shims"] = sum(tree_rss(pid, children=False) for pid in shims) / 1024
        return out

    # ------------------------------------------------------------------ teardown
    def stop(self) -> list[str]:
        """Stop every process of the node and its pods, remove its state, restore the host;
        returns the differences left between before and after (none, when all went well)."""
        for name in ("kube-router", "kube-proxy", "coredns", "kubelet"):
            kube_cluster.stop_group(self.procs.pop(name, None), grace=20)
        if self.dir is not None and self.socket.exists():
            self._kill_pods()
        kube_cluster.stop_group(self.procs.pop("containerd", None), grace=20)
        if self.dir is not None:
            _unmount_under(self.dir)
        _remove_network(self.tag)
        own_hosts.remove_idle_run_dirs(self.absent_run_dirs)
        left = []
        if self.before is not None:
            self.before.restore(self.cgroup_root)
            left = self.before.diff(HostState.capture())
            # Other tests beside this one make their own hosts (tests/harness/netns.py: `ss-<tag>`) and
            # buildah mounts its images: theirs to clean, not the node's.
            print("host differences while the node ran, its own and others':\n  " + "\n  ".join(left or ["none"]))
            left = [l for l in left if not any(f in l for f in FOREIGN) and not _another_nodes(l, self.tag)]
        if self.dir is not None and not os.environ.get("SCORESTREAM_KEEP_CLUSTER"):
            shutil.rmtree(self.dir, ignore_errors=True)
        return left


# ----------------------------------------------------------------------------- links, and what killed runs leave


def netns_of(tag: str) -> str:
    return f"ssnode-{tag}"


def _another_nodes(difference: str, tag: str) -> bool:
    """Whether a host difference is another real node's (its namespace or link), made by a test
    beside this one: theirs to remove."""
    return any(found != tag for found in re.findall(r"ssn(?:ode-)?([0-9a-f]{6})", difference))


def host_link_of(tag: str) -> str:
    return f"ssn{tag}a"


def node_link_of(tag: str) -> str:
    return f"ssn{tag}b"  # the pair's end in the node's namespace


def cgroup_root_of(tag: str) -> str:
    return f"/scorestream-node-{tag}"


def _unmount_under(node_dir: Path) -> None:
    """The overlay rootfs, shm and netns mounts under a node's directory, deepest first."""
    mounts = [l.split()[4] for l in Path("/proc/self/mountinfo").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(f"{node_dir}/")), key=len, reverse=True):
        _run("umount", "-l", mount, check=False)


def free_link_pair() -> tuple[str, str]:
    """(host end, node end) of the first /30 in LINK_NETWORK that no address on the host is in."""
    held = [ipaddress.ip_interface(word) for line in _run("ip", "-o", "-4", "addr").stdout.splitlines()
            for word in line.split()[3:4]]
    for subnet in ipaddress.ip_network(LINK_NETWORK).subnets(new_prefix=30):
        if not any(subnet.overlaps(i.network) for i in held):
            host, node = list(subnet.hosts())
            return str(host), str(node)
    raise Unavailable(f"every /30 of {LINK_NETWORK} is held by an address on this host")


def _remove_network(tag: str) -> None:
    _run("ip", "netns", "del", netns_of(tag), check=False)  # its links, bridge, rules and routes with it
    _run("ip", "link", "del", host_link_of(tag), check=False)


def sweep_stale() -> list[str]:
    """Remove the nodes whose test process is gone (a run killed before `stop()`): their mounts,
    namespace, link, cgroup root and directory. A node still being made or running has a live owner."""
    removed = []
    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(netns_of("")):
            continue
        tag = name.removeprefix(netns_of(""))
        dirs = list(Path("/tmp").glob(f"ss-node-{tag}-*"))
        if any(orphans.folder_owner_alive(d) for d in dirs):
            continue
        # The owner killed, its node's processes live on in the namespace (containerd, the
        # kubelet, the shims and their containers): killed with it.
        for pid in _run("ip", "netns", "pids", name, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        for d in dirs:
            _unmount_under(d)
            shutil.rmtree(d, ignore_errors=True)
        _remove_network(tag)
        for cgroup in sorted((c for c in _cgroups() if cgroup_root_of(tag) in c), key=len, reverse=True):
            _kill_cgroup(Path(cgroup))
            try:
                os.rmdir(cgroup)
            except OSError:
                pass
        removed.append(name)
    return removed




def tree_rss(pid: int, children: bool = True) -> int:
    """KiB resident of a process and (by default) its descendants."""
    pids, total = [pid], 0
    while pids:
        p = pids.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += int(next((l.split()[1] for l in status.splitlines() if l.startswith("VmRSS:")), "0"))
            if children:
                for task in Path(f"/proc/{p}/task").iterdir():
                    pids += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total


def _toml(data: dict, prefix: str = "") -> str:
    """Just enough TOML for containerd's configuration (no TOML writer in the standard library)."""
    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return str(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v)

    plain = [f"{k} = {value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    out = ("\n".join(plain) + "\n") if plain else ""
    for k, v in data.items():
        if isinstance(v, dict):
            key = f'{prefix}.{json.dumps(k) if "." in k else k}' if prefix else (json.dumps(k) if "." in k else k)
            out += f"\n[{key}]\n" + _toml(v, key)
    return out


def oci_archive(path: Path, ref: str, files: dict[str, Path], entrypoint: list[str]) -> Path:
    """A one-layer OCI image archive of `files` (name in the image → file here), as `ctr images
    import` and `skopeo` read it."""
    import hashlib
    import io
    import tarfile

    def blob(tar: tarfile.TarFile, data: bytes, media_type: str) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        info = tarfile.TarInfo(f"blobs/sha256/{digest}")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}

    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as lt:
        for name, source in files.items():
            lt.add(str(source), arcname=name)
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Entrypoint": entrypoint},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    with tarfile.open(path, "w") as tar:
        layer_desc = blob(tar, layer_bytes, "application/vnd.oci.image.layer.v1.tar")
        config_desc = blob(tar, config, "application/vnd.oci.image.config.v1+json")
        manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "config": config_desc, "layers": [layer_desc]}).encode()
        manifest_desc = blob(tar, manifest, "application/vnd.oci.image.manifest.v1+json")
        manifest_desc["annotations"] = {"org.opencontainers.image.ref.name": ref, "io.containerd.image.name": ref}
        for name, data in (("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
                           ("index.json", json.dumps({"schemaVersion": 2, "manifests": [manifest_desc]}).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path
