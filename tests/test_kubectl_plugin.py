"""`kubectl scorestream` run by kubectl itself (the `kubectl-scorestream` console script on PATH)
against the real API server, with the operator (a process, the chart's credentials), the real
broker, and a stand-in for the job reached the way users reach it: through the API server's
service proxy to the driver's Service.

kwok runs no container, so nothing listens at the driver pod's IP. The API server proxies a
service only to an endpoint address that is one of its target pod's IPs, and Endpoints refuse
loopback addresses: so the test makes a host of its own (tests/harness/netns.py: a network namespace on a
veth pair), writes that host's address into the driver pod's status as the pod's IP — the part a
kubelet and CNI play — and forwards its port 9090 (the driver's read-only container port, which the plugin reads) to the stand-in.
The endpoints controller then points the Service there, and the API server's proxy reaches the
stand-in: nothing is mocked on the path from kubectl to the job's answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_asyncio
import yaml
from aiohttp import web

from scorestream import naming
from scorestream.api import job_http as h
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.naming import CONFIG_HASH_ANNOTATION, METRICS_PORT
from scorestream.tools.local.broker import create_topics, free_port
from scorestream.tools.local.process import read_topic

from harness.fake_job import FakeJob, model_info, serving_figures
from harness.netns import OwnHost, Unavailable
from harness.operator import MS, apply, condition, driver_pod, events, obj, resource, until

pytestmark = pytest.mark.broker

BIN = Path(sys.executable).parent  # kubectl-scorestream, installed with the package


class StandIn(FakeJob):
    """The fake job with a candidate on trial, as the job reports one in /stats and /models."""

    def __init__(self):
        super().__init__()
        self.candidate: tuple[str, str] | None = None  # (name, version)

    async def models(self, _):
        cands = {}
        if self.candidate:
            m = model_info("wine", *self.candidate, 1.7e9 + 100)
            cands["wine"] = h.CandidateInfo(**m.model_dump(), strategy="Canary", percent=10.0)
        return web.json_response(h.Models(serving=self.serving, candidates=cands, rejected=self.rejected)
                                 .model_dump(mode="json"))

    async def stats(self, request):
        answer = json.loads((await super().stats(request)).text)
        if self.candidate:
            c = serving_figures(model_info("wine", *self.candidate, 1.7e9 + 100))
            answer["dataTypes"]["wine"]["candidate"] = {
                **{k: v for k, v in c.model_dump(mode="json").items() if k != "previous"},
                "invocations": 40, "strategy": "Canary", "percent": 10.0}
        return web.json_response(h.Stats.model_validate(answer).model_dump(mode="json"))


@pytest_asyncio.fixture
async def job():
    try:
        host = OwnHost.make()
    except Unavailable as e:
        pytest.skip(f"no test host for the API server's proxy to reach: {e}")
    fake = StandIn()
    app = web.Application()
    for path, handler in (("/readyz", fake.readyz), ("/stats", fake.stats), ("/models", fake.models)):
        app.router.add_get(path, handler)
    app.router.add_post("/executors", fake.scale)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        port = free_port()
        for address in ("127.0.0.1", host.ours):  # the operator's endpoint, and the proxied path
            await web.TCPSite(runner, address, port).start()
        await asyncio.to_thread(host.forward, METRICS_PORT, port)
        fake.address, fake.url, fake.runner = host.address, f"http://127.0.0.1:{port}", runner
        yield fake
    finally:
        await runner.cleanup()
        host.remove()


async def plugin(kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """kubectl scorestream ARGS, as a user runs it: kubectl finds the plugin on PATH. In a thread:
    the stand-in job answers on this test's event loop, the proxied requests included."""
    return await asyncio.to_thread(_plugin, kubeconfig, *args, check=check)


