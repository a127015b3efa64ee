"""What a tenant writes costs the shared operator bounded work and memory (issue 48): verification
samples parsed in linear, bounded work and once per content, PKCS#12 keystores checked and held
in memory, the operator's own Kafka clients capped against a broker that answers with huge frames.

Every test runs the real functions; the figures they print are memory and file counts, never time.
"""

from __future__ import annotations

import base64
import os
import sys
import tempfile
import tracemalloc
import urllib.parse
from pathlib import Path

import pytest

from scorestream.api import verification as v
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.api.verification import BadSample, read_records
from scorestream.operator import publish, strimzi

from harness.strimzi import Pki, secret_object

SPEC = {"dataType": "wine", "kafka": {"bootstrapServers": "k:9092", "dataTopic": "d", "outputTopic": "o",
                                      "deadLetterTopic": "x"},
        "spark": {"image": "i"}, "model": {"name": "m", "version": "1", "format": "pmml", "uri": "/models/m.pmml"}}


def _csv_uri(text: str) -> str:
    return "data:text/csv;base64," + base64.b64encode(text.encode()).decode()


# --- verification samples -------------------------------------------------------------------------

def test_a_wide_csv_header_is_refused_by_its_column_count():
    """52,000 distinct column names in a 262,144-character data: URI (the CRD's bound) were 17 s of
    the event loop per reconcile (a quadratic repeat check), then accepted."""
    header = ",".join(f"c{i}" for i in range(52_000))
    uri = "data:text/csv," + urllib.parse.quote(header + "\n" + ",".join("1" * 52_000) + "\n")[:262_000]
    text = publish.decode_data_uri(uri).decode()
    with pytest.raises(BadSample, match=f"line 1 has more than {v.MAX_SAMPLE_COLUMNS} fields"):
        read_records(text, "spec.model.verification", uri)
    # At the bound, the repeat check is linear: a repeat far in is still found, and named by column.
    names = [f"c{i}" for i in range(v.MAX_SAMPLE_COLUMNS)]
    with pytest.raises(BadSample, match=f"header column {v.MAX_SAMPLE_COLUMNS} repeats"):
        read_records(",".join(names[:-1] + ["c0"]) + "\n" + ",".join("1" * v.MAX_SAMPLE_COLUMNS), "s")
    (record,) = read_records(",".join(names) + "\n" + ",".join("1" * v.MAX_SAMPLE_COLUMNS), "s")
    assert len(record) == v.MAX_SAMPLE_COLUMNS


