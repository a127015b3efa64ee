"""Model admission (issue #16): a model is scored on its verification sets before it serves.

The PMML's own <ModelVerification> and a descriptor's sample are scored by the JVM scorer's code
(dev.scorestream.jvm.Verifier), in the job's driver and in `scorestream verify` alike; a model that
fails is rejected with the records and how they failed, and the serving model keeps serving.
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path

import pytest

from scorestream.api import descriptor as descriptors
from scorestream.api import messages
from scorestream.api.verification import Sample
from scorestream.runtime import verification
from scorestream.tools import cli
from scorestream.tools.demo import feed, models
from scorestream.tools.demo.feed import WINE_COLUMNS
from scorestream.tools.local.rss import process_tree

from harness.streaming import Stream, wait_until

TAMPERED_RECORD = 3  # 1-based, as reports name records
TAMPER_BY = 0.5


@pytest.fixture(scope="module")
def verified_linear() -> bytes:
    return models.verified_linear_pmml()


@pytest.fixture(scope="module")
def tampered_linear(verified_linear) -> bytes:
    """The same model, one expected output moved by 0.5: the model no longer matches its own records."""
    text = verified_linear.decode()
    at = text.index("<InlineTable>")
    for _ in range(TAMPERED_RECORD):
        at = text.index("<row>", at + 1)
    start = text.index("<quality>", at) + len("<quality>")
    end = text.index("</quality>", start)
    return (text[:start] + repr(float(text[start:end]) + TAMPER_BY) + text[end:]).encode()


def partial_tree_pmml(threshold: float = 10.5) -> bytes:
    """A regression tree that predicts only for alcohol < threshold (returnNullPrediction): PMML4S
    answers NaN for the others, as it does for the random forest of the issue."""
    fields = "".join(f'<DataField name="{c}" optype="continuous" dataType="double"/>' for c in WINE_COLUMNS)
    mining = "".join(f'<MiningField name="{c}"/>' for c in WINE_COLUMNS)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<PMML xmlns="http://www.dmg.org/PMML-4_4" version="4.4">
  <Header/>
  <DataDictionary numberOfFields="12">{fields}<DataField name="quality" optype="continuous" dataType="double"/>
  </DataDictionary>
  <TreeModel functionName="regression" noTrueChildStrategy="returnNullPrediction">
    <MiningSchema>{mining}<MiningField name="quality" usageType="target"/></MiningSchema>
    <Node id="0"><True/>
      <Node id="1" score="5.2"><SimplePredicate field="alcohol" operator="lessThan" value="{threshold}"/></Node>
    </Node>
  </TreeModel>
</PMML>""".encode()


def wine_sample(rows) -> list[dict]:
    return [json.loads(feed.wine_json(r)) for r in rows]


# -- the PMML rule, and the reasons -----------------------------------------------------------


@pytest.mark.parametrize("expected,actual,ok", [
    ("5.0", 5.0 * (1 + 0.9e-6), True),   # within precision 1e-6, relative
    ("5.0", 5.0 * (1 + 1.1e-6), False),
    ("-5.0", -5.0 * (1 - 0.9e-6), True),  # the bounds point away from zero for negatives too
    ("0", 1e-17, True),                   # both within zeroThreshold: equal
    ("0", 1e-9, False),                   # relative precision around 0 accepts nothing else
    ("6", "6", True), ("6", "5", False),  # class labels: as text (or as numbers when both are)
])
def test_pmml_rule_precision_and_zero_threshold(expected, actual, ok):
    failure = verification._compare("ModelVerification", 1, "quality", expected, actual, 1e-6, 1e-16)
    assert (failure is None) == ok, failure


# -- scorestream verify (a JVM process, the same Verifier the driver calls) ----------------------


def _verify(capsys, *argv) -> tuple[int, str]:
    code = cli.main(["verify", *map(str, argv)])
    out = capsys.readouterr().out
    print(out)  # the report, for the record
    return code, out


@pytest.mark.jvm
def test_cli_passes_a_model_matching_its_model_verification(tmp_path, capsys, verified_linear):
    path = tmp_path / "linear.pmml"
    path.write_bytes(verified_linear)
    code, out = _verify(capsys, path)
    assert code == 0 and out.startswith("PASS") and "ModelVerification: 0 of 20 records failed" in out


