"""TensorFlow frozen graphs (#16): the demo's Keras model frozen into a GraphDef, served by the job
through the same vectorised path as a SavedModel, from a JSON descriptor (``graph``) or the
report's protobuf ``ModelDescriptor`` type ``TENSORFLOW``."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from scorestream.api import messages
from scorestream.api.descriptor import TensorFlowGraph
from scorestream.api.verification import Sample
from scorestream.tools.demo import feed, models

from harness.streaming import Stream, takeovers, wait_until

ROWS = 1599


@pytest.fixture(scope="module")
def frozen_graph() -> bytes:
    return models.keras_frozen_graph(feed.wine_rows(), epochs=3)


def tensorflow_reference(graph: bytes, rows) -> np.ndarray:
    """What TensorFlow itself computes: the GraphDef run in a TF1 Session, not through our loader."""
    import tensorflow as tf

    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(graph)
    with tf.Graph().as_default() as g:
        tf.compat.v1.import_graph_def(gd, name="")
        with tf.compat.v1.Session(graph=g) as sess:
            return sess.run(models.FROZEN_OUTPUT, {models.FROZEN_INPUT: np.asarray([r[:11] for r in rows], np.float32)})


@pytest.mark.spark
def test_names_inferred_or_given_and_wrong_ones_refused(jvm_session, frozen_graph):
    """The JVM's loader (dev.scorestream.jvm.TensorFlowModel) on the demo's graph; its arithmetic on
    every row is test_scorer_contract's."""
    jvm = jvm_session.sparkContext._jvm
    load = jvm.dev.scorestream.jvm.TensorFlowModel.frozenGraph
    inferred = load(frozen_graph, None, None)
    assert (inferred.inputName(), inferred.outputName(), inferred.width()) == (models.FROZEN_INPUT,
                                                                               models.FROZEN_OUTPUT, 11)
    # An inner tensor may be chosen as the output: the graph is run to it.
    import tensorflow as tf

    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(frozen_graph)
    (relu,) = [n.name for n in gd.node if n.op == "Relu"]
    inner = load(frozen_graph, "features", relu)
    row = jvm_session.sparkContext._gateway.new_array(jvm.double, 11)
    for i, v in enumerate(feed.wine_rows()[0][:11]):
        row[i] = v
    assert len(inner.predict(row, 1).outputs(0)) == 32
    for m in (inferred, inner):
        m.close()
    with pytest.raises(Exception, match="no-such-op"):
        load(frozen_graph, None, "no-such-op:0")
    with pytest.raises(Exception, match="not a binary GraphDef"):
        load(b"x", None, None)


