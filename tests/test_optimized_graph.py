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


def optimize(frozen: bytes) -> bytes:
    """The frozen graph through TensorFlow's ``optimize_for_inference``. Its ``strip_unused`` writes
    the input Placeholder anew; TensorFlow versions that copy the shape attribute onto it are
    made to write what the others (and the report's tooling) do: the dtype alone."""
    import tensorflow as tf
    from tensorflow.python.tools.optimize_for_inference_lib import optimize_for_inference

    gd = optimize_for_inference(_graph_def(frozen), [INPUT], [OUTPUT], tf.float32.as_datatype_enum)
    node = _placeholder(gd)
    for attr in ("shape", "_output_shapes"):
        if attr in node.attr:
            del node.attr[attr]
    return gd.SerializeToString()


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
    graph = optimize(models.keras_frozen_graph(feed.wine_rows(), epochs=3))
    node = _placeholder(_graph_def(graph))
    assert "shape" not in node.attr and set(node.attr) == {"dtype"}, "the test's graph has no input shape"
    return graph


def test_optimized_graph_without_input_shape_loads_with_the_width_its_ops_imply(optimized):
    from scorestream.runtime import tf_model

    gd = _graph_def(optimized)
    assert tf_model.input_width(gd, models.FROZEN_INPUT) == 11
    model = tf_model.load_graph(optimized, TensorFlowGraph())
    assert (model.input_name, model.output_name, model.n_inputs) == (models.FROZEN_INPUT, models.FROZEN_OUTPUT, 11)
    x = _features(feed.wine_rows()[:300])
    np.testing.assert_array_equal(model.predict(x), reference(optimized, x))
    assert tf_model.check(model, 11) is None
    assert tf_model.check(model, 12) == "model takes 11 inputs but 12 are configured"


def test_partly_unknown_and_undeclared_widths_and_what_cannot_be_fed():
    import tensorflow as tf

    from scorestream.runtime import tf_model

    def graph(shape, body) -> bytes:
        with tf.Graph().as_default() as g:
            x = tf.compat.v1.placeholder(tf.float32, shape=shape, name="x")
            tf.identity(body(x), name="y")
        return g.as_graph_def().SerializeToString()

    w = np.arange(24, dtype=np.float32).reshape(6, 4)
    # (None, None): the MatMul's (6, 4) weight says 6.
    partly = tf_model.load_graph(graph([None, None], lambda x: tf.matmul(x, w)), TensorFlowGraph())
    assert partly.n_inputs == 6
    np.testing.assert_allclose(partly.predict(np.ones((2, 6), np.float32)), np.ones((2, 6)) @ w)
    # No shape and nothing that says the width: the configured count is tried on a row of zeros.
    undeclared = tf_model.load_graph(graph(None, lambda x: tf.reduce_sum(x, axis=1)), TensorFlowGraph())
    assert undeclared.n_inputs is None and tf_model.check(undeclared, 5) is None
    np.testing.assert_allclose(undeclared.predict(np.ones((3, 5), np.float32)), [5, 5, 5])
    # What cannot be fed a (n, k) batch: refused on loading, or by the row of zeros.
    with pytest.raises(ValueError, match=r"has shape \(None, 3, 3\); \(None, n\) is supported"):
        tf_model.load_graph(graph([None, 3, 3], lambda x: x), TensorFlowGraph())
    matrix = tf_model.load_graph(graph(None, lambda x: tf.linalg.det(x)), TensorFlowGraph())
    assert tf_model.check(matrix, 4).startswith("model cannot be fed 4 inputs: InvalidArgumentError")
    # Ops that disagree on the width: no guess.
    with pytest.raises(ValueError, match=r"take \[4, 6\] features"):
        tf_model.load_graph(graph(None, lambda x: tf.matmul(x, w) + tf.matmul(x, w[:4])[:, :1]), TensorFlowGraph())


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
    # once, as a load failure; TensorFlow's and the graph's own text may quote the file (#30): the type only
    assert out.splitlines()[1].strip() == "tensorflow model does not load: ValueError", out


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