@pytest.mark.jvm
def test_cli_names_the_tampered_record_and_the_difference(tmp_path, capsys, tampered_linear):
    path = tmp_path / "tampered.pmml"
    path.write_bytes(tampered_linear)
    code, out = _verify(capsys, path)
    assert code == 1 and out.startswith("FAIL")
    assert "ModelVerification: 1 of 20 records failed" in out
    assert f"record {TAMPERED_RECORD}: quality off by {-TAMPER_BY:g} (allowed" in out


@pytest.mark.jvm
def test_cli_reports_the_share_of_a_sample_without_prediction(tmp_path, capsys):
    rows = feed.wine_rows()
    path, sample = tmp_path / "partial.pmml", tmp_path / "wine.jsonl"
    path.write_bytes(partial_tree_pmml())
    sample.write_text("".join(json.dumps(r) + "\n" for r in wine_sample(rows)))
    predicted = sum(1 for r in rows if r[10] < 10.5)
    code, out = _verify(capsys, path, "--sample", sample)
    assert code == 1
    assert f"sample: {predicted} of {len(rows)} records predicted ({predicted / len(rows):.1%}, 100% required)" in out
    assert "prediction is NaN" in out
    # Asking for less than the model gives passes it.
    code, out = _verify(capsys, path, "--sample", sample, "--min-share", "0.5")
    assert code == 0


@pytest.mark.jvm
def test_a_rejection_never_quotes_what_the_driver_fetched(tmp_path, verified_linear):
    """Issue #30: a sample located at an internal endpoint, whose expectedField names a secret
    there, must not read the secret back through the rejection (status, Events, /models, log).
    The reason names the record, the field and the kind of mismatch, numeric differences only.
    A real HTTP server on loopback, allowed explicitly as a cluster admin would; the real Verifier."""
    from scorestream.config import ArtifactPolicy
    from scorestream.runtime import artifacts

    from test_artifact_safety import LOOPBACK_ALLOWED, Server

    canary, pin = "CANARY-INTERNAL-7f3a9", 424242.125
    records = wine_sample(feed.wine_rows()[:3])
    for r in records:
        r.update(apiKey=canary, pin=pin)
    records[2]["alcohol"] = canary  # a value the scorer cannot read: its error would quote it
    internal = Server()  # the endpoint only the driver reaches, allowed as an admin would
    internal.routes["/secrets.jsonl"] = (200, "".join(json.dumps(r) + "\n" for r in records).encode(), {})
    model = tmp_path / "linear.pmml"
    model.write_bytes(verified_linear)
    policy = ArtifactPolicy.model_validate(LOOPBACK_ALLOWED)
    run = verification.process_runner()
    try:
        for field, says in (("apiKey", "record 1: apiKey is not the expected label"),
                            ("pin", "record 1: pin off by ")):
            sample = Sample(location=f"{internal.url}/secrets.jsonl", expectedField=field,
                            minShare=0.5)
            report = verification.admit_pmml(model, run, label="linear:1", data_type="wine", sample=sample,
                                             fetch=lambda loc: artifacts.fetch(loc, policy), timeout=300)
            shown = report.summary() + report.model_dump_json()
            print(report.summary())
            assert not report.passed and says in report.summary()
            assert "record 3: no prediction (failed at" in report.summary()
            for secret in (canary, "CANARY", "424242", "7f3a9"):
                assert secret not in shown, (secret, shown)
    finally:
        internal.close()


@pytest.mark.jvm
def test_verification_time_is_bounded(tmp_path, capsys, verified_linear):
    """Out of time is a failure: the records not scored were not checked."""
    path, sample = tmp_path / "linear.pmml", tmp_path / "wine.jsonl"
    path.write_bytes(verified_linear)
    sample.write_text("".join(json.dumps(r) + "\n" for r in wine_sample(feed.wine_rows()) * 6))
    code, out = _verify(capsys, path, "--sample", sample, "--timeout", "0.05")
    assert code == 1 and "records scored in time" in out


@pytest.mark.jvm
def test_cli_without_anything_to_verify_says_so(tmp_path, capsys):
    path = tmp_path / "tree.pmml"
    path.write_bytes(models.tree_pmml())
    code, out = _verify(capsys, path)
    assert code == 1 and out.startswith("NOT VERIFIED")