@pytest.mark.parametrize("name", [None, "x.csv", "x.jsonl"])
def test_a_sample_of_newlines_is_refused_without_a_list_of_its_lines(name):
    """16 MiB of newlines: `splitlines` built a list of 16 million entries (128 MiB of pointers);
    the lines are now read one at a time and their number is bounded. Prints the peak."""
    text = "\n" * (16 * 1024 * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(BadSample, match=f"more than {v.MAX_SAMPLE_LINES} lines"):
            read_records(text, "sample", name)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(f"\nread_records on 16 MiB of newlines ({name}): peak {peak / 1024:.0f} KiB traced")
    assert peak < 1024 * 1024
    with pytest.raises(BadSample, match=f"more than {v.MAX_SAMPLE_CHARS} characters"):
        read_records(" " * (v.MAX_SAMPLE_CHARS + 1), "sample")


def test_a_deeply_nested_json_sample_line_is_a_bad_sample_not_a_recursion_error():
    uri = "data:application/json;base64," + base64.b64encode(b"[" * 190_000).decode()
    spec = s.ModelServingSpec.model_validate({**SPEC, "model": {**SPEC["model"], "verification": {"uri": uri}}})
    with pytest.raises(ValueError, match="line 1 is nested too deeply"):
        publish.descriptor(spec)


def test_a_sample_is_parsed_once_per_content_and_the_cache_is_bounded():
    def spec(rows: int) -> s.ModelServingSpec:
        text = "a,b\n" + "".join(f"{i},{i}.5\n" for i in range(rows))
        return s.ModelServingSpec.model_validate({**SPEC, "model": {**SPEC["model"], "verification": {"uri": _csv_uri(text)}}})

    import asyncio

    publish._samples.clear()
    asyncio.run(publish.prepare(spec(3)))  # the reconcile's parse, in a thread
    assert len(publish._samples) == 1
    first = publish.descriptor(spec(3))
    again = publish.descriptor(spec(3))
    assert len(publish._samples) == 1 and first == again and len(first.verification.records) == 3
    assert again.verification is first.verification  # parsed once
    # A sample that does not parse is remembered, and raised where the descriptor is made.
    bad = s.ModelServingSpec.model_validate({**SPEC, "model": {**SPEC["model"], "verification": {
        "uri": _csv_uri("a,a\n1,2\n")}}})
    asyncio.run(publish.prepare(bad))
    for _ in range(2):
        with pytest.raises(ValueError, match="header column 2 repeats"):
            publish.descriptor(bad)
    assert len(publish._samples) == 2
    for rows in range(publish.SAMPLE_CACHE_SIZE + 10):
        publish.descriptor(spec(rows))
    print(f"\nsample cache: {len(publish._samples)} entries after {publish.SAMPLE_CACHE_SIZE + 11} distinct samples")
    assert len(publish._samples) == publish.SAMPLE_CACHE_SIZE
    # Wide samples: the cache keeps at most SAMPLE_CACHE_CELLS parsed fields.
    row = ",".join("1" * v.MAX_SAMPLE_COLUMNS)
    header = ",".join(f"c{i}" for i in range(v.MAX_SAMPLE_COLUMNS))
    for n in range(30):
        text = header + "\n" + "\n".join([row] * (60 + n)) + "\n"
        publish.descriptor(s.ModelServingSpec.model_validate(
            {**SPEC, "model": {**SPEC["model"], "verification": {"uri": _csv_uri(text)}}}))
    cells = sum(c for _, _, c in publish._samples.values())
    print(f"after 30 samples of 60-89 x {v.MAX_SAMPLE_COLUMNS} fields: {len(publish._samples)} kept, {cells} fields")
    assert cells <= publish.SAMPLE_CACHE_CELLS


# --- PKCS#12 keystores ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def user_p12(tmp_path_factory) -> dict[str, bytes]:
    return Pki(tmp_path_factory.mktemp("pki"), "my-cluster").tls_user_secret("alice")


def _p12_spec() -> s.ModelServingSpec:
    return s.ModelServingSpec.model_validate({**SPEC, "kafka": {
        **SPEC["kafka"], "tls": {"trustedCertificates": [{"secretName": "ca", "certificate": "ca.crt"}]},
        "authentication": {"type": "tls", "keystore": {"secretName": "alice"}}}})


def _credentials(secret: dict[str, bytes]):
    return strimzi.operator_credentials(_p12_spec().kafka, "ml", {"ca": secret_object("ca", "ml", secret),
                                                                    "alice": secret_object("alice", "ml", secret)})


def test_keystores_are_checked_and_held_in_memory_not_written_to_tmp(user_p12):
    """Every distinct keystore was written to /tmp/scorestream-keystores and never deleted. Now
    a keystore is checked before it takes memory, held in an anonymous file, and at most
    KEYSTORE_CACHE_SIZE are held; librdkafka (a real client) reads one through its /proc path."""
    from confluent_kafka import KafkaException, Producer

    kept = Path(tempfile.gettempdir()) / "scorestream-keystores"
    before = sorted(kept.iterdir()) if kept.exists() else []
    creds = _credentials(user_p12)
    assert creds.keystore_location.startswith("/proc/self/fd/")
    settings = {"bootstrap.servers": "127.0.0.1:9", **creds.librdkafka()}
    Producer(settings).flush(0)  # librdkafka reads the keystore as it builds the client
    with pytest.raises(KafkaException, match="ssl.keystore"):
        Producer({**settings, "ssl.keystore.password": "wrong"})
    for refused, why in ((b"\0" * (strimzi.MAX_KEYSTORE_BYTES + 1), "larger than a keystore"),
                         (b"-----BEGIN CERTIFICATE-----\n", "not a PKCS#12 keystore"),
                         (user_p12["user.p12"][:-1], "not a PKCS#12 keystore"),
                         (user_p12["user.p12"] + b"\0", "not a PKCS#12 keystore")):
        with pytest.raises(strimzi.CredentialsError, match=why) as e:
            _credentials({**user_p12, "user.p12": refused})
        assert "Secret ml/alice key 'user.p12'" in str(e.value)
    fds = len(os.listdir("/proc/self/fd"))
    # Distinct keystores (each a valid DER PFX: a different trailing byte in a padded copy would
    # not be; the same bytes with another length prefix are not either), so vary the content.
    p12 = user_p12["user.p12"]
    for i in range(strimzi.KEYSTORE_CACHE_SIZE + 20):
        variant = _with_extra_octets(p12, i)
        _credentials({**user_p12, "user.p12": variant})
    grown = len(os.listdir("/proc/self/fd")) - fds
    print(f"\n{strimzi.KEYSTORE_CACHE_SIZE + 21} distinct keystores: {len(strimzi._keystores)} held, "
          f"{grown} more open descriptors")
    assert len(strimzi._keystores) == strimzi.KEYSTORE_CACHE_SIZE and grown <= strimzi.KEYSTORE_CACHE_SIZE
    assert (sorted(kept.iterdir()) if kept.exists() else []) == before


def _with_extra_octets(p12: bytes, i: int) -> bytes:
    """A distinct DER PFX: the outer SEQUENCE with an extra OCTET STRING after its members (the
    structure check reads the envelope and the version; librdkafka is not asked to read these)."""
    extra = b"\x04\x04" + i.to_bytes(4, "big")
    head = 2 + (p12[1] & 0x7F if p12[1] >= 0x80 else 0)
    body = p12[head:] + extra
    n = len(body)
    length = bytes([n]) if n < 0x80 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, "big")
    return b"\x30" + length + body


