"""Issue #15, the security review's open doors, shown against real components: models reach only
the ModelServing they are addressed to (real jobs on the test broker sharing a models topic); the
job's HTTP refuses the review's abuse and keeps serving; a canary in the Kafka Secret appears in no
object, status, Event, log line or HTTP answer across a lifecycle on the test control plane."""

from __future__ import annotations

import base64
import json
import socket
import time
import urllib.error
import urllib.request
import uuid

import pytest

from scorestream.api.descriptor import CandidateRole
from scorestream.config import DEFAULT_MODELS_TOPIC, KafkaConfig
from scorestream.tools.demo import feed, models

from harness.operator import MS, Operated, apply, condition, obj, resource, until
from harness.streaming import wait_until


def _named(d, name, version):
    return d.model_copy(update={"name": name, "version": version})


def _canary(d, percent=10.0):
    return d.model_copy(update={"candidate": CandidateRole(strategy="Canary", percent=percent)})


def _models(job) -> dict:
    m = job.get("/models")
    return {"serving": {t: (v["name"], v["version"]) for t, v in m["serving"].items()},
            "candidates": {t: (v["name"], v["version"]) for t, v in m["candidates"].items()},
            "rejected": m["rejected"]}


@pytest.mark.spark
@pytest.mark.broker
def test_two_namespaces_sharing_a_models_topic_and_a_data_type_never_install_each_others_models(
        serving, demo_models):
    # Same name, same dataType, same models topic; two namespaces.
    a, b = serving(namespace="team-a"), serving(namespace="team-b")
    b.topics["models"] = topic = a.topics["models"]
    bootstrap = a.broker.bootstrap
    a.publish(_named(demo_models["tree"], "a-tree", "1"))
    b.publish(_named(demo_models["linear"], "b-linear", "1"))
    # The report's producer (dataType key; a compacted topic refuses unkeyed records): neither job opted in.
    feed.publish_model(bootstrap, topic, _named(demo_models["shallow"], "report-keyed", "1"), to=None)

    ja, jb = a.start(), b.start()
    ja.wait_ready(), jb.wait_ready()
    # Restore: each replayed the whole topic and took its own message only, without a trace of the rest.
    assert _models(ja) == {"serving": {"wine": ("a-tree", "1")}, "candidates": {}, "rejected": []}
    assert _models(jb) == {"serving": {"wine": ("b-linear", "1")}, "candidates": {}, "rejected": []}

    # Follow: team-b's rollouts (a canary, its withdrawal, a replacement) and the report's producer
    # again, while team-a has a canary of its own that team-b's tombstone must not withdraw.
    a.publish(_canary(_named(demo_models["shallow"], "a-canary", "1")))
    wait_until(lambda: _models(ja)["candidates"] == {"wine": ("a-canary", "1")}, what="team-a's canary")
    b.publish(_canary(_named(demo_models["tree"], "b-canary", "1")))
    wait_until(lambda: _models(jb)["candidates"] == {"wine": ("b-canary", "1")}, what="team-b's canary")
    b.withdraw("wine")
    b.publish(_named(demo_models["tree"], "b-replacement", "2"))
    feed.publish_model(bootstrap, topic, _named(demo_models["linear"], "report-keyed", "2"), to=None)
    # A message addressed to team-a by its key, written after all of the above (one partition, in
    # order): once team-a serves it, it has read every message before it.
    a.publish(_named(demo_models["linear"], "a-linear", "2"))
    wait_until(lambda: _models(ja)["serving"] == {"wine": ("a-linear", "2")}, what="team-a's own replacement")
    wait_until(lambda: _models(jb)["serving"] == {"wine": ("b-replacement", "2")}, what="team-b's own replacement")
    assert _models(ja) == {"serving": {"wine": ("a-linear", "2")}, "candidates": {"wine": ("a-canary", "1")},
                           "rejected": []}, "team-b's messages and the unaddressed ones left team-a alone"
    assert _models(jb) == {"serving": {"wine": ("b-replacement", "2")}, "candidates": {}, "rejected": []}
    assert ja.stop() == 0 and jb.stop() == 0


def test_opting_in_to_unaddressed_models_needs_a_topic_of_ones_own():
    topics = {"bootstrapServers": "k:9092", "dataTopic": "d", "outputTopic": "o", "deadLetterTopic": "x"}
    with pytest.raises(ValueError, match="modelsTopic of your own"):
        KafkaConfig.model_validate({**topics, "acceptUnaddressedModels": True})
    with pytest.raises(ValueError, match="modelsTopic of your own"):
        KafkaConfig.model_validate({**topics, "modelsTopic": DEFAULT_MODELS_TOPIC, "acceptUnaddressedModels": True})
    assert KafkaConfig.model_validate({**topics, "modelsTopic": "mine", "acceptUnaddressedModels": True})
    assert not KafkaConfig.model_validate(topics).accept_unaddressed_models, "off by default"


