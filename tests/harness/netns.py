"""A test host of our own: a network namespace joined to this one by a veth pair.

Some paths need an address that is neither loopback nor anyone else's: the API server proxies to a
pod only at a non-loopback IP, and Endpoints refuse loopback addresses. The namespace's end of the
pair plays the pod's IP; a forwarder inside it passes each connection to a port on our end of the
pair, where the test's server listens. Traffic stays between the two namespaces. Needs root and
iproute2 (`ip netns`); where either is missing, `OwnHost.make` says why.

A host can also stand for a machine of its own (a Spark worker and its executors run in it) and be
cut off from everything (`cut`: its packets dropped by netfilter rules inside the namespace, which
go with it), one path let through first (`let_through`), then joined again (`heal`).

The host's end of the pair carries, as its alias, the pid of the test process that made it: a run
killed before `remove()` leaves the namespace and the link, which the next session removes
(`sweep_stale`).
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from harness import orphans

NETWORK = "198.18.0.0/16"  # of RFC 2544's 198.18.0.0/15; the real node takes 198.19.0.0/24

# Runs inside the namespace: every connection to :listen goes on to target:port.
FORWARDER = """
import asyncio, sys
listen, target, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
async def handle(reader, writer):
    up_reader, up_writer = await asyncio.open_connection(target, port)
    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)
async def main():
    server = await asyncio.start_server(handle, "0.0.0.0", listen)
    print("ready", flush=True)
    await server.serve_forever()
