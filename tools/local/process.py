"""Running a serving job as a local process and reading what it wrote: for the demo and the tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from scorestream.config import JobConfig


class JobProcess:
    """``python -m scorestream.runtime`` in its own process group, so nothing outlives it."""

    def __init__(self, config: JobConfig, workdir: Path, log_name: str = "job.log"):
        self.config = config
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.workdir / f"{config.name}.json"
        self.config_path.write_text(config.to_json())
        self.log_path = self.workdir / log_name
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.config.http.port}"

    def start(self) -> "JobProcess":
        # The JVM's and Python's scratch files (Spark's artifacts-* and spark-* folders, native
        # libraries unpacked at start) in the job's folder: a job killed with SIGKILL cannot
        # remove them, and /tmp would keep them.
        scratch = self.workdir / "tmp"
        scratch.mkdir(exist_ok=True)
        submit_opts = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -Djava.io.tmpdir={scratch}".strip()
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
               "TMPDIR": str(scratch), "SPARK_SUBMIT_OPTS": submit_opts}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scorestream.runtime", "--config", str(self.config_path)],
            stdout=open(self.log_path, "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        return self

    def get(self, path: str, timeout: float = 5.0):
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            body = r.read()
            return json.loads(body) if r.headers.get_content_type() == "application/json" else body.decode()

    def post(self, path: str, body: dict, timeout: float = 30.0) -> tuple[int, dict]:
        """POST with the job's control token (as the operator does), when it has one."""
        headers = {"Content-Type": "application/json"}
        if self.config.http.control_token_file:
            headers["Authorization"] = f"Bearer {Path(self.config.http.control_token_file).read_text().strip()}"
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def readiness(self) -> dict:
        """``/readyz``'s answer (``Readiness``), ready or not; {} while the job does not answer."""
        try:
            return self.get("/readyz")
        except urllib.error.HTTPError as e:  # 503: not ready, and why
            return json.loads(e.read() or b"{}")
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    def ready(self) -> bool:
        return bool(self.readiness().get("ready"))

    def wait_ready(self, timeout: float = 180.0) -> "JobProcess":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc and self.proc.poll() is not None:
                raise RuntimeError(f"job exited with {self.proc.returncode}; log {self.log_path}:\n{self.tail()}")
            if self.ready():
                return self
            time.sleep(0.5)
        raise TimeoutError(f"job not ready in {timeout}s; log {self.log_path}:\n{self.tail()}")

    def wait_records(self, count: int, timeout: float = 180.0) -> dict:
        """Wait until the job has taken in at least `count` records in completed batches."""
        deadline = time.monotonic() + timeout
        stats: dict = {}
        while time.monotonic() < deadline:
            if self.proc and self.proc.poll() is not None:
                raise RuntimeError(f"job exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                stats = self.get("/stats")
                if stats["totals"]["recordsIn"] >= count:
                    return stats
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"job took in {stats.get('totals')} of {count} records in {timeout}s:\n{self.tail()}")

    def stop(self, timeout: float = 90.0) -> int:
        """SIGTERM to the driver alone, as Kubernetes sends it to a container's first process: the
        job finishes its batch, stops Spark and exits. A signal to the whole group would kill the
        driver's JVM before the driver could stop it."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
        return self.proc.returncode

    def kill(self) -> None:
        """kill -9 of the whole process group: the driver's JVM and Python workers too."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join([line for line in text if "rdkafka" not in line][-lines:])


def read_topic(bootstrap: str, topic: str, expect: int | None = None, idle: float = 3.0, timeout: float = 120.0) -> list:
    """All messages of a topic from the beginning: until `expect` are read, or nothing came for `idle`s.

    Assigns partitions rather than joining a group, so it starts at once on any broker.
    """
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "scorestream-reader-check", "enable.auto.commit": False})
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        c.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        out: list = []
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline:
            msgs = c.consume(5000, timeout=0.5)
            for m in msgs:
                if m.error() is None:
                    out.append(m)
            if msgs:
                last = time.monotonic()
            if expect is not None and len(out) >= expect and time.monotonic() - last > 0.5:
                break
            if expect is None and time.monotonic() - last > idle:
                break
        return out
    finally:
        c.close()
