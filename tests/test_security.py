"""Issue #15, the security review's open doors, shown against real components: models reach only
the ModelServing they are addressed to (real jobs on the test broker sharing a models topic); the
job's HTTP refuses the review's abuse and keeps serving."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from scorestream.api.descriptor import CandidateRole
from scorestream.config import DEFAULT_MODELS_TOPIC, KafkaTopics
from scorestream.demo import feed

from streaming import wait_until


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


@pytest.mark.spark
@pytest.mark.broker
def test_the_reports_unaddressed_producer_works_where_the_job_opts_in_on_its_own_topic(serving, demo_models):
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
    assert job.stop() == 0


def test_opting_in_to_unaddressed_models_needs_a_topic_of_ones_own():
    topics = {"bootstrapServers": "k:9092", "dataTopic": "d", "outputTopic": "o", "deadLetterTopic": "x"}
    with pytest.raises(ValueError, match="modelsTopic of your own"):
        KafkaTopics.model_validate({**topics, "acceptUnaddressedModels": True})
    with pytest.raises(ValueError, match="modelsTopic of your own"):
        KafkaTopics.model_validate({**topics, "modelsTopic": DEFAULT_MODELS_TOPIC, "acceptUnaddressedModels": True})
    assert KafkaTopics.model_validate({**topics, "modelsTopic": "mine", "acceptUnaddressedModels": True})
    assert not KafkaTopics.model_validate(topics).accept_unaddressed_models, "off by default"


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
def test_the_jobs_http_refuses_abuse_and_keeps_serving(serving, demo_models):
    s = serving()
    s.publish(demo_models["tree"])
    job = s.start().wait_ready()
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
            assert json.loads(r.read())["dataTypes"]["wine"]["name"] == "tree"
    n = s.produce(feed.wine_records(feed.wine_rows()[:50]))
    job.wait_records(n)
    assert job.stop() == 0