@pytest.mark.jvm
def test_cli_on_the_reports_and_the_demos_models(tmp_path, capsys, monkeypatch, wine_fixtures, verified_linear):
    """Every model file of the report and of the demo, on all 1,599 wine rows: each yields a prediction
    for every record (and the verified linear matches its own records). What the command made in
    the temporary directory (a SavedModel folder's archive) goes with it."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    sample = tmp_path / "wine.jsonl"
    sample.write_text("".join(json.dumps(r) + "\n" for r in wine_sample(feed.wine_rows())))
    demo = {"tree.pmml": models.tree_pmml(), "linear.pmml": models.linear_pmml(), "verified-linear.pmml": verified_linear,
            "keras.zip": models.keras_savedmodel_zip(epochs=3)}
    for name, data in demo.items():
        (tmp_path / name).write_bytes(data)
    files = [wine_fixtures / "winequalityDecisionTreeClassification.pmml", wine_fixtures / "winequalityLinearRegression.pmml",
             wine_fixtures / "tf_saved", *(tmp_path / n for n in demo)]
    failed = {}
    for f in files:
        code, out = _verify(capsys, f, "--sample", sample)
        if code != 0:
            failed[f.name] = out
    assert not failed, failed
    assert list(scratch.glob("scorestream-*")) == []  # (TensorFlow leaves files of its own there)


# -- descriptors ---------------------------------------------------------------------------------


def test_rejected_messages_keep_their_identity():
    # A model type the report's enum does not have (TENSORFLOW, a frozen graph, now serves).
    unknown = messages.ModelDescriptorProto(name="graph", dataType="wine", modeltype=5, data=b"x").SerializeToString()
    with pytest.raises(descriptors.BadModelMessage) as e:
        descriptors.decode(unknown)
    assert e.value.label.startswith("graph:sha256:") and e.value.data_type == "wine" and "modeltype 5" in str(e.value)
    bad_json = json.dumps({"name": "m", "version": "7", "dataType": "wine", "format": "onnx", "data": "eA=="}).encode()
    with pytest.raises(descriptors.BadModelMessage) as e:
        descriptors.decode(bad_json)
    assert (e.value.label, e.value.data_type) == ("m:7", "wine")


def test_a_descriptor_carries_its_sample():
    d = models.descriptor("m", "1", "pmml", b"<PMML/>")
    d = d.model_copy(update={"verification": Sample(records=[{"alcohol": 9.4}], minShare=0.9)})
    back = descriptors.decode(d.to_json_bytes(), {"content-type": b"application/json"})
    assert back.verification == d.verification


# -- the job -------------------------------------------------------------------------------------


def _serving(job) -> dict:
    return job.get("/models")["serving"]["wine"]


def _rejection(job, label: str) -> dict | None:
    return next((r for r in job.get("/models")["rejected"] if r["model"] == label), None)


def _failing_models_rejected(s, job, rows, tampered: bytes, serving_version: str) -> None:
    """What fails admission, published to a job serving a verified model: each rejected with its
    reason, under its own name, while that model keeps serving."""
    report = _serving(job)["verification"]
    assert [(x["set"], x["records"], x["failed"]) for x in report["sets"]] == [("ModelVerification", 20, 0)]
    assert 0 < report["seconds"] < report["timeoutSeconds"]

    # A tampered expected value: rejected with the record and the difference.
    s.publish(models.descriptor("linear", "tampered", "pmml", tampered))
    wait_until(lambda: _rejection(job, "linear:tampered"), timeout=60, what="the tampered model rejected")
    reason = _rejection(job, "linear:tampered")["reason"]
    assert "ModelVerification: 1 of 20 records failed" in reason
    assert f"record {TAMPERED_RECORD}: quality off by {-TAMPER_BY:g}" in reason

    # No prediction for part of the descriptor's sample: rejected with the share.
    sample = wine_sample(rows[:200])
    predicted = sum(1 for r in rows[:200] if r[10] < 10.5)
    partial = models.descriptor("partial", "1", "pmml", partial_tree_pmml())
    s.publish(partial.model_copy(update={"verification": Sample(records=sample)}))
    wait_until(lambda: _rejection(job, "partial:1"), timeout=60, what="the partial model rejected")
    reason = _rejection(job, "partial:1")["reason"]
    assert f"sample: {predicted} of 200 records predicted ({predicted / 200:.1%}, 100% required)" in reason
    assert "is NaN" in reason

    # The report's frozen graph (a protobuf message): rejected under its own name, not its offset.
    graph = messages.ModelDescriptorProto(name="graph", dataType="wine", modeltype=0, data=b"x").SerializeToString()
    feed.publish_raw(s.broker.bootstrap, s.topics["models"], s.key("wine"), graph)
    wait_until(lambda: any(r["model"].startswith("graph:sha256:") for r in job.get("/models")["rejected"]),
               timeout=60, what="the frozen graph rejected")
    entry = next(r for r in job.get("/models")["rejected"] if r["model"].startswith("graph:"))
    assert entry["dataType"] == "wine" and "frozen graph" in entry["reason"]
    assert _serving(job)["version"] == serving_version


def _publish_timed(s, descriptor) -> float:
    """Publish and return when the broker appended the message (LogAppendTime), in seconds."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

    stamps = []
    p = feed.producer(s.broker.bootstrap, **{"linger.ms": 0})
    p.produce(s.topics["models"], descriptor.to_json_bytes(),
              key=s.key(descriptor.data_type),
              headers=[("content-type", descriptors.JSON_CONTENT_TYPE.encode())],
              on_delivery=lambda err, msg: stamps.append((err, msg.timestamp())))
    p.flush(30)
    (err, (kind, millis)), = stamps
    assert err is None and kind == TIMESTAMP_LOG_APPEND_TIME
    return millis / 1000


