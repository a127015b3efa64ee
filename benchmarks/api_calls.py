"""The operator's API calls per ModelServing per minute, at rest and during a rollout, counted in the
audit log of the tests' real API server (tests/harness/cluster.py).

One operator process (the chart's ServiceAccount, the operator's default intervals unless told),
one ModelServing, the job answered by the tests' typed stand-in (tests/harness/fake_job.py), a real broker
for the models topic. At rest: the job Ready and serving spec.model. During a rollout: spec.model
changed and published, the job not taking it over yet (ModelReady RollingOut, the rollout timer
polling).

    python benchmarks/api_calls.py [--window 60] [--observe 10] [--poll 1]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from scorestream.tools.local.broker import EmbeddedBroker, create_topics  # noqa: E402

from harness.fake_job import FakeJob, application, secret_token, served  # noqa: E402
from harness.cluster import ControlPlane  # noqa: E402
from harness.operator import Api, Operator, apply, condition, helm_install, operator_config, resource, until  # noqa: E402


def calls(kube: ControlPlane, subject: str, namespace: str) -> list[tuple[str, str]]:
    """(verb, resource[/subresource]) of each request the subject made in the namespace."""
    out = []
    for e in kube.audit(subject):
        ref = e.get("objectRef") or {}
        if ref.get("namespace") == namespace:
            out.append((e["verb"], ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")))
    return out


async def window(kube: ControlPlane, subject: str, namespace: str, seconds: float) -> collections.Counter:
    before = len(calls(kube, subject, namespace))
    await asyncio.sleep(seconds)
    return collections.Counter(calls(kube, subject, namespace)[before:])


def report(what: str, counted: collections.Counter, seconds: float) -> None:
    total = sum(counted.values())
    print(f"{what}: {total * 60 / seconds:.1f} API calls per resource per minute ({total} in {seconds:.0f} s)")
    for (verb, res), n in counted.most_common():
        print(f"    {n * 60 / seconds:6.1f}/min  {verb} {res}")


async def main(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="api-calls-"))
    with ControlPlane() as kube, EmbeddedBroker(log=work / "kafka.log") as broker:
        installed = helm_install(kube, work, "scorestream", "scorestream-system", "--set", "watch.allNamespaces=true")
        api = Api(kube, installed, "")
        api.ns = api.namespace()
        job = FakeJob()
        job.token_source = lambda: secret_token(api)
        async with served(application(job)) as job.url:
            op = Operator(api, operator_config(api, endpointTemplate=job.url, observeInterval=args.observe,
                                               rolloutPoll=args.poll))
            await op.start()
            try:
                topics = {"dataTopic": "records", "outputTopic": "predictions", "deadLetterTopic": "dlq",
                          "modelsTopic": "models"}
                create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
                body = resource(topics, broker)  # spec.model: what the stand-in serves
                await apply(api, body)
                await until(lambda: condition(api, "wine", "Ready").get("status") == "True"
                            and condition(api, "wine", "ModelReady").get("status") == "True", timeout=120,
                            what="Ready and ModelReady")
                await asyncio.sleep(args.observe * 2)  # past the first turns' writes
                report("at rest", await window(kube, installed.subject, api.ns, args.window), args.window)
                body["spec"]["model"] = {**body["spec"]["model"], "version": "2"}
                await apply(api, body)
                await until(lambda: condition(api, "wine", "ModelReady").get("reason") == "RollingOut", timeout=60,
                            what="RollingOut")
                report("during a rollout", await window(kube, installed.subject, api.ns, args.window), args.window)
            finally:
                await op.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=60.0, help="seconds counted in each state")
    parser.add_argument("--observe", type=float, default=10.0, help="the operator's observeInterval")
    parser.add_argument("--poll", type=float, default=1.0, help="the operator's rolloutPoll")
    asyncio.run(main(parser.parse_args()))