# --- deep objects and the operator's process ------------------------------------------------------

def _nested(levels: int) -> dict:
    """{"a": {"a": ... {"a": 1}}}: `levels` objects, built without recursion."""
    node: object = 1
    for _ in range(levels):
        node = {"a": node}
    return node  # type: ignore[return-value]


def test_a_pod_template_nested_past_the_bound_is_an_invalid_spec_found_without_recursion():
    """The operator's walks of a template (merge, copies, YAML) recurse: a spec is refused before
    them past MAX_FREE_FORM_DEPTH levels, by a check that does not recurse itself."""
    body = {**SPEC, "driver": {"podTemplate": {"spec": {"affinity": _nested(9_990)}}}}
    with pytest.raises(ValueError, match=f"spec\n  Value error, nests objects and lists more than {s.MAX_FREE_FORM_DEPTH}"):
        s.ModelServingSpec.model_validate(body)
    deepest = {"affinity": _nested(s.MAX_FREE_FORM_DEPTH - 1)}
    spec = s.ModelServingSpec.model_validate({**SPEC, "executor": {"podTemplate": {"spec": deepest}}})
    from scorestream.operator import podtemplate

    pod = podtemplate.executor_pod(spec.executor.pod_template, "wine", "executor", {}, {})
    assert s.free_form_depth_error(pod["spec"]["affinity"]) is None