def _log_append_time(s) -> None:
    """The models topic stamps each message when the broker appends it: the swap's start."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": s.broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, s.topics["models"], incremental_configs=[
        ConfigEntry("message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)


def _scored_at(o: dict) -> float:
    from datetime import datetime

    return datetime.fromisoformat(o["timings"]["scoredAt"].replace("Z", "+00:00")).timestamp()


def _ms(xs) -> str:
    return f"median {statistics.median(xs) * 1000:.0f}, max {max(xs) * 1000:.0f}"


class _TensorFlowProcesses:
    """The most processes of a tree that had TensorFlow loaded at once, sampled until stopped."""

    def __init__(self, root: int, every: float = 0.5):
        self.most, self.seen = 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(root, every), daemon=True)
        self._thread.start()

    def _run(self, root: int, every: float) -> None:
        while not self._stop.wait(every):
            holding = _tensorflow_pids(root)
            if len(holding) > self.most:
                self.most, self.seen = len(holding), [_describe(pid) for pid in holding]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _describe(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:80]
        return f"pid {pid} ppid {stat[1]} state {stat[0]} rss {int(stat[21]) * 4 // 1024} MB start {stat[19]}: {cmd}"
    except OSError:
        return f"pid {pid} gone"


def _tensorflow_pids(root: int) -> list[int]:
    """The processes of ``root``'s tree that have TensorFlow loaded now."""
    return [pid for pid in process_tree(root) if _holds_tensorflow(pid)]


def _holds_tensorflow(pid: int) -> bool:
    try:
        return "libtensorflow_framework" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:  # gone
        return False


def _swap_times(s, job, label: str, versions: list, sample_size: str, before: int = 0) -> int:
    """Publish each descriptor while records stream; print message-on-topic -> serving (the
    job's /models ``since``) and -> the first output record scored by it, verification apart.
    ``before``: the records the job took in earlier; returns the total now."""
    stream = Stream(s, total=10**9, pause=0.25, start=before)
    stream.start()
    try:
        appended, serving, verify = {}, {}, {}
        for d in versions:
            appended[d.version] = _publish_timed(s, d)
            wait_until(lambda: _serving(job)["version"] == d.version, timeout=90, what=f"{d.label} serving")
            info = _serving(job)
            serving[d.version] = info["since"] - appended[d.version]
            verify[d.version] = info["verification"]["seconds"]
            # Until the new version has scored records: the next swap must not overtake it.
            wait_until(lambda: job.get("/stats")["dataTypes"]["wine"]["version"] == d.version
                       and job.get("/stats")["dataTypes"]["wine"]["invocations"] > 0, timeout=90,
                       what=f"{d.label} scoring")
    finally:
        sent = stream.stop()
    assert stream.error is None
    job.wait_records(before + sent)
    first: dict[str, float] = {}
    for o in s.outputs(expect=before + sent):
        v = o["model"]["version"]
        if v in appended:
            first[v] = min(first.get(v, float("inf")), _scored_at(o))
    scored = [first[v] - appended[v] for v in appended]
    swaps = list(serving.values())
    apart = [serving[v] - verify[v] for v in serving]
    print(f"\n{label} publish->serving over {len(swaps)} swap(s) (ms): {_ms(swaps)}; of which verification "
          f"({sample_size}): {_ms(list(verify.values()))}; without verification: {_ms(apart)}; "
          f"publish->first record scored by it: {_ms(scored)}")
    for v in appended:
        print(f"  {v}: serving {serving[v] * 1000:.0f} ms (verification {verify[v] * 1000:.0f} ms), "
              f"first scored {(first[v] - appended[v]) * 1000:.0f} ms")
    return before + sent


