"""The operator fuzzed through the real API server (`make fuzz-operator`, 5 minutes; outside `make test`).

One tenant's namespace gets random and pathological ModelServings and Secrets, one after another,
for FUZZ_SECONDS: nesting down to the API server's limit, maps and lists past the CRD's bounds,
strings at their longest, Spark and Kafka settings that are refused, garbage and oversized model
and sample data: URIs, wide CSV samples, Secrets of random bytes where a properties file or a
keystore belongs, resources deleted and made again. Another tenant's resource (the canary) is
served by the same operator process all along, its job answered by the typed double, and its
replicas changed every half minute.

Must hold throughout: the operator process never exits, the canary stays Ready, and each change
of the canary is seen (observedGeneration) within CANARY_BOUND seconds. Printed: what was applied,
what the API server refused, what the operator refused (InvalidSpec and other reasons), the
canary's reaction times and the operator's peak memory.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import os
import random
import statistics
import string
import sys
import time
from pathlib import Path

import pytest
import requests

from scorestream.api.v1alpha1 import modelserving as s
from scorestream.tools.local.broker import create_topics

from harness.operator import MS, ApiError, Operator, apply, condition, obj, operator_config, resource, until

pytestmark = pytest.mark.broker

FUZZ_SECONDS = float(os.environ.get("FUZZ_SECONDS", "300"))
CANARY_BOUND = 10.0  # seconds from a change of the canary to the operator's having seen it
NAMES = [f"fuzz-{i}" for i in range(12)]  # reused: a bounded number of resources, each rewritten often


def _text(rng: random.Random, n: int) -> str:
    alphabet = string.ascii_letters + string.digits + "-_./:= é€\u202e\x7f"
    return "".join(rng.choice(alphabet) for _ in range(n))


def _nested(levels: int) -> dict:
    node: dict = {"leaf": 1}
    for i in range(levels):
        node = {f"k{i % 3}": node} if i % 2 else {"list": [node, None, 1.5]}
    return node


def _data_uri(payload: bytes, media: str = "application/octet-stream") -> str:
    return f"data:{media};base64,{base64.b64encode(payload).decode()}"


def _wide_csv(columns: int, rows: int) -> bytes:
    header = ",".join(f"c{i}" for i in range(columns))
    return "\n".join([header, *(",".join("1" for _ in range(columns)) for _ in range(rows))]).encode()


def mutations(rng: random.Random, topics: dict, broker) -> list:
    """Each returns (a ModelServing body, Secrets to make first) for a fuzz resource's name."""

    def base(name: str) -> dict:
        body = resource(topics, broker, name=name)
        body["spec"]["kafka"]["dataTopic"] = f"fuzz-data-{rng.randrange(4)}"
        body["spec"]["kafka"]["outputTopic"] = f"fuzz-out-{rng.randrange(4)}"
        body["spec"]["kafka"]["deadLetterTopic"] = f"fuzz-dlq-{rng.randrange(4)}"
        body["spec"]["kafka"]["modelsTopic"] = f"fuzz-models-{rng.randrange(4)}"
        return body

    def deep(name):
        body = base(name)
        depth = rng.choice([rng.randrange(1, s.MAX_FREE_FORM_DEPTH + 8), rng.randrange(100, 500)])  # 9,000: test_tenant_bounds
        body["spec"][rng.choice(["driver", "executor"])] = {"podTemplate": {"spec": {"affinity": _nested(depth)}}}
        return body, []

    def wide_labels(name):
        body = base(name)
        labels = {f"l{i}.example/{_text(rng, 5).lower()}": _text(rng, rng.randrange(0, 70)) for i in range(rng.randrange(0, 90))}
        body["spec"]["driver"] = {"podTemplate": {"metadata": {"labels": labels}}}
        return body, []

    def spark_conf(name):
        body = base(name)
        keys = ["spark.speculation", "spark.driver.extraJavaOptions", "spark.kubernetes.namespace",
                "spark.authenticate", "spark.executor.memory"]
        conf = {f"spark.fuzz.k{i}": "x" * rng.randrange(0, 4000) for i in range(rng.randrange(0, 300))}
        conf.update({k: _text(rng, 20) for k in rng.sample(keys, rng.randrange(0, len(keys)))})
        body["spec"]["spark"]["conf"] = conf
        return body, []

    def kafka_properties(name):
        body = base(name)
        keys = ["ssl.engine.factory.class", "sasl.oauthbearer.token.endpoint.url", "plugin.library.paths",
                "receive.message.max.bytes", "fetch.max.bytes", "sasl.password", "client.id"]
        body["spec"]["kafka"]["properties"] = {k: _text(rng, rng.randrange(1, 200)) for k in rng.sample(keys, 3)}
        return body, []

    def garbage_model(name):
        body = base(name)
        payload = rng.randbytes(rng.randrange(1, 200_000))
        body["spec"]["model"] = {"name": _text(rng, rng.randrange(1, 300)), "version": _text(rng, 5),
                                 "format": rng.choice(["pmml", "tensorflow"]), "uri": _data_uri(payload)}
        return body, []

    def wide_sample(name):
        body = base(name)
        csv = _wide_csv(rng.choice([3, 500, 5000, 50_000]), rng.randrange(1, 20))
        body["spec"]["model"] = {**body["spec"]["model"],
                                 "verification": {"uri": _data_uri(csv, "text/csv")}}
        return body, []

    def secret_properties(name):
        body = base(name)
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-kafka"},
                  "data": {"client.properties": base64.b64encode(rng.randbytes(rng.randrange(0, 900_000))).decode()}}
        body["spec"]["kafka"]["secretRef"] = {"name": f"{name}-kafka"}
        return body, [secret]

    def garbage_keystore(name):
        body = base(name)
        body["spec"]["kafka"].pop("secretRef", None)
        body["spec"]["kafka"]["tls"] = {"trustedCertificates": [{"secretName": f"{name}-ca", "certificate": "ca.crt"}]}
        body["spec"]["kafka"]["authentication"] = {"type": "tls", "keystore": {"secretName": f"{name}-user"}}
        size = rng.choice([0, 10, 5000, 900_000])
        ca = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-ca"},
              "data": {"ca.crt": base64.b64encode(rng.randbytes(size)).decode()}}
        user = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-user"},
                "data": {"user.p12": base64.b64encode(rng.randbytes(size)).decode(),
                         "user.password": base64.b64encode(rng.randbytes(rng.randrange(0, 100))).decode()}}
        return body, [ca, user]

    def odd_values(name):
        body = base(name)
        body["spec"]["replicas"] = rng.choice([0, 1, 999, 1000, 1001, -1])
        body["spec"]["spark"]["triggerInterval"] = rng.choice(["1s", "0ms", "99999 minutes", "soon", "1e9s", ""])
        body["spec"]["upgradeTimeout"] = rng.choice(["10m", "0s", "never"])
        body["spec"]["spark"]["image"] = rng.choice(["x" * 1024, "x" * 1025, "img:1", ""])
        return body, []

    return [deep, wide_labels, spark_conf, kafka_properties, garbage_model, wide_sample, secret_properties,
            garbage_keystore, odd_values]


