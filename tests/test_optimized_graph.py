"""Frozen graphs as TensorFlow's own tooling writes them (#32): ``optimize_for_inference`` leaves the
input Placeholder with its dtype only, no shape attribute. The feature count comes from the ops that
read the input (or, where none says, the configured fields, proven by a row of zeros); the graph is
served by the real job equal to TensorFlow's own output on every wine row, verified from a CSV
sample, and a graph that cannot be fed fails once, as a load failure."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from scorestream.api import messages
from scorestream.api.descriptor import TensorFlowGraph
from scorestream.api.verification import Sample
from scorestream.tools.demo import feed, models

ROWS = 1599
INPUT, OUTPUT = models.FROZEN_INPUT.split(":")[0], models.FROZEN_OUTPUT.split(":")[0]


def _graph_def(data: bytes):
    import tensorflow as tf

    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(data)
    return gd


def _placeholder(gd):
    (node,) = [n for n in gd.node if n.op == "Placeholder"]
    return node


def reference(graph: bytes, x: np.ndarray) -> np.ndarray:
    """What TensorFlow itself computes: the GraphDef run in a TF1 Session, not through our loader."""
    import tensorflow as tf

    with tf.Graph().as_default() as g:
        tf.compat.v1.import_graph_def(_graph_def(graph), name="")
        with tf.compat.v1.Session(graph=g) as sess:
            return sess.run(models.FROZEN_OUTPUT, {models.FROZEN_INPUT: x})


def _features(rows) -> np.ndarray:
    return np.asarray([r[:11] for r in rows], np.float32)


@pytest.fixture(scope="module")
def optimized() -> bytes:
    graph = models.optimized_graph(models.keras_frozen_graph(feed.wine_rows(), epochs=3))
    node = _placeholder(_graph_def(graph))
    assert "shape" not in node.attr and set(node.attr) == {"dtype"}, "the test's graph has no input shape"
    return graph


@pytest.mark.spark
def test_optimized_graph_without_input_shape_loads_with_the_width_its_ops_imply(jvm_session, optimized):
    """The JVM's loader gives the Placeholder the width its MatMul's weight implies (FrozenGraphs;
    its other cases are TensorFlowModelTest's, its arithmetic on every row test_scorer_contract's)."""
    model = jvm_session.sparkContext._jvm.dev.scorestream.jvm.TensorFlowModel.frozenGraph(optimized, None, None)
    assert (model.inputName(), model.outputName(), model.width()) == (models.FROZEN_INPUT, models.FROZEN_OUTPUT, 11)
    assert model.check(11) is None
    assert model.check(12) == "model takes 11 inputs but 12 are configured"
    model.close()


def _wine_csv(path, rows, expected=None) -> None:
    """The wine data as the report's data set file has it: a quoted header row, ';'-separated."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f, delimiter=";", quoting=csv.QUOTE_MINIMAL)
        f.write(";".join(f'"{c}"' for c in (*feed.WINE_COLUMNS, "quality",
                                            *(["expected"] if expected is not None else []))) + "\n")
        for i, r in enumerate(rows):
            cells = [f"{v:g}" for v in r[:11]] + [str(int(r[11]))]
            out.writerow(cells + ([str(int(expected[i]))] if expected is not None else []))


def test_cli_verifies_an_optimized_graph_from_a_csv_sample_and_reports_a_load_failure_once(tmp_path, capsys,
                                                                                           optimized):
    from scorestream.tools import cli
    from scorestream.runtime import verification

    rows = feed.wine_rows()[:200]
    want = reference(optimized, _features(rows)).argmax(1)
    graph, sample = tmp_path / "optimized.pb", tmp_path / "winequality_red.csv"
    graph.write_bytes(optimized)
    _wine_csv(sample, rows, expected=want)
    common = ["--expected-field", "expected", "--tolerance", "0", "--inputs", ",".join(feed.WINE_COLUMNS),
              "--timeout", str(verification.TENSORFLOW_TIMEOUT_SECONDS)]
    assert cli.main(["verify", str(graph), "--sample", str(sample), *common]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PASS") and "200 of 200 records predicted" in out, out

    # Twelve input fields for an eleven-wide graph: one load failure, no 200 record failures.
    twelve = ["--expected-field", "expected", "--inputs", ",".join([*feed.WINE_COLUMNS, "quality"])]
    assert cli.main(["verify", str(graph), "--sample", str(sample), *twelve]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL") and out.splitlines()[1:] == ["  model takes 11 inputs but 12 are configured"], out
    # Bytes that are no graph at all: the same, once.
    graph.write_bytes(b"not a graph")
    assert cli.main(["verify", str(graph), "--sample", str(sample), *common]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL") and len(out.splitlines()) == 2, out
    # once, as a load failure, in the JVM's words (which quote nothing of the file, #30)
    assert out.splitlines()[1].strip().startswith(
        "tensorflow model does not load: IllegalArgumentException: frozen graph is not a binary GraphDef"), out


@pytest.mark.spark
@pytest.mark.broker
def test_optimized_graph_served_equals_tensorflow_on_every_row(serving, optimized, tmp_path):
    rows = feed.wine_rows()
    assert len(rows) == ROWS
    want = reference(optimized, _features(rows))
    # A CSV sample by location, as a descriptor carries it: the first 50 rows expecting TensorFlow's class.
    samples = tmp_path / "samples"
    samples.mkdir()
    _wine_csv(samples / "winequality_red.csv", rows[:50], expected=want.argmax(1)[:50])
    s = serving(dataTypes=["graph", "proto"], artifacts={"modelDirs": [str(samples)]})
    graph = models.descriptor("optimized", "1", "tensorflow", optimized, data_type="graph", graph=TensorFlowGraph())
    s.publish(graph.model_copy(update={"verification": Sample(
        location=(samples / "winequality_red.csv").as_uri(), expectedField="expected", tolerance=0)}))
    # The report's protobuf message, type TENSORFLOW: no names, no version, no input shape.
    proto = messages.ModelDescriptorProto(name="report-optimized", dataType="proto", modeltype=0, data=optimized)
    feed.publish_raw(s.broker.bootstrap, s.topics["models"], s.key("proto"), proto.SerializeToString())
    job = s.start().wait_ready()
    serving_now = job.get("/models")["serving"]
    assert serving_now["graph"]["name"] == "optimized" and serving_now["proto"]["name"] == "report-optimized"
    verified = serving_now["graph"]["verification"]
    assert [(x["set"], x["records"], x["failed"]) for x in verified["sets"]] == [("sample", 50, 0)], verified
    n = s.produce(feed.wine_records(rows, "graph")) + s.produce(feed.wine_records(rows, "proto"))
    job.wait_records(n)
    out = s.outputs(expect=n)
    assert job.stop() == 0
    assert len(out) == n and s.read("dlq", idle=1.0) == []
    for dt, name in (("graph", "optimized"), ("proto", "report-optimized")):
        got = sorted((o for o in out if o["key"].startswith(f"{dt}-")), key=lambda o: int(o["key"].split("-")[1]))
        assert len(got) == ROWS and {o["model"]["name"] for o in got} == {name}
        have = np.asarray([[o["outputs"][str(k)] for k in range(10)] for o in got])
        np.testing.assert_allclose(have, want, rtol=1e-6, atol=1e-7)
        assert [o["prediction"] for o in got] == [float(k) for k in want.argmax(1)]
    print(f"optimized graph vs TensorFlow over {ROWS} rows x 2 descriptors: max abs difference "
          f"{float(np.abs(have - want).max()):.3g}")