def _variant_zip(data: bytes, i: int) -> bytes:
    """The same SavedModel with one file more: other bytes, so another digest, and loaded anew."""
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            dst.writestr(item, src.read(item))
        dst.writestr("assets/variant.txt", str(i))
    return out.getvalue()


def _variant_graph(data: bytes, i: int) -> bytes:
    """The same GraphDef with one NoOp node more (protobuf merges a repeated field by appending):
    other bytes, the same function."""
    def field(number: int, payload: bytes) -> bytes:
        assert len(payload) < 128
        return bytes([number << 3 | 2, len(payload)]) + payload

    return data + field(1, field(1, f"variant_{i}".encode()) + field(2, b"NoOp"))


@pytest.mark.spark
@pytest.mark.broker
def test_pmml_and_tensorflow_swap_times_and_sample_verification(serving, demo_models, verified_linear, tampered_linear):
    """Message on the topic -> the job serving it, while records stream, verification time reported
    apart; printed, not asserted: timings vary with load (a swap's cost at scale is the benchmarks'
    to measure). First 4 swaps of a verified PMML model, then models failing admission rejected
    while the last keeps serving; then the PMML job's first TensorFlow model
    (cold: the JVM loads TensorFlow's native libraries), then 4 swaps alternating a SavedModel and a
    frozen graph, each new bytes (no cache can answer), each verified on a 20-record sample in the
    driver's JVM, while records stream: the one process that holds TensorFlow is the JVM. Then a model failing its sample (each record's
    true quality expected, which no model of the wine data predicts) is rejected with the reason,
    and the last one keeps serving."""
    from scorestream.api.descriptor import TensorFlowGraph

    rows = feed.wine_rows()
    graph = models.keras_frozen_graph(rows, epochs=1)
    keras = demo_models["keras"]
    records = [dict(r, quality=row[11]) for r, row in zip(wine_sample(rows[:20]), rows[:20])]
    sample = Sample(records=records)
    versions = []
    for i in range(5):
        if i % 2 == 0:
            d = keras.model_copy(update={"version": f"saved{i}", "data": _variant_zip(keras.data, i)})
        else:
            d = models.descriptor("frozen", f"graph{i}", "tensorflow", _variant_graph(graph, i),
                                  graph=TensorFlowGraph(input=models.FROZEN_INPUT, output=models.FROZEN_OUTPUT))
        versions.append(d.model_copy(update={"verification": sample}))
    s = serving()
    _log_append_time(s)
    s.publish(demo_models["tree"])
    job = s.start().wait_ready()
    n = s.produce(feed.wine_records(rows[:100], start=10**6))
    job.wait_records(n)
    n = _swap_times(s, job, "PMML", [models.descriptor("linear", f"swap{i}", "pmml", verified_linear) for i in range(4)],
                    "its 20 ModelVerification records", before=n)
    _failing_models_rejected(s, job, rows, tampered_linear, "swap3")
    holding = _TensorFlowProcesses(job.proc.pid)
    try:
        n = _swap_times(s, job, "TensorFlow, cold (a PMML job's first)", versions[:1], "20 sample records", before=n)
        n = _swap_times(s, job, "TensorFlow", versions[1:], "20 sample records", before=n)
    finally:
        holding.stop()
    # No Python worker: the JVM alone holds TensorFlow, through the swaps and after them.
    print(f"processes holding TensorFlow: at most {holding.most} at once through the swaps ({'; '.join(holding.seen)})")
    assert holding.most == 1 and len(_tensorflow_pids(job.proc.pid)) == 1, holding.seen

    last = versions[-1]
    (checked,) = _serving(job)["verification"]["sets"]
    assert (checked["set"], checked["records"], checked["predicted"], checked["failed"]) == ("sample", 20, 20, 0)
    strict = Sample(records=records, expectedField="quality", tolerance=0.0)
    s.publish(keras.model_copy(update={"version": "strict", "verification": strict}))
    wait_until(lambda: _rejection(job, "keras:strict"), timeout=90, what="the strict keras model rejected")
    reason = _rejection(job, "keras:strict")["reason"]
    assert "sample: 20 of 20 records predicted" in reason and "quality off by" in reason
    assert _serving(job)["version"] == last.version
    m = s.produce(feed.wine_records(rows[:100], start=2 * 10**6))
    job.wait_records(n + m)
    after = [o for o in s.outputs(expect=n + m) if int(o["key"].split("-")[1]) >= 2 * 10**6]
    assert len(after) == m and {(o["model"]["name"], o["model"]["version"]) for o in after} == {(last.name, last.version)}
    admissions = re.findall(r"tensorflow model \S+ admitted", job.log_path.read_text())
    assert len(admissions) == len(versions), admissions
    assert job.stop() == 0