def _plugin(kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    from harness import helm as tools

    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "KUBECONFIG": str(kubeconfig)}
    res = subprocess.run([str(tools.ensure("kubectl")), "scorestream", *args], capture_output=True, text=True,
                         timeout=120, env=env)
    # Shown with the test's output (pytest -rP): the plugin's sample output in docs/kubectl-plugin.md is this.
    print(f"$ kubectl scorestream {' '.join(args)}\n{res.stdout}{res.stderr}(exit {res.returncode})\n")
    if check and res.returncode != 0:
        raise AssertionError(f"kubectl scorestream {' '.join(args)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res


def models_messages(broker, topic: str) -> list[tuple[str, dict | None]]:
    """The models topic as (key, descriptor or None for a tombstone), in order."""
    return [(m.key().decode(), json.loads(m.value()) if m.value() else None)
            for m in read_topic(broker.bootstrap, topic, idle=1.5)]


def status(api) -> dict:
    return obj(api, MS, "wine").get("status") or {}


async def proxied_driver(api, job) -> None:
    """The driver pod's IP is this machine's, where the stand-in listens (see the module's doc)."""
    pod = await driver_pod(api)
    api.patch("v1/pods", pod["metadata"]["name"], {"status": {"podIP": job.address, "podIPs": [{"ip": job.address}]}},
              subresource="status")

    def proxied():
        eps = obj(api, "v1/endpoints", "wine-driver") or {}
        return any(a.get("ip") == job.address for ss in eps.get("subsets") or [] for a in ss.get("addresses") or [])

    await until(proxied, timeout=30, what="the driver Service's endpoint at the stand-in's address")


def canary(topics, broker, name: str, version: str):
    return resource(topics, broker, model={"name": name, "version": version, "format": "pmml",
                                           "uri": f"https://models.example/{name}-{version}.pmml"},
                    rollout={"strategy": "Canary", "canary": {"percent": 10, "minRecords": 10**6, "promoteAfter": "60m"}})


async def test_status_models_stats_through_the_service_proxy(api, operator, job, broker, topics, kube):
    create_topics(broker.bootstrap, {topics["dataTopic"]: 2})
    await apply(api, resource(topics, broker))
    await proxied_driver(api, job)
    await until(lambda: condition(api, "wine", "Ready").get("status") == "True", what="Ready")
    admin = kube.admin_config

    out = (await plugin(admin, "status", "wine", "-n", api.ns)).stdout
    assert f"ModelServing {api.ns}/wine: Running" in out and "Ready" in out and "serving wine-tree 1" in out
    assert "Replicas:  2 running" in out and "Recent events:" in out
    as_json = json.loads((await plugin(admin, "status", "wine", "-n", api.ns, "-o", "json")).stdout)
    assert as_json["phase"] == "Running" and as_json["model"]["current"]["version"] == "1"

    # /models and /stats come from the stand-in, through the API server's proxy.
    job.rejected = [h.Rejection(model="wine-bad:9", dataType="wine", reason="PMML does not parse", at=1.7e9)]
    models = (await plugin(admin, "models", "wine", "-n", api.ns)).stdout
    assert "wine-tree 1 (pmml" in models and "wine-bad:9 (wine): PMML does not parse" in models
    as_yaml = yaml.safe_load((await plugin(admin, "models", "wine", "-n", api.ns, "-o", "yaml")).stdout)
    assert as_yaml["job"]["serving"]["wine"]["digest"] == "0" * 64
    stats = (await plugin(admin, "stats", "wine", "-n", api.ns)).stdout
    assert "wine-tree 1" in stats and "Totals:" in stats
    assert json.loads((await plugin(admin, "stats", "wine", "-n", api.ns, "-o", "json")).stdout)["totals"]["executors"] == 2

    # Errors say what is wrong: a resource that is not there ...
    missing = await plugin(admin, "status", "nope", "-n", api.ns, check=False)
    assert missing.returncode == 1 and "not found" in missing.stderr and "Traceback" not in missing.stderr
    # ... a user whose RBAC lets them look but not patch ...
    viewer = _viewer_kubeconfig(api, kube)
    assert "Running" in (await plugin(viewer, "status", "wine", "-n", api.ns)).stdout
    assert "wine-tree 1" in (await plugin(viewer, "models", "wine", "-n", api.ns)).stdout
    refused = await plugin(viewer, "restart", "wine", "-n", api.ns, check=False)
    assert refused.returncode == 1 and "forbidden by RBAC" in refused.stderr
    # ... and a job that does not answer: what status has is still shown, with exit code 3.
    await job.runner.cleanup()
    gone = await plugin(admin, "models", "wine", "-n", api.ns, check=False)
    assert gone.returncode == 3 and "unreachable" in gone.stdout and "service proxy" in gone.stdout
    assert "History (status.model.history" in gone.stdout and "wine-tree 1" in gone.stdout


def _viewer_kubeconfig(api, kube) -> Path:
    """A user allowed to read ModelServings, their Events and the driver's service proxy, not to patch."""
    from harness.cluster import kubeconfig

    api.create("v1/serviceaccounts", {"metadata": {"name": "viewer"}})
    api.create("rbac.authorization.k8s.io/v1/roles", {"metadata": {"name": "viewer"}, "rules": [
        {"apiGroups": [naming.GROUP], "resources": [s.PLURAL], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["services/proxy"], "verbs": ["get"]}]})
    api.create("rbac.authorization.k8s.io/v1/rolebindings", {
        "metadata": {"name": "viewer"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "viewer"},
        "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": api.ns}]})
    path = kube.dir / f"viewer-{api.ns}.kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig(kube.server, kube.dir / "ca.crt", token=kube.token(api.ns, "viewer"),
                                              namespace=api.ns)))
    return path


