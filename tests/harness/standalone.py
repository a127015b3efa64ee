"""A Spark standalone cluster on loopback, from the pyspark distribution: one master and its
workers (by default one of two cores). Executors of a job on it can be added and removed while
the job runs. Or with each worker on a test host of its own (harness/netns.py), cut off from the
network by the test while its executors run: the master (and the job's driver and broker) then
listen on the first host's end of its pair, which every host reaches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from harness.fixtures import C1_ONLY
from harness.netns import OwnHost
from scorestream.tools.local.broker import free_port


class StandaloneCluster:
    def __init__(self, workdir: Path, cores: int = 2, memory: str = "4g", workers: int = 1,
                 hosts: list[OwnHost] | None = None):
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.workdir = workdir
        self.cores, self.memory, self.workers = cores, memory, workers
        assert hosts is None or len(hosts) == workers, "one host per worker"
        self.hosts = hosts
        self.host = hosts[0].ours if hosts else "127.0.0.1"  # where the master listens
        self.port, self.ui = free_port(self.host), free_port(self.host)
        self.procs: list[subprocess.Popen] = []

    @property
    def master(self) -> str:
        return f"spark://{self.host}:{self.port}"

    def _start(self, name: str, *args: str, on: OwnHost | None = None) -> None:
        address = on.address if on else self.host
        # Executors inherit their worker's environment: they listen on its address too.
        env = {**os.environ, "SPARK_HOME": str(self.home), "SPARK_LOCAL_IP": address,
               "SPARK_WORKER_DIR": str(self.workdir / "work"), "PYSPARK_PYTHON": sys.executable,
               # the cluster's JVMs with C1 only, as the tests' drivers (harness/fixtures.py)
               "SPARK_NO_DAEMONIZE": "1", "SPARK_DAEMON_JAVA_OPTS": C1_ONLY}
        command = [str(self.home / "bin" / "spark-class"), *args, "--host", address]
        log = open(self.workdir / f"{name}.log", "ab")
        self.procs.append(subprocess.Popen(on.command(*command) if on else command, env=env,
                                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def start(self, timeout: float = 180.0) -> StandaloneCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._start("master", "org.apache.spark.deploy.master.Master", "--port", str(self.port),
                    "--webui-port", str(self.ui))
        for i in range(self.workers):
            self._start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--cores", str(self.cores),
                        "--memory", self.memory, "--webui-port", str(free_port()), self.master,
                        on=self.hosts[i] if self.hosts else None)
        try:
            self._wait_up(timeout)
        except BaseException:  # nothing left running: the fixture's teardown never runs after a failed setup
            self.stop()
            raise
        return self

    def _wait_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{self.host}:{self.ui}/json/", timeout=2) as r:
                    if json.load(r).get("aliveworkers") == self.workers:
                        return
            except (OSError, ValueError):  # not up yet; a starting master's UI may answer /json/ with a page
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the standalone cluster did not come up in {timeout:.0f}s: {self.workdir}")

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = StandaloneCluster(tmp_path_factory.mktemp("standalone")).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def machines(tmp_path_factory):
    """Three workers of one core, each standing for a machine of its own: an executor's machine can
    so be paused without holding up the others (a worker copies its executors' output: paused, it
    would block them all once a pipe fills), and a lost executor's replacement has a spare."""
    c = StandaloneCluster(tmp_path_factory.mktemp("machines"), cores=1, workers=3).start()
    yield c
    c.stop()


def standalone_conf(executors: int = 1, cluster: StandaloneCluster | None = None) -> dict[str, str]:
    """A job's Spark settings for the cluster (loopback's by default): executors of one core; the
    driver listens where the master does, which every worker reaches."""
    host = cluster.host if cluster else "127.0.0.1"
    return {"spark.executor.cores": "1", "spark.executor.memory": "512m", "spark.executor.instances": str(executors),
            "spark.driver.host": host, "spark.driver.bindAddress": host,
            # C1 only, as the tests' drivers (harness/fixtures.py): a worker launches its executors
            # with the job's settings, not the tests' SPARK_SUBMIT_OPTS.
            "spark.executor.extraJavaOptions": C1_ONLY}