# -- the operator: spec.model.verification -> the descriptor ------------------------------------


def _spec(verification: dict):
    from scorestream.api.v1alpha1.modelserving import ModelServingSpec

    return ModelServingSpec.model_validate({
        "dataType": "wine",
        "kafka": {"bootstrapServers": "kafka:9092", "dataTopic": "d", "outputTopic": "o", "deadLetterTopic": "q"},
        "input": {"fields": list(WINE_COLUMNS)},
        "spark": {"image": "scorestream-runtime:test"},
        "model": {"name": "m", "version": "1", "format": "pmml", "uri": "file:///models/m.pmml",
                  "verification": verification},
    })


def test_spec_verification_travels_in_the_descriptor():
    import base64

    from scorestream.operator import publish

    records = wine_sample(feed.wine_rows()[:3])
    inline = "data:application/jsonl;base64," + base64.b64encode("\n".join(map(json.dumps, records)).encode()).decode()
    d = publish.descriptor(_spec({"uri": inline, "minShare": 0.9}))
    assert d.verification == Sample(records=records, minShare=0.9)
    d = publish.descriptor(_spec({"uri": "file:///models/sample.jsonl", "expectedField": "quality", "tolerance": 0.5}))
    assert d.verification == Sample(location="file:///models/sample.jsonl", expectedField="quality", tolerance=0.5)
    with pytest.raises(ValueError, match="line 1 is not JSON"):
        publish.descriptor(_spec({"uri": "data:,not-json"}))


@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.timeout(900)
async def test_operator_rolls_back_a_model_failing_its_spec_sample(api, broker, serving, tmp_path):
    """spec.model.verification end to end: the operator publishes the sample with the model, the
    real job rejects the model, and ModelReady says RolledBack with the job's reason."""
    import base64

    from harness.operator import MS, Operated, apply, condition, obj, resource, until

    rows = feed.wine_rows()
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "tree.pmml").write_bytes(models.tree_pmml(rows))
    (folder / "partial.pmml").write_bytes(partial_tree_pmml())
    records = "\n".join(json.dumps(r) for r in wine_sample(rows[:200]))
    predicted = sum(1 for r in rows[:200] if r[10] < 10.5)
    sample = {"uri": "data:application/jsonl;base64," + base64.b64encode(records.encode()).decode()}

    s = serving(partitions=2)
    async with Operated(api, observeInterval=5, rolloutPoll=0.25) as run:
        body = resource(s.resource_topics, broker, model={"name": "tree", "version": "1", "format": "pmml",
                                                        "uri": (folder / "tree.pmml").as_uri(), "verification": sample})
        body["spec"]["input"] = {"format": "json", "fields": list(WINE_COLUMNS)}
        body["spec"]["spark"]["triggerInterval"] = "500ms"
        await apply(api, body)
        job = await run.start_job(tmp_path, artifacts={"modelDirs": [str(folder)]})
        await until(lambda: condition(api, "wine", "ModelReady").get("status") == "True", timeout=120,
                    what="the tree, verified on the sample, ready")
        assert job.get("/models")["serving"]["wine"]["verification"]["sets"][0]["predicted"] == 200

        body["spec"]["model"] = {"name": "partial", "version": "1", "format": "pmml",
                                 "uri": (folder / "partial.pmml").as_uri(), "verification": sample}
        await apply(api, body)
        cond = await until(lambda: condition(api, "wine", "ModelReady").get("reason") == "RolledBack"
                           and condition(api, "wine", "ModelReady"), timeout=120, what="RolledBack")
        assert f"sample: {predicted} of 200 records predicted ({predicted / 200:.1%}, 100% required)" in cond["message"]
        assert "still serving tree 1" in cond["message"]
        assert obj(api, MS, "wine")["status"]["model"]["history"][-1]["outcome"] == "RolledBack"
        assert job.get("/models")["serving"]["wine"]["name"] == "tree"
        assert job.stop() == 0