@pytest.mark.spark
@pytest.mark.timeout(900)
async def test_promote_rollback_abort_and_restart_act_on_the_real_job(api, broker, serving, artifacts, tmp_path, kube):
    """The controls with the real job (Spark local, a process standing in for the driver pod, read
    by the operator at its endpoint): what the job serves is what each command asked for, the
    models topic carries each act once, and the history, Events and the plugin's own views say it."""
    from test_rollout import model, model_dirs, rolled_out

    from harness.operator import Operated

    s_ = serving(partitions=1)
    admin, ns, models_topic = kube.admin_config, api.ns, s_.resource_topics["modelsTopic"]
    async with Operated(api, observeInterval=2, rolloutPoll=0.25) as run:
        body = resource(s_.resource_topics, broker, model=model(artifacts, "tree", 1))
        body["spec"]["input"] = {"format": "json"}
        body["spec"]["spark"]["triggerInterval"] = "500ms"
        body["spec"]["rollout"] = {"strategy": "Canary", "canary": {"percent": 20, "minRecords": 10**6,
                                                                     "promoteAfter": "60m"}}
        await apply(api, body)
        job = await run.start_job(tmp_path, artifacts=model_dirs(artifacts))
        await rolled_out(api, "wine-tree", 1)

        def job_models():
            m = job.get("/models")
            cand = m["candidates"].get("wine")
            return (m["serving"]["wine"]["version"], cand and cand["version"])

        nothing = await plugin(admin, "promote", "wine", "-n", ns, check=False)
        assert nothing.returncode == 1 and "no candidate is on trial" in nothing.stderr

        # A canary of wine-linear 2 the rules would not promote for an hour: promoted now, by request.
        body["spec"]["model"] = model(artifacts, "linear", 2)
        await apply(api, body)
        await until(lambda: job_models() == ("1", "2"), timeout=120, what="the job trying candidate 2")
        await until(lambda: "records" in status(api)["model"]["rollout"]["candidate"], what="the candidate's figures")
        assert "Candidate: wine-linear 2 (Canary 20%, Analyzing" in (await plugin(admin, "status", "wine", "-n", ns)).stdout
        out = (await plugin(admin, "promote", "wine", "-n", ns, "--wait", "60")).stdout
        assert "promote of wine-linear 2 requested" in out
        await until(lambda: job_models() == ("2", None), timeout=120, what="the job serving 2, no candidate")
        await rolled_out(api, "wine-linear", 2)
        sent = models_messages(broker, models_topic)
        published = [d for k, d in sent if not k.endswith("/candidate") and d]
        assert (published[-1]["name"], published[-1]["version"]) == ("wine-linear", "2")
        assert not published[-1].get("candidate")
        assert sent[-1][0].endswith("candidate") and sent[-1][1] is None  # the candidate key cleared
        assert events(api, "CandidatePromotedByRequest")
        # Acted on once: more reconciles publish nothing more.
        await until(lambda: status(api)["model"]["rollout"]["phase"] == "Promoted", timeout=60, what="Promoted")
        await asyncio.sleep(3)
        assert len(models_messages(broker, models_topic)) == len(sent)

        out = (await plugin(admin, "rollback", "wine", "-n", ns, "--to", "1", "--wait", "60")).stdout
        assert "rollback to wine-tree 1 requested" in out
        back = models_messages(broker, models_topic)[-1]
        assert not back[0].endswith("candidate") and (back[1]["name"], back[1]["version"]) == ("wine-tree", "1")
        assert back[1]["location"] == artifacts["tree"]["uri"]
        await until(lambda: job_models() == ("1", None), timeout=120, what="the job serving 1 again")
        await until(lambda: condition(api, "wine", "ModelReady").get("reason") == "RolledBackByRequest",
                    timeout=60, what="RolledBackByRequest")
        outcomes = {e["version"]: e["outcome"] for e in status(api)["model"]["history"]}
        assert outcomes["1"] == "Serving" and outcomes["2"] == "RolledBack", outcomes
        # No service proxy reaches this job (exit 3): what status holds is shown all the same.
        assert "pinned to wine-tree 1" in (await plugin(admin, "models", "wine", "-n", ns, check=False)).stdout
        count = len(models_messages(broker, models_topic))
        await asyncio.sleep(3)
        assert len(models_messages(broker, models_topic)) == count  # spec.model (2) is not published again

        # A canary of wine-shallow 3 (spec.model changed: the rollback's hold ends), aborted by request.
        body["spec"]["model"] = model(artifacts, "shallow", 3)
        await apply(api, body)
        await until(lambda: job_models() == ("1", "3"), timeout=120, what="the job trying candidate 3")
        assert "abort of wine-shallow 3 requested" in (await plugin(admin, "abort", "wine", "-n", ns, "--wait", "60")).stdout
        last = models_messages(broker, models_topic)[-1]
        assert last[0].endswith("candidate") and last[1] is None
        await until(lambda: job_models() == ("1", None), timeout=120, what="candidate 3 withdrawn")
        await until(lambda: condition(api, "wine", "ModelReady").get("reason") == "RolledBack", timeout=60,
                    what="RolledBack")
        assert events(api, "CandidateAborted")
        status_out = (await plugin(admin, "status", "wine", "-n", ns)).stdout
        assert "serving wine-tree 1, desired wine-shallow 3" in status_out and "aborted by request" in status_out

        # A request written by hand with nothing to act on is answered (acted: false, a Warning), not retried.
        api.patch(MS, "wine", {"metadata": {"annotations": {naming.PROMOTE_ANNOTATION: "by-hand-1"}}})
        answered = await until(lambda: (status(api).get("controls") or {}).get("promote") == "by-hand-1"
                               and status(api)["controls"], timeout=60, what="the request answered")
        assert answered["acted"] is False and "no candidate is on trial" in answered["message"]
        assert (await until(lambda: events(api, "ControlIgnored"), what="ControlIgnored"))[0]["type"] == "Warning"

        # restart: spec.restartNonce rolls the driver's pod template.
        sts = lambda: obj(api, "apps/v1/statefulsets", "wine-driver")["spec"]["template"]["metadata"]["annotations"]
        before_hash = sts()[CONFIG_HASH_ANNOTATION]
        assert "spec.restartNonce=1" in (await plugin(admin, "restart", "wine", "-n", ns)).stdout
        await until(lambda: sts()[CONFIG_HASH_ANNOTATION] != before_hash, timeout=60, what="the driver's template rolled")
        assert obj(api, MS, "wine")["spec"]["restartNonce"] == 1
        assert job.stop() == 0