def _put_secret(api, ns: str, secret: dict) -> None:
    name = secret["metadata"]["name"]
    api.delete("v1/secrets", name, namespace=ns)
    api.create("v1/secrets", secret, namespace=ns)


def _rss_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


@pytest.mark.timeout(FUZZ_SECONDS + 600)
async def test_fuzzed_specs_and_secrets_never_stop_the_operator_nor_delay_another_tenant(api, job, broker, topics):
    seed = int(os.environ.get("FUZZ_SEED") or random.randrange(2**32))  # printed: FUZZ_SEED repeats a run
    rng = random.Random(seed)
    create_topics(broker.bootstrap, {topics["dataTopic"]: 1, **{f"fuzz-data-{i}": 1 for i in range(4)}})
    tenant = api.namespace()
    api.extra.append(tenant)
    op = Operator(api, operator_config(api, namespaces=[api.ns, tenant], observeInterval=5, endpointTemplate=job.url))
    await op.start()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # this process's own json, writing and reading the deepest objects
    applied, refused_by_api, reactions, not_ready = collections.Counter(), collections.Counter(), [], []
    try:
        await apply(api, resource(topics, broker))
        await until(lambda: condition(api, "wine", "Ready").get("status") == "True", timeout=60, what="canary Ready")
        kinds = mutations(rng, topics, broker)
        started = time.monotonic()
        next_canary_change, replicas = started + 30, 1
        while time.monotonic() - started < FUZZ_SECONDS:
            name = rng.choice(NAMES)
            if rng.random() < 0.1:
                api.delete(MS, name, namespace=tenant)
                applied["deleted"] += 1
            else:
                make = rng.choice(kinds)
                body, secrets = make(name)
                body["metadata"]["namespace"] = tenant
                try:
                    for secret in secrets:
                        _put_secret(api, tenant, secret)
                    await apply(api, body)
                    applied[make.__name__] += 1
                except ApiError as e:
                    refused_by_api[f"{make.__name__} ({e.status})"] += 1
                except requests.Timeout:  # the API server's own time with the object, not the operator's
                    refused_by_api[f"{make.__name__} (no answer in 30 s)"] += 1
            assert op.running, f"the operator exited:\n{op.log[-4000:]}"
            if condition(api, "wine", "Ready").get("status") != "True":
                not_ready.append(round(time.monotonic() - started, 1))
            if time.monotonic() >= next_canary_change:
                replicas = 3 - replicas
                generation = api.patch(MS, "wine", {"spec": {"replicas": replicas}})["metadata"]["generation"]
                changed = time.monotonic()
                await until(lambda: (obj(api, MS, "wine")["status"].get("observedGeneration") or 0) >= generation,
                            timeout=120, what="the canary's change seen")
                reactions.append(time.monotonic() - changed)
                next_canary_change = time.monotonic() + 30
            await asyncio.sleep(rng.choice([0, 0.05, 0.2, 0.5]))

        reasons = collections.Counter()
        for ms in api.request("GET", api.path(MS, namespace=tenant))["items"]:
            degraded = next((c for c in ms.get("status", {}).get("conditions", []) if c["type"] == "Degraded"), {})
            reasons[degraded.get("reason") or "not Degraded"] += 1
        print(f"\noperator fuzz, seed {seed}, {FUZZ_SECONDS:.0f} s: applied {sum(applied.values())} "
              f"({dict(applied)}); refused by the API server {sum(refused_by_api.values())} ({dict(refused_by_api)}); "
              f"the tenant's resources at the end by Degraded reason: {dict(reasons)}")
        print(f"the canary: {len(reactions)} changes seen in median {statistics.median(reactions):.2f} s, "
              f"at most {max(reactions):.2f} s; not Ready at {len(not_ready)} looks; operator peak RSS "
              f"{_rss_mib(op.proc.pid, 'VmHWM'):.0f} MiB, now {_rss_mib(op.proc.pid, 'VmRSS'):.0f} MiB; "
              f"operator exited: {not op.running}")
        assert op.running
        assert not not_ready, f"the canary was not Ready at {not_ready[:10]} s"
        assert max(reactions) <= CANARY_BOUND, reactions
        # A spec the operator did not foresee is still an answer (Degraded with a reason), never an
        # exception its worker logs and retries.
        unforeseen = [line for line in op.log.splitlines() if " failed; retrying in " in line]
        assert not unforeseen, "\n".join(unforeseen[:5]) + "\n" + op.log[-4000:]
    finally:
        await op.stop()
        for name in NAMES:  # while this process can still read the deepest back
            api.delete(MS, name, namespace=tenant)
        sys.setrecursionlimit(limit)