@pytest.mark.timeout(300)
async def test_the_operator_survives_an_object_nested_as_deep_as_the_api_server_takes(api):
    """A ModelServing whose pod template nests 9,000 levels (the API server's JSON decoder takes
    10,000, and its managedFields mirror the nesting): kopf's watch decodes it with json.loads and
    copies it for its diff base, each past Python's default recursion limit, which stopped the
    watcher and the operator. The real operator process now reads it, refuses it as an invalid
    spec, and goes on serving the namespace's other resource. So for a verification sample too
    wide to read."""
    from harness.operator import MS, Operator, apply, condition, obj, operator_config, resource, until
    from scorestream.tools.local.broker import free_port
    from types import SimpleNamespace

    nobody = SimpleNamespace(bootstrap=f"127.0.0.1:{free_port()}")
    names = {"dataTopic": "records", "outputTopic": "predictions", "deadLetterTopic": "dlq", "modelsTopic": "models"}
    deep = resource(names, nobody, name="deep")
    deep["spec"]["driver"] = {"podTemplate": {"spec": {"affinity": _nested(9_000)}}}
    op = Operator(api, operator_config(api, observeInterval=1))
    await op.start()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(12_000)  # this process's own json, writing and reading the object
    try:
        await apply(api, deep)
        stored = obj(api, MS, "deep")
        assert stored is not None, "the API server took the object"
        await until(lambda: condition(api, "deep", "Degraded").get("reason") == "InvalidSpec", timeout=60,
                    what="the deep resource refused as an invalid spec")
        assert f"more than {s.MAX_FREE_FORM_DEPTH} levels" in condition(api, "deep", "Degraded")["message"]
        # A verification sample the schema takes and the operator cannot read (found by
        # tests/long/test_operator_fuzz.py: it was an exception retried forever).
        wide = resource(names, nobody, name="wide")
        wide["spec"]["model"]["verification"] = {"uri": _csv_uri(",".join(f"c{i}" for i in range(2000)) + "\n")}
        await apply(api, wide)
        await until(lambda: condition(api, "wide", "Degraded").get("reason") == "InvalidSpec", timeout=60,
                    what="the wide sample refused as an invalid spec")
        assert "more than 1024 fields" in condition(api, "wide", "Degraded")["message"]
        await apply(api, resource(names, nobody, name="wine"))
        await until(lambda: condition(api, "wine", "Degraded").get("reason") == "KafkaUnreachable", timeout=60,
                    what="the other resource reconciled after it")
        assert op.running and "RecursionError" not in op.log and " failed; retrying in " not in op.log, op.log[-4000:]
    except AssertionError:
        print(op.log[-6000:])
        raise
    finally:
        await op.stop()
        api.delete(MS, "deep")  # while this process can still read it back
        api.delete(MS, "wide")
        sys.setrecursionlimit(limit)


# --- the operator's Kafka clients against a broker that answers with huge frames ------------------

class HugeFrameBroker:
    """A loopback socket server that speaks just enough of Kafka's protocol: it reads each request's
    frame (size, api key, version, correlation id, client id, and a Metadata request's topic
    count), answers ApiVersions with Metadata v0-4, and answers anything else with a frame that
    announces `announce` bytes and sends them (zeros)."""

    def __init__(self, announce: int):
        import socket
        import threading

        self.announce, self.requests = announce, []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        import struct
        import threading

        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:  # closed by close()
                return
            threading.Thread(target=self._answer, args=(conn, struct), daemon=True).start()

    def _answer(self, conn, struct) -> None:
        def exactly(n: int) -> bytes:
            out = b""
            while len(out) < n:
                chunk = conn.recv(n - len(out))
                if not chunk:
                    raise ConnectionError
                out += chunk
            return out

        with conn:
            try:
                while not self.stop.is_set():
                    (size,) = struct.unpack(">i", exactly(4))
                    frame = exactly(size)
                    key, version, correlation, client_len = struct.unpack(">hhih", frame[:10])
                    topics = struct.unpack(">i", frame[10 + client_len:14 + client_len])[0] if key == 3 else None
                    self.requests.append((key, version, topics))
                    if key == 18:  # ApiVersions (v3, flexible): Metadata v0-4 and itself are spoken here
                        body = struct.pack(">hb", 0, 3) + struct.pack(">hhhb", 18, 0, 3, 0) \
                            + struct.pack(">hhhb", 3, 0, 4, 0) + struct.pack(">ib", 0, 0)
                        conn.sendall(struct.pack(">ii", 4 + len(body), correlation) + body)
                        continue
                    conn.sendall(struct.pack(">ii", self.announce, correlation))
                    zeros = bytes(1024 * 1024)
                    left = self.announce - 4
                    while left > 0 and not self.stop.is_set():
                        conn.sendall(zeros[:min(left, len(zeros))])
                        left -= len(zeros)
            except (ConnectionError, OSError):
                return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        self.thread.join(5)


_PEAK_CHILD = r'''
import json, sys
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import topics

def kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])

spec = s.ModelServingSpec.model_validate(json.loads(sys.argv[1]))
before = kib("VmRSS:")
report = topics.check_data_topic(spec.kafka, json.loads(sys.argv[2]), timeout=8.0)
print(json.dumps({"before": before, "peak": kib("VmHWM:"), "error": report.error}))
'''