def _plain(api, name: str = "wine") -> dict:
    """A ModelServing for the plugin to look at and patch: no operator or broker needed for that."""
    from harness.operator import EXAMPLE

    body = yaml.safe_load(yaml.safe_dump(EXAMPLE))
    body["metadata"] = {"name": name, "namespace": api.ns}
    return body


async def test_version_list_suspend_resume_check(api, kube):
    admin = kube.admin_config
    assert (await plugin(admin, "version")).stdout.startswith("kubectl-scorestream ")
    assert "No ModelServings found in namespace" in (await plugin(admin, "list", "-n", api.ns)).stdout
    api.create(MS, _plain(api))
    api.create(MS, _plain(api, "beer"))

    listed = (await plugin(admin, "list", "-n", api.ns)).stdout.splitlines()
    assert listed[0].split() == ["NAME", "READY", "PHASE", "REASON", "MODEL", "REPLICAS", "LAG"]
    assert [line.split()[0] for line in listed[1:]] == ["beer", "wine"]
    everywhere = (await plugin(admin, "list", "-A")).stdout.splitlines()
    assert everywhere[0].split()[0] == "NAMESPACE"
    assert {(r.split()[0], r.split()[1]) for r in everywhere[1:]} >= {(api.ns, "beer"), (api.ns, "wine")}
    rows = json.loads((await plugin(admin, "list", "-n", api.ns, "-o", "json")).stdout)
    assert [(r["name"], r["ready"]) for r in rows] == [("beer", "Unknown"), ("wine", "Unknown")]

    # status --check: non-zero while not Ready, zero once Ready (status written as the operator would).
    not_ready = await plugin(admin, "status", "wine", "-n", api.ns, "--check", check=False)
    assert not_ready.returncode == 4, not_ready.stderr
    api.patch(MS, "wine", {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True", "reason": "Serving", "message": "the job is scoring records",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, subresource="status")
    assert (await plugin(admin, "status", "wine", "-n", api.ns, "--check")).returncode == 0

    assert "suspend requested" in (await plugin(admin, "suspend", "wine", "-n", api.ns)).stdout
    assert obj(api, MS, "wine")["spec"]["suspend"] is True
    assert "already suspended" in (await plugin(admin, "suspend", "wine", "-n", api.ns)).stdout
    refused = await plugin(admin, "restart", "wine", "-n", api.ns, check=False)
    assert refused.returncode == 1 and "is suspended: a restart does nothing" in refused.stderr
    assert not obj(api, MS, "wine")["spec"].get("restartNonce")
    assert "resume requested" in (await plugin(admin, "resume", "wine", "-n", api.ns)).stdout
    assert obj(api, MS, "wine")["spec"]["suspend"] is False

    bad = await plugin(admin, "promote", "wine", "-n", api.ns, "--timeout=soon", check=False)
    assert bad.returncode == 2 and "'soon' is not a duration" in bad.stderr

def test_names_and_reasons_reach_the_terminal_without_their_escapes(capsys):
    """#30 LOW: a model name or a rejection reason is a tenant's or a models-topic writer's text;
    the human output escapes control characters (colours, cursor moves, a title change, bidi)."""
    from scorestream.tools import kubectl_plugin as plugin

    evil = "tree\x1b]0;owned\x07\x1b[2J\u202e1.0\x9b31m"
    shown = plugin.printable(f"serving {evil}\nreason:\t{evil}")
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown and "\x9b" not in shown
    assert shown == ("serving tree\\x1b]0;owned\\x07\\x1b[2J\\u202e1.0\\x9b31m\n"
                     "reason:\ttree\\x1b]0;owned\\x07\\x1b[2J\\u202e1.0\\x9b31m")
    assert plugin.printable("wine · ümlaut 🍷") == "wine · ümlaut 🍷"