def _raw(port: int, request: bytes, wait: float = 15.0) -> tuple[int, float]:
    """Send bytes as they are (a lying client) and return the status code and how long it took."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as conn:
        try:
            conn.sendall(request)
        except OSError:  # the server may close before a huge body is sent; its answer is still there
            pass
        answer = b""
        while b"\r\n" not in answer:
            chunk = conn.recv(4096)
            if not chunk:
                break
            answer += chunk
    return int(answer.split(b" ", 2)[1]), time.monotonic() - started


def _post(url: str, body: bytes, token: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(url + "/executors", data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


@pytest.mark.spark
@pytest.mark.broker
def test_unaddressed_models_where_opted_in_and_the_jobs_http_refuses_abuse(serving, demo_models):
    """One job: the report's unaddressed producer works where the job opts in on its own topic;
    then its HTTP endpoints refuse what is not the operator's, bounded, and it keeps serving."""
    s = serving(kafka={"acceptUnaddressedModels": True})
    bootstrap, topic = s.broker.bootstrap, s.topics["models"]
    feed.publish_model(bootstrap, topic, _named(demo_models["tree"], "keyed", "1"), to=None)  # key: wine
    job = s.start().wait_ready()
    assert _models(job)["serving"] == {"wine": ("keyed", "1")}
    feed.publish_model(bootstrap, topic, _named(demo_models["linear"], "keyed", "2"), to=None)
    wait_until(lambda: _models(job)["serving"] == {"wine": ("keyed", "2")}, what="the second keyed model")
    # Someone else's address is still not this job's.
    feed.publish_model(bootstrap, topic, _named(demo_models["shallow"], "elsewhere", "3"), to=("other", "wine"))
    s.publish(_named(demo_models["tree"], "addressed", "4"))  # its own address works as well
    wait_until(lambda: _models(job)["serving"] == {"wine": ("addressed", "4")}, what="the addressed model")
    assert _models(job)["rejected"] == []

    token = s.token_file.read_text().strip()
    control, metrics = job.config.http.port, job.config.http.metrics_port
    ok = json.dumps({"total": 1}).encode()

    # The mutating endpoint: only with the operator's token, only on the control port.
    assert _post(job.url, ok, None)[0] == 401
    assert _post(job.url, ok, "not-the-token")[0] == 401
    assert _post(job.url, ok, token + "x")[0] == 401
    assert _post(f"http://127.0.0.1:{metrics}", ok, token)[0] == 404, "the read-only port takes no POST"
    # Values bounded: the review's totals, and what is not a total.
    for body in (b'{"total": 1000000}', b'{"total": -1}', b'{"total": "2"}', b'{"total": 1.5}', b"[" * 3000):
        code, answer = _post(job.url, body, token)
        assert code == 400, (body[:20], code, answer)
    # Bodies capped and reads bounded: a bogus Content-Length is answered in the read timeout, a
    # huge one at once without reading it.
    head = (f"POST /executors HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\n").encode()
    code, took = _raw(control, head + b"Content-Length: 100\r\n\r\n{\"total\"")
    assert code == 408 and took < 10, (code, took)
    code, took = _raw(control, head + b"Content-Length: 1000000000\r\n\r\n" + b"0" * (1 << 20))
    assert code == 413 and took < 3, (code, took)
    assert _raw(control, head + b"Content-Length: -5\r\n\r\n")[0] == 413
    assert _raw(control, head + b"Content-Length: lots\r\n\r\n")[0] == 400
    # A request line that never ends does not hold a thread either.
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", control), timeout=15) as conn:
        conn.sendall(b"GET /stats HTTP/1.1\r\nHost: x\r\n")
        assert conn.recv(4096) == b"" and time.monotonic() - started < 10, "closed after the read timeout"

    # Still serving, and the operator's request goes through (local mode has no executors to change).
    code, answer = _post(job.url, ok, token)
    assert code == 409 and answer["reason"] == "local mode has no executors to change", (code, answer)
    assert job.ready()
    for port in (control, metrics):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert b"scorestream" in r.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as r:
            assert json.loads(r.read())["dataTypes"]["wine"]["name"] == "addressed"
    n = s.produce(feed.wine_records(feed.wine_rows()[:50]))
    job.wait_records(n)
    assert job.stop() == 0


# --- a canary in the Kafka Secret, across a lifecycle on the test control plane --------------------

CANARY = "canary-" + uuid.uuid4().hex  # in the Kafka Secret only: found anywhere else, it leaked

KINDS = ("v1/configmaps", "v1/services", "v1/serviceaccounts", "v1/pods", "v1/events", "v1/secrets",
         "apps/v1/statefulsets", "networking.k8s.io/v1/networkpolicies", "rbac.authorization.k8s.io/v1/roles",
         "rbac.authorization.k8s.io/v1/rolebindings", MS)