def test_cli_verifies_a_frozen_graph_against_a_sample(tmp_path, capsys, frozen_graph):
    """``scorestream verify`` on a .pb: the sample scored by the JVM's Verifier as the job's is."""
    from scorestream.tools import cli
    from scorestream.runtime import verification

    rows = feed.wine_rows()[:200]
    want = tensorflow_reference(frozen_graph, rows).argmax(1)
    path, good, tampered = tmp_path / "wine.pb", tmp_path / "good.jsonl", tmp_path / "tampered.jsonl"
    path.write_bytes(frozen_graph)
    records = [dict(json.loads(feed.wine_json(r)), expected=int(k)) for r, k in zip(rows, want)]
    good.write_text("".join(json.dumps(r) + "\n" for r in records))
    records[3]["expected"] += 1
    tampered.write_text("".join(json.dumps(r) + "\n" for r in records))
    # The job's bound for a TensorFlow sample: a JVM process starts, and on a loaded machine the
    # CLI's 10 s default ran out before a record was scored.
    common = ["--expected-field", "expected", "--tolerance", "0", "--inputs", ",".join(feed.WINE_COLUMNS),
              "--timeout", str(verification.TENSORFLOW_TIMEOUT_SECONDS)]
    assert cli.main(["verify", str(path), "--sample", str(good), *common]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PASS") and "(tensorflow)" in out, out
    assert cli.main(["verify", str(path), "--sample", str(tampered), *common,
                     "--graph-output", models.FROZEN_OUTPUT]) == 1
    out = capsys.readouterr().out
    # Records are counted from 1: the fourth is off by one class, said as a number only (never a
    # value read from the sample).
    assert out.startswith("FAIL") and "1 failed" in out and "record 4: expected off by -1 (allowed 0)" in out, out


@pytest.mark.spark
@pytest.mark.broker
def test_frozen_graph_served_equals_tensorflow_then_swapped_mid_stream_with_savedmodel_and_pmml(serving, demo_models,
                                                                                               frozen_graph):
    """Every row scored by a frozen graph (named in a JSON descriptor, or inferred from the
    report's protobuf) as TensorFlow scores it; then, in the same job, a stream whose model goes
    SavedModel -> frozen graph -> PMML -> frozen graph with no batch scored by two."""
    rows = feed.wine_rows()
    assert len(rows) == ROWS
    want = tensorflow_reference(frozen_graph, rows)
    s = serving(dataTypes=["graph", "proto", "wine"])
    # JSON descriptor with the tensor names given, and a sample to verify before it serves: the
    # first 50 rows, each expecting TensorFlow's class.
    sample = [dict(json.loads(feed.wine_json(r, "graph")), expected=int(k)) for r, k in zip(rows[:50], want.argmax(1))]
    graph = models.descriptor("frozen", "1", "tensorflow", frozen_graph, data_type="graph",
                              graph=TensorFlowGraph(input=models.FROZEN_INPUT, output=models.FROZEN_OUTPUT))
    s.publish(graph.model_copy(update={"verification": Sample(records=sample, expectedField="expected", tolerance=0)}))
    # The report's protobuf message, type TENSORFLOW: no names, no version; both inferred.
    proto = messages.ModelDescriptorProto(name="report-graph", dataType="proto", modeltype=0, data=frozen_graph)
    feed.publish_raw(s.broker.bootstrap, s.topics["models"], s.key("proto"), proto.SerializeToString())
    s.publish(demo_models["keras"])
    job = s.start().wait_ready()
    serving_now = job.get("/models")["serving"]
    assert serving_now["graph"]["name"] == "frozen" and serving_now["proto"]["format"] == "tensorflow"
    assert serving_now["proto"]["name"] == "report-graph" and serving_now["proto"]["version"].startswith("sha256:")
    verified = serving_now["graph"]["verification"]
    assert [(x["set"], x["records"], x["failed"]) for x in verified["sets"]] == [("sample", 50, 0)], verified
    n = s.produce(feed.wine_records(rows, "graph")) + s.produce(feed.wine_records(rows, "proto"))
    job.wait_records(n)
    out = s.outputs(expect=n)
    # A graph whose output is not in it is rejected with the reason; the served one stays.
    s.publish(graph.model_copy(update={"version": "bad", "graph": TensorFlowGraph(output="no-such-op:0")}))
    wait_until(lambda: any(r["model"] == "frozen:bad" for r in job.get("/models")["rejected"]), timeout=60,
               what="the bad graph rejected")
    reason = next(r["reason"] for r in job.get("/models")["rejected"] if r["model"] == "frozen:bad")
    assert "no-such-op" in reason, reason
    assert job.get("/models")["serving"]["graph"]["version"] == "1"
    assert len(out) == n and s.read("dlq", idle=1.0) == []

    worst = 0.0
    for dt, name in (("graph", "frozen"), ("proto", "report-graph")):
        got = sorted((o for o in out if o["key"].startswith(f"{dt}-")), key=lambda o: int(o["key"].split("-")[1]))
        assert len(got) == ROWS
        have = np.asarray([[o["outputs"][str(k)] for k in range(10)] for o in got])
        np.testing.assert_allclose(have, want, rtol=1e-6, atol=1e-7)
        assert [o["prediction"] for o in got] == [float(k) for k in np.argmax(want, axis=1)]
        assert {o["model"]["name"] for o in got} == {name}
        worst = max(worst, float(np.abs(have - want).max()))
    print(f"frozen graph vs TensorFlow over {ROWS} rows x 2 descriptors: max abs difference {worst:.3g}")

    # The swaps, on the wine records of a live stream (TensorFlow is imported in the Python
    # workers by now: the graph's batches did it).
    wine_graph = models.descriptor("frozen", "5", "tensorflow", frozen_graph, graph=TensorFlowGraph())
    stream = Stream(s, total=10**9, pause=0.25)
    stream.start()
    swaps = {}

    def swap(d, more: int) -> None:
        after = job.get("/stats")["totals"]["recordsIn"] + more
        wait_until(lambda: job.get("/stats")["totals"]["recordsIn"] >= after, what=f"{after} records")
        t0 = time.monotonic()
        s.publish(d)
        wait_until(lambda: job.get("/models")["serving"]["wine"]["name"] == d.name, timeout=120, what=f"{d.name} serving")
        swaps[d.label] = time.monotonic() - t0
        wait_until(lambda: job.get("/stats")["dataTypes"]["wine"]["name"] == d.name
                   and job.get("/stats")["dataTypes"]["wine"]["invocations"] > 0, timeout=180, what=f"{d.name} scoring")

    try:
        swap(wine_graph, 1000)  # SavedModel -> frozen graph
        swap(demo_models["tree"], 1000)  # frozen graph -> PMML
        swap(wine_graph.model_copy(update={"version": "6"}), 1000)  # PMML -> graph
    except TimeoutError as e:
        raise AssertionError(f"{e}; stream sent {stream.sent}, error {stream.error!r}; job log:\n{job.tail(60)}") from None
    sent = stream.stop()
    assert stream.error is None
    stats = job.wait_records(n + sent)
    print("publish -> serving (s): " + ", ".join(f"{k} {v:.2f}" for k, v in swaps.items()))

    wine = [o for o in s.outputs(expect=n + sent) if o["key"].startswith("wine-")]
    assert len(wine) == sent and len({o["key"] for o in wine}) == sent, "every record scored exactly once"
    assert takeovers(wine) == [("keras", "3"), ("frozen", "5"), ("tree", "1"), ("frozen", "6")]
    assert stats["totals"]["modelSwitches"] == 3
    assert job.stop() == 0
