"""Running a real kopf operator against the emulated Kubernetes API (kmock + kmock_compat), and
what tests do with it: apply resources as kubectl would, read objects, wait for conditions."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
import uuid
from pathlib import Path

import kmock
import kopf
import pytest
import pytest_asyncio
import yaml

from scorestream.config import JobConfig
from scorestream.demo.broker import free_port
from scorestream.demo.process import JobProcess
from scorestream.operator import spec as s
from scorestream.operator.handlers import operator_scope, register
from scorestream.operator.kube import Kube
from scorestream.operator.settings import OperatorConfig

from admission import admit
from kmock_compat import Emulator

EXAMPLE = yaml.safe_load((Path(__file__).resolve().parent.parent / "examples" / "wine-pmml.yaml").read_text())
MS = f"{s.GROUP}/{s.VERSION}/{s.PLURAL}"
NS = "ml"


@pytest_asyncio.fixture
async def api():
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        emulator.api_url = str(server.url).rstrip("/")
        emulator.kube = Kube.for_server(emulator.api_url)
        yield emulator
        await emulator.kube.close()


class Operator:
    """A real kopf operator in a thread of its own with its own event loop, as in a process of
    its own: kopf treats every task of its loop as its own and cancels them all when it stops,
    which would take the emulated API and other operators with it in a shared loop."""

    def __init__(self, api, config, token=None):
        self.api, self.config, self.token = api, config, token
        self.thread = self.loop = self.task = None

    async def start(self):
        registry = kopf.OperatorRegistry()
        register(registry, self.config, connection=kopf.ConnectionInfo(server=self.api.api_url, insecure=True,
                                                                           token=self.token))
        self.stop_flag, ready = threading.Event(), threading.Event()
        self.loop = asyncio.new_event_loop()

        def main():
            asyncio.set_event_loop(self.loop)
            self.task = self.loop.create_task(kopf.operator(
                registry=registry, stop_flag=self.stop_flag, ready_flag=ready, memo=kopf.Memo(),
                **operator_scope(self.config)))
            try:
                self.loop.run_until_complete(self.task)
            except BaseException:  # cancelled or failed: the test sees it through its API effects
                pass
            finally:
                self.loop.close()

        self.thread = threading.Thread(target=main, name=f"operator-{id(self)}", daemon=True)
        self.thread.start()
        assert await asyncio.to_thread(ready.wait, 20), "the operator did not start"

    @property
    def running(self):
        return self.thread is not None and self.thread.is_alive()

    async def kill(self):
        """Not a graceful stop: every task of the operator is cancelled wherever it is."""
        self.loop.call_soon_threadsafe(self.task.cancel)
        await asyncio.to_thread(self.thread.join, 20)
        assert not self.running
        self.stop_flag.set()  # kopf waits on it in an executor thread, which would outlive the test

    async def stop(self):
        self.stop_flag.set()
        await asyncio.to_thread(self.thread.join, 10)
        if self.running:
            # kopf 1.45 closes its HTTP session before its final peering touch, which then
            # waits forever for credentials; the real operator exits after cleanup
            # (handlers.register's exit_after_cleanup). Here: cancel it.
            await self.kill()


class Operated:
    """An operator against the emulated API that reads the job's endpoint, and the job it runs as
    a local process standing in for the driver pod; both stopped at the end."""

    def __init__(self, api, **config):
        self.api, self.port, self.job = api, free_port(), None
        self.op = Operator(api, OperatorConfig(allNamespaces=True, endpointTemplate=f"http://127.0.0.1:{self.port}",
                                               **config))

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
        """Run the ConfigMap the operator wrote, on `master` instead of the cluster's; the driver
        pod then reports ready, as the kubelet would."""
        await until(lambda: obj(self.api, "v1/configmaps", "wine-job"), what="the job's ConfigMap")
        raw = json.loads(obj(self.api, "v1/configmaps", "wine-job")["data"]["job.json"])
        raw["spark"].update(master=master, conf=conf or {})
        for section, values in overrides.items():
            raw[section].update(values)
        raw.update(http={"host": "127.0.0.1", "port": self.port}, checkpointLocation=str(workdir / "checkpoint"),
                   workDir=str(workdir / "work"))
        self.job = JobProcess(JobConfig.model_validate(raw), workdir, "job.log").start()
        await asyncio.to_thread(self.job.wait_ready, 240)
        driver_pod(self.api)
        return self.job


@pytest.fixture
def topics(broker):
    suffix = uuid.uuid4().hex[:8]
    names = {"dataTopic": f"records-{suffix}", "outputTopic": f"predictions-{suffix}",
             "deadLetterTopic": f"dlq-{suffix}", "modelsTopic": f"models-{suffix}"}
    return names


def resource(topics, broker, name="wine", namespace=NS, **spec):
    body = copy.deepcopy(EXAMPLE)
    body["metadata"] = {"name": name, "namespace": namespace}
    body["spec"]["kafka"].update(topics, bootstrapServers=broker.bootstrap)
    body["spec"]["kafka"].pop("secretRef")
    body["spec"].update(spec)
    return body


async def apply(api, body, admitted=False):
    """kubectl apply: the API server's admission first (unless done by the caller), then create or patch."""
    ns = body["metadata"]["namespace"]
    existing = await api.kube.get(s.API_VERSION, s.KIND, ns, body["metadata"]["name"])
    if not admitted:
        errors = admit(body, existing)
        assert errors == [], errors
    if existing is None:
        status, data = await api.kube.request("POST", f"/apis/{s.API_VERSION}/namespaces/{ns}/{s.PLURAL}", body)
    else:
        status, data = await api.kube.request(
            "PATCH", f"/apis/{s.API_VERSION}/namespaces/{ns}/{s.PLURAL}/{body['metadata']['name']}",
            {"spec": body["spec"]}, content_type="application/merge-patch+json")
    assert status < 300, (data.get("message"), data.get("details", {}).get("traceback", "")[-1500:])
    return data


def obj(api, resource_key, name, namespace=NS):
    try:
        found = api.objects[resource_key, namespace, name]
    except KeyError:
        return None
    return None if found.deleted else copy.deepcopy(found.raw)


async def until(predicate, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def condition(api, name, ctype):
    ms = obj(api, MS, name) or {}
    return next((c for c in (ms.get("status") or {}).get("conditions", []) if c["type"] == ctype), {})


def driver_pod(api, name="wine", ready=True, waiting=None, restarts=0):
    status = {"name": "driver", "ready": ready, "restartCount": restarts, "state": {}}
    if waiting:
        status["state"] = {"waiting": {"reason": waiting}}
        status["lastState"] = {"terminated": {"reason": "Error", "message": "Exception: bootstrap failed",
                                              "exitCode": 1}}
    # As the StatefulSet controller makes it: from the current pod template (its annotations).
    sts = obj(api, "apps/v1/statefulsets", f"{name}-driver") or {}
    annotations = sts.get("spec", {}).get("template", {}).get("metadata", {}).get("annotations", {})
    api.objects["v1/pods", NS, f"{name}-driver-0"] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-driver-0", "namespace": NS, "uid": str(uuid.uuid4()), "annotations": annotations},
        "status": {"containerStatuses": [status]},
    }