def _cluster_text(api) -> dict[str, str]:
    """Every object of the test's namespace as the API server holds it (status and Events
    included), except the Kafka Secret that holds the canary on purpose."""
    out = {}
    for key in KINDS:
        for item in api.request("GET", api.path(key))["items"]:
            if key == "v1/secrets":
                if item["metadata"]["name"] == "kafka-client":
                    continue
                # A Secret's values are base64: decoded, a canary copied into one is found too.
                item = {**item, "data": {k: base64.b64decode(v).decode(errors="replace")
                                         for k, v in (item.get("data") or {}).items()}}
            out[f"{key} {item['metadata']['name']}"] = json.dumps(item)
    return out


def _http_text(job) -> dict[str, str]:
    return {path: json.dumps(job.get(path)) if path != "/metrics" else job.get(path)
            for path in ("/stats", "/models", "/readyz", "/metrics")}


@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.timeout(900)
async def test_a_canary_in_the_kafka_secret_never_leaks(api, broker, serving, tmp_path):
    s = serving(partitions=1)
    rows = feed.wine_rows()
    folder = tmp_path / "models"
    folder.mkdir()
    for name, data in {"tree": models.tree_pmml(rows), "linear": models.linear_pmml(rows)}.items():
        (folder / f"{name}.pmml").write_bytes(data)
    (folder / "corrupt.pmml").write_bytes(models.tree_pmml(rows)[:500])

    def model(name, version):
        return {"name": f"wine-{name}", "version": str(version), "format": "pmml", "uri": (folder / f"{name}.pmml").as_uri()}

    # Where a real cluster keeps Kafka credentials; the test broker ignores SASL settings on PLAINTEXT.
    properties = f"sasl.username=scorestream\nsasl.password={CANARY}\n"
    api.create("v1/secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kafka-client"},
                              "data": {"client.properties": base64.b64encode(properties.encode()).decode()}})
    mounted = tmp_path / "client.properties"  # as the driver pod mounts it
    mounted.write_text(properties)
    seen: dict[str, str] = {}
    async with Operated(api, observeInterval=1, rolloutPoll=0.25) as run:
        body = resource(s.resource_topics, broker, model=model("tree", 1))
        body["spec"]["kafka"]["secretRef"] = {"name": "kafka-client"}
        body["spec"]["input"] = {"format": "json", "fields": list(feed.WINE_COLUMNS)}
        body["spec"]["spark"]["triggerInterval"] = "500ms"
        await apply(api, body)  # create
        job = await run.start_job(tmp_path / "job", artifacts={"modelDirs": [str(folder)]},
                                  kafka={"secretPropertiesFile": str(mounted)})

        async def step(what, done, timeout=120):
            await until(done, timeout=timeout, what=what)
            seen.update({f"{what}: {k}": v for k, v in _cluster_text(api).items()})
            seen.update({f"{what}: GET {k}": v for k, v in _http_text(job).items()})

        await step("first model", lambda: condition(api, "wine", "ModelReady").get("status") == "True")
        s.produce(feed.wine_records(rows[:200]))
        body["spec"]["model"] = model("linear", 2)  # rollout
        await apply(api, body)
        await step("rollout", lambda: (obj(api, MS, "wine")["status"]["model"].get("current") or {}).get("version") == "2")
        body["spec"]["rollout"] = {"strategy": "Canary", "canary": {"percent": 50, "minRecords": 10**9}}
        body["spec"]["model"] = model("tree", 3)  # canary: a trial that never ends here
        await apply(api, body)
        await step("canary", lambda: job.get("/models")["candidates"].get("wine", {}).get("version") == "3")
        body["spec"].pop("rollout")
        body["spec"]["model"] = {**model("corrupt", 4)}  # failure: a truncated upload, rolled back
        await apply(api, body)
        await step("failure", lambda: condition(api, "wine", "ModelReady").get("reason") == "RolledBack")
        body["spec"]["spark"]["triggerInterval"] = "1s"  # upgrade: the driver's pod template changes
        await apply(api, body)
        await step("upgrade", lambda: obj(api, MS, "wine")["status"].get("observedGeneration") == 5)
        api.delete(MS, "wine")  # delete
        await until(lambda: obj(api, MS, "wine") is None, timeout=120, what="the resource gone")
        seen.update({f"deleted: {k}": v for k, v in _cluster_text(api).items()})
        seen["job log"] = job.log_path.read_text(errors="replace")  # all of it, librdkafka's lines too
        job.kill()
    seen["operator log"] = run.op.log
    assert seen["operator log"] and seen["job log"]
    assert any(k.startswith("canary: v1/secrets wine-control") for k in seen), "the control Secret was looked at"
    assert any(k.startswith("failure: v1/events") for k in seen), "the Events were looked at"
    assert CANARY in mounted.read_text(), "the canary was where the job reads its secrets"
    leaked = sorted(k for k, v in seen.items() if CANARY in v)
    assert not leaked, f"the Kafka Secret's canary appeared in: {leaked}"
    print(f"\ncanary: absent from {len(seen)} texts (objects, status and Events after each of 6 steps, "
          f"the job's HTTP answers, the operator's and the job's logs: "
          f"{len(seen['operator log']) + len(seen['job log'])} bytes of log)")