asyncio.run(main())
"""


class Unavailable(RuntimeError):
    pass


def _ip(*args: str) -> None:
    res = subprocess.run(["ip", *args], capture_output=True, text=True)
    if res.returncode != 0:
        raise Unavailable(f"ip {' '.join(args)}: {res.stderr.strip()}")


@dataclass
class OwnHost:
    name: str
    ours: str  # our end of the pair (where the test's server listens)
    address: str  # the namespace's end (the "pod IP")
    forwarder: subprocess.Popen | None = None

    @classmethod
    def make(cls) -> "OwnHost":
        tag = uuid.uuid4().hex[:6]
        # 198.18.0.0/15 is set aside for testing (RFC 2544); a /30 of it joins only these two ends.
        ours, address = _free_pair()
        host = cls(f"ss-{tag}", ours, address)
        try:
            _ip("netns", "add", host.name)
        except (Unavailable, FileNotFoundError) as e:
            raise Unavailable(f"cannot make a network namespace here: {e}") from None
        try:
            _ip("link", "add", f"{host.name}-a", "type", "veth", "peer", "name", host.link)
            owner = os.environ.get(orphans.OWNER_ENV) or os.getpid()
            _ip("link", "set", f"{host.name}-a", "alias", f"{OWNER_ALIAS}{owner}")
            _ip("link", "set", host.link, "netns", host.name)
            _ip("addr", "add", f"{host.ours}/30", "dev", f"{host.name}-a")
            _ip("link", "set", f"{host.name}-a", "up")
            for args in (("addr", "add", f"{host.address}/30", "dev", host.link),
                         ("link", "set", host.link, "up"), ("link", "set", "lo", "up")):
                _ip("netns", "exec", host.name, "ip", *args)
        except Unavailable:
            host.remove()
            raise
        return host

    @property
    def link(self) -> str:
        """The namespace's end of the pair."""
        return f"{self.name}-b"

    def run(self, *cmd: str) -> None:
        """`cmd` run inside the namespace, checked."""
        _ip("netns", "exec", self.name, *cmd)

    def command(self, *cmd: str) -> list[str]:
        """`cmd` to start inside the namespace (`ip netns exec` execs it: its pid is cmd's)."""
        return ["ip", "netns", "exec", self.name, *cmd]

    def holds(self, pid: int) -> bool:
        """Whether process `pid` runs in this host's namespace."""
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{self.name}").st_ino

    def route_to(self, address: str) -> None:
        """`address`, another of this host's (another pair's end), reached through our end: the
        host takes packets for its own addresses in from any link, without forwarding."""
        self.run("ip", "route", "add", f"{address}/32", "via", self.ours)

    def retransmit_within(self, ms: int) -> bool:
        """TCP retransmissions from inside the namespace at most `ms` apart, for sockets made from
        now on (net.ipv4.tcp_rto_max_ms, Linux 6.15+; per namespace, as tcp_retries2: gone with
        it). A healed partition's connections so resume within `ms`, not after a backoff of up to
        two minutes. They give up after 255 retransmissions (the most tcp_retries2 takes), about
        255 times `ms`, not after 15, which so close together would end them within a minute.
        False where the kernel has no such setting."""
        if not Path("/proc/sys/net/ipv4/tcp_rto_max_ms").exists():
            return False
        self.run("sysctl", "-qw", f"net.ipv4.tcp_rto_max_ms={ms}", "net.ipv4.tcp_retries2=255")
        return True

    def cut(self) -> None:
        """Every packet over the pair dropped, both ways, by rules inside the namespace: a network
        partition, nothing refused or reset. Connections stay open and their senders retransmit."""
        for chain, way in (("INPUT", "-i"), ("OUTPUT", "-o")):
            self.run("iptables", "-A", chain, way, self.link, "-j", "DROP")

    def let_through(self, address: str, port: int) -> None:
        """While cut: TCP to and from `address:port` passes again (one path of a partition healed)."""
        self.run("iptables", "-I", "OUTPUT", "-o", self.link, "-p", "tcp", "-d", address, "--dport", str(port),
                 "-j", "ACCEPT")
        self.run("iptables", "-I", "INPUT", "-i", self.link, "-p", "tcp", "-s", address, "--sport", str(port),
                 "-j", "ACCEPT")

    def heal(self) -> None:
        """The rules of `cut` and `let_through` gone: everything passes again."""
        for chain in ("INPUT", "OUTPUT"):
            self.run("iptables", "-F", chain)

    def forward(self, listen: int, port: int) -> None:
        """Connections to `address:listen` reach `ours:port`."""
        self.forwarder = subprocess.Popen(["ip", "netns", "exec", self.name, sys.executable, "-c", FORWARDER,
                                           str(listen), self.ours, str(port)], stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        line = self.forwarder.stdout.readline()
        if line.strip() != "ready" or time.monotonic() > deadline:
            self.remove()
            raise Unavailable(f"the forwarder in {self.name} did not start")

    def unanswering(self) -> None:
        """Nothing sent to `address` is answered, not even refused: the namespace's replies go to
        a blackhole route (as a host behind a firewall that drops packets). Gone with the namespace."""
        _ip("netns", "exec", self.name, "ip", "route", "add", "blackhole", f"{self.ours}/32")

    def remove(self) -> None:
        if self.forwarder is not None and self.forwarder.poll() is None:
            self.forwarder.kill()
            self.forwarder.wait(10)
        _remove(self.name)


# The alias of a host's end of the pair: the test process that made it (`sweep_stale`).
OWNER_ALIAS = "scorestream-test-owner="


def _remove(name: str) -> None:
    # Deleting the namespace deletes its end of the pair (and its rules), and with it ours.
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    subprocess.run(["ip", "link", "del", f"{name}-a"], capture_output=True)


def _free_pair() -> tuple[str, str]:
    """(our end, the namespace's end) of a random /30 of NETWORK no address on the host is in: two
    hosts made at once, or one another run left, never share a subnet."""
    out = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    held = [ipaddress.ip_interface(line.split()[3]) for line in out.splitlines() if len(line.split()) > 3]
    subnets = list(ipaddress.ip_network(NETWORK).subnets(new_prefix=30))
    for i in range(len(subnets)):
        subnet = subnets[(int(uuid.uuid4().hex[:4], 16) + i) % len(subnets)]
        if not any(subnet.overlaps(h.network) for h in held):
            ours, address = subnet.hosts()
            return str(ours), str(address)
    raise Unavailable(f"every /30 of {NETWORK} is held by an address on this host")


def sweep_stale() -> list[str]:
    """Remove the hosts whose test process is gone (a run killed before `remove()`): their
    namespace, with its rules, and their pair. Those without an owner are not ours to judge."""
    removed = []
    for link in Path("/sys/class/net").glob("ss-*-a"):
        try:
            alias = (link / "ifalias").read_text().strip()
        except OSError:
            continue
        owner = alias.removeprefix(OWNER_ALIAS)
        if alias.startswith(OWNER_ALIAS) and owner.isdigit() and not orphans.alive(int(owner)):
            _remove(link.name.removesuffix("-a"))
            removed.append(link.name.removesuffix("-a"))
    return removed


# Run directories the host keeps after the tests that made them: `ip netns add` makes /run/netns
# and bind-mounts it onto itself the first time, and containerd's shims and runc keep their
# sockets and state under /run/containerd whatever containerd's own state directory is (the real
# node's); neither `ip netns del` nor stopping containerd removes them.
RUN_DIRS = (Path("/run/netns"), Path("/run/containerd"))


def absent_run_dirs() -> list[Path]:
    return [d for d in RUN_DIRS if not d.exists()]


def remove_idle_run_dirs(absent_before: list[Path]) -> list[str]:
    """Those of ``absent_before`` that nothing uses now, removed (/run/netns unmounted first):
    a namespace in /run/netns, or a file under /run/containerd (a socket, a container's state),
    leaves it in place: another worker's test still runs, and the worker that finishes last
    removes them. Returns what it removed."""
    removed = []
    for d in absent_before:
        # A namespace in /run/netns is a file too (nsfs mounted on one).
        if not d.is_dir() or any(p.is_file() or p.is_socket() for p in d.rglob("*")):
            continue
        subprocess.run(["umount", str(d)], capture_output=True)  # /run/netns's mount; refused where none
        try:
            for sub in sorted(d.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                sub.rmdir()
            d.rmdir()
            removed.append(str(d))
        except OSError:
            pass  # still a mount point, or filled meanwhile: the last worker tries again
    return removed