def test_the_operators_kafka_clients_hold_at_most_a_mebibyte_of_a_brokers_answer():
    """A tenant names the brokers. One that answers the operator's Metadata request with a 90 MB
    frame (under librdkafka's default cap of 100 MB) made the operator's client buffer all of it,
    per client and connection. The operator's clients now refuse an answer over 1 MiB, and ask
    for the topics they need by name, not the cluster's every topic. Run in a process of its own
    to read its peak RSS; printed."""
    import json
    import subprocess

    announce = 90 * 1024 * 1024
    broker = HugeFrameBroker(announce)
    try:
        spec = {**SPEC, "kafka": {**SPEC["kafka"], "bootstrapServers": f"127.0.0.1:{broker.port}"}}
        # A tenant's attempt to lift the cap, which the operator's caps override.
        tenant = {"receive.message.max.bytes": str(200 * 1024 * 1024)}
        run = subprocess.run([sys.executable, "-c", _PEAK_CHILD, json.dumps(spec), json.dumps(tenant)],
                             capture_output=True, text=True, timeout=120)
    finally:
        broker.close()
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    grown = (out["peak"] - out["before"]) / 1024
    print(f"\noperator client against a {announce // 2**20} MiB Metadata answer: RSS {out['before'] / 1024:.0f} MiB "
          f"before, peak {out['peak'] / 1024:.0f} MiB (+{grown:.0f} MiB); requests seen {broker.requests[:4]}")
    assert out["error"] is not None
    metadata = [r for r in broker.requests if r[0] == 3]
    # By name (1) or brokers only (0: librdkafka's refresh on connect, when it comes first); never
    # every topic (-1, a null array in Metadata v1+).
    assert metadata and all(topics in (0, 1) for _, _, topics in metadata), broker.requests
    assert grown < 20, f"the client held {grown:.0f} MiB of the broker's answer"


# --- models-topic messages, /stats and /metrics ---------------------------------------------------

def test_a_model_messages_words_are_bounded_and_a_rejection_quotes_at_most_the_bounds():
    """One message with a 900 KB description pushed /stats past the 1 MiB the operator reads."""
    import json

    from scorestream.api import descriptor as d

    base = {"name": "tree", "version": "1", "dataType": "wine", "format": "pmml", "location": "/models/t.pmml"}
    for field, limit in (("description", d.MAX_DESCRIPTION), ("name", d.MAX_NAME), ("version", d.MAX_VERSION),
                         ("dataType", d.MAX_DATA_TYPE)):
        with pytest.raises(d.BadModelMessage, match=f"{field}: String should have at most {limit} characters") as e:
            d.decode(json.dumps({**base, field: "x" * 900_000}).encode())
        said = [e.value.name, e.value.version, e.value.data_type]
        assert all(v is None or len(v) <= d.MAX_NAME for v in said), [len(v or "") for v in said]
    with pytest.raises(d.BadModelMessage, match="inputs"):
        d.decode(json.dumps({**base, "format": "tensorflow", "inputs": ["f"] * (d.MAX_INPUTS + 1)}).encode())
    with pytest.raises(d.BadModelMessage, match="inputs.0"):
        d.decode(json.dumps({**base, "format": "tensorflow", "inputs": ["f" * (d.MAX_FIELD_NAME + 1)]}).encode())
    assert d.decode(json.dumps({**base, "description": "x" * d.MAX_DESCRIPTION}).encode()).description


