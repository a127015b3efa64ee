"""A test host of our own: a network namespace joined to this one by a veth pair.

Some paths need an address that is neither loopback nor anyone else's: the API server proxies to a
pod only at a non-loopback IP, and Endpoints refuse loopback addresses. The namespace's end of the
pair plays the pod's IP; a forwarder inside it passes each connection to a port on our end of the
pair, where the test's server listens. Traffic stays between the two namespaces. Needs root and
iproute2 (`ip netns`); where either is missing, `OwnHost.make` says why.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

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
        octet = int(tag[:2], 16)
        host = cls(f"ss-{tag}", f"198.18.{octet}.1", f"198.18.{octet}.2")
        try:
            _ip("netns", "add", host.name)
        except (Unavailable, FileNotFoundError) as e:
            raise Unavailable(f"cannot make a network namespace here: {e}") from None
        try:
            _ip("link", "add", f"{host.name}-a", "type", "veth", "peer", "name", f"{host.name}-b")
            _ip("link", "set", f"{host.name}-b", "netns", host.name)
            _ip("addr", "add", f"{host.ours}/30", "dev", f"{host.name}-a")
            _ip("link", "set", f"{host.name}-a", "up")
            for args in (("addr", "add", f"{host.address}/30", "dev", f"{host.name}-b"),
                         ("link", "set", f"{host.name}-b", "up"), ("link", "set", "lo", "up")):
                _ip("netns", "exec", host.name, "ip", *args)
        except Unavailable:
            host.remove()
            raise
        return host

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
        # Deleting the namespace deletes its end of the pair, and with it ours.
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        subprocess.run(["ip", "link", "del", f"{self.name}-a"], capture_output=True)


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