def test_stats_and_metrics_stay_bounded_however_many_models_the_topic_swaps_in():
    """Every model swapped in kept its figures forever (ServingStats.infos): /stats and /metrics grew
    with the models topic. The oldest swapped-out ones are now forgotten; the serving model and
    the candidate never. Prints the sizes."""
    from prometheus_client import CollectorRegistry, generate_latest

    from scorestream.api.descriptor import MAX_DESCRIPTION, MAX_NAME, MAX_VERSION
    from scorestream.api.job_http import MAX_ANSWER_BYTES, Stats
    from scorestream.api.scoring import BatchCounts
    from scorestream.runtime import stats as st
    from scorestream.runtime.models import LoadedModel, ModelRegistry

    def model(i: int, data_type: str) -> LoadedModel:
        return LoadedModel("n" * (MAX_NAME - 6) + f"{i:06d}", "v" * (MAX_VERSION - 6) + f"{i:06d}",
                           "d" * MAX_DESCRIPTION, data_type, "pmml", ("alcohol",), f"m{i}.pmml", "d" * 64)

    registry = ModelRegistry()
    stats = st.ServingStats(registry)
    counts = BatchCounts.model_validate({"in": 1, "out": 1, "dead": 0, "nanos": 1000, "le": [0] * 13, "routes": {},
                                          "shadows": {}, "workers": ["driver"]})
    for i in range(2_000):
        registry.install(model(i, f"type-{i % 40}"))
        stats.add_batch(counts, [registry.snapshot()], 0.1)
    stats.serving_info()
    body = Stats(dataTypes=stats.serving_info(), totals=stats.totals(), kafkaErrors=[]).model_dump_json()
    metrics = CollectorRegistry()
    metrics.register(st.StatsCollector(stats))
    exposed = generate_latest(metrics)
    print(f"\n2,000 models swapped in over 40 dataTypes: {len(stats.infos)} kept, /stats {len(body) / 1024:.0f} KiB,"
          f" /metrics {len(exposed) / 1024:.0f} KiB")
    assert len(stats.infos) <= st.MAX_INFOS + 40
    assert all(sum(1 for d, _ in stats.infos if d == f"type-{t}") <= st.MAX_PREVIOUS_PER_DATA_TYPE + 1 for t in range(40))
    assert len(body) < MAX_ANSWER_BYTES
    serving = registry.snapshot().models
    assert all((dt, m.route) in stats.infos for dt, m in serving.items())


# --- the kubectl plugin ---------------------------------------------------------------------------

def test_a_tenants_newline_cannot_print_a_line_of_its_own_in_the_plugins_human_output():
    """A condition's message and a model's name are tenants' text: in the human output each stays
    on its line (JSON and YAML keep it as written)."""
    from scorestream.tools import kubectl_plugin as plugin

    forged = "fine\nConditions:\n  Ready        True    Serving\tx\r"
    ms = {"metadata": {"name": "wine", "namespace": "ml", "generation": 1, "uid": "u"}, "spec": {"replicas": 1},
          "status": {"phase": "Running", "observedGeneration": 1,
                     "conditions": [{"type": "Ready", "status": "False", "reason": "Degraded", "message": forged}],
                     "model": {"current": {"name": forged, "version": "1"}}}}
    view = plugin.status_view(ms, [])
    shown = plugin.printable(plugin.human_status(plugin.one_line(view)))
    lines = shown.splitlines()
    assert lines.count("Conditions:") == 1 and not any(line.startswith("  Ready        True") for line in lines), shown
    assert "fine\\nConditions:\\n  Ready        True    Serving\\tx\\r" in shown
    assert view["conditions"][0]["message"] == forged


# --- pod templates: environment that steers the main container ------------------------------------

def test_the_main_container_takes_no_env_that_steers_openssl_glibc_proxies_or_cloud_credentials():
    from scorestream.operator import podtemplate

    steering = ["OPENSSL_CONF", "OPENSSL_MODULES", "GCONV_PATH", "https_proxy", "HTTPS_PROXY", "http_proxy",
                "all_proxy", "NO_PROXY", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
                "AWS_EC2_METADATA_SERVICE_ENDPOINT", "GCE_METADATA_HOST", "SSLKEYLOGFILE", "SSL_CERT_FILE",
                "LOCPATH", "REQUESTS_CA_BUNDLE"]
    kept = ["AWS_REGION", "TZ", "MY_SETTING", "PROXYSQL_HOST"]
    template = {"spec": {"containers": [{"name": "executor", "env": [{"name": n, "value": "/x"} for n in steering + kept]}]}}
    spec = s.ModelServingSpec.model_validate({**SPEC, "executor": {"podTemplate": template}})
    pod = podtemplate.executor_pod(spec.executor.pod_template, "wine", "executor", {}, {})
    (main,) = [c for c in pod["spec"]["containers"] if c["name"] == "executor"]
    assert [e["name"] for e in main.get("env", [])] == kept
