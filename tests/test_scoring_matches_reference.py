"""Every wine row, scored by the streaming job (real Spark, real broker), equals the engine's own answer.

PMML is checked against pypmml (PMML4S called directly), TensorFlow against TensorFlow. Several
dataTypes in one job, each with its own model, also shows routing by dataType.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from scorestream.api.descriptor import ModelDescriptor
from scorestream.config import ArtifactPolicy
from harness.reference import assert_pmml_equal, pmml4s_outputs
from scorestream.tools.demo import feed, models

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def tf_outputs(folder, rows) -> np.ndarray:
    """What TensorFlow itself computes: the SavedModel's signature the job serves (serving_default,
    else predict, else the first by name), in Python."""
    import tensorflow as tf

    signatures = tf.saved_model.load(str(folder)).signatures
    key = next((k for k in ("serving_default", "predict") if k in signatures), sorted(signatures)[0])
    signature = signatures[key]
    (name, _), = signature.structured_input_signature[1].items()
    out = signature(**{name: np.asarray([r[:11] for r in rows], dtype=np.float32)})
    return np.asarray(out[sorted(out)[0]])


def by_type(outputs: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for o in outputs:
        grouped.setdefault(o["dataType"], []).append(o)
    for v in grouped.values():
        v.sort(key=lambda o: int(o["key"].rsplit("-", 1)[1]))
    return grouped


def run_all(serving, descriptors: dict[str, ModelDescriptor], rows: dict[str, list], **config) -> dict[str, list[dict]]:
    """Each dataType's rows scored by one job serving every descriptor, by dataType."""
    s = serving(dataTypes=list(descriptors), **config)
    for d in descriptors.values():
        s.publish(d)
    job = s.start().wait_ready()
    n = 0
    for dt in descriptors:
        n += s.produce(feed.wine_records(rows[dt], dt))
    job.wait_records(n)
    out = s.outputs(expect=n)
    assert job.stop() == 0
    assert len(out) == n, f"{len(out)} outputs for {n} records"
    assert s.read("dlq", idle=1.0) == []
    return by_type(out)


# One job for the report's models and the demo's: a job start is most of the cost.
def test_report_and_demo_models_match_reference(serving, wine_fixtures, tmp_path):
    report_rows = feed.wine_rows(str(wine_fixtures / "winequality_red.csv"))
    assert len(report_rows) == 1599
    rows = feed.wine_rows()
    tree = (wine_fixtures / "winequalityDecisionTreeClassification.pmml").read_bytes()
    linear = (wine_fixtures / "winequalityLinearRegression.pmml").read_bytes()
    tf_dir = wine_fixtures / "tf_saved" / "1"
    demo_tree, demo_linear = models.tree_pmml(rows), models.linear_pmml(rows)
    keras_zip = models.keras_savedmodel_zip(rows, epochs=3)
    got = run_all(
        serving,
        {
            "tree": ModelDescriptor(name="report-tree", version="1", dataType="tree", format="pmml", data=tree),
            "linear": ModelDescriptor(name="report-linear", version="1", dataType="linear", format="pmml", data=linear),
            "tf": ModelDescriptor(name="report-tf", version="1", dataType="tf", format="tensorflow",
                                  inputs=list(feed.WINE_COLUMNS), location=f"file://{tf_dir}"),
            "demo-tree": models.descriptor("demo-tree", "1", "pmml", demo_tree, data_type="demo-tree"),
            "demo-linear": models.descriptor("demo-linear", "1", "pmml", demo_linear, data_type="demo-linear"),
            "keras": models.descriptor("demo-keras", "1", "tensorflow", keras_zip, data_type="keras"),
        },
        {"tree": report_rows, "linear": report_rows, "tf": report_rows,
         "demo-tree": rows, "demo-linear": rows, "keras": rows},
        # The SavedModel folder is read where it lies: the job may read files under it only.
        artifacts={"modelDirs": [str(wine_fixtures)]},
    )
    assert_pmml_equal(got["tree"], pmml4s_outputs(tree, report_rows), "tree")
    assert_pmml_equal(got["linear"], pmml4s_outputs(linear, report_rows), "linear")
    want = tf_outputs(tf_dir, report_rows)
    for i, o in enumerate(got["tf"]):
        np.testing.assert_allclose([o["outputs"][str(k)] for k in range(9)], want[i], rtol=1e-6, atol=1e-7)
        assert o["prediction"] == float(np.argmax(want[i]))
        assert o["model"] == {"name": "report-tf", "version": "1"}
    assert {o["model"]["name"] for o in got["tree"]} == {"report-tree"}

    assert_pmml_equal(got["demo-tree"], pmml4s_outputs(demo_tree, rows), "demo tree")
    assert_pmml_equal(got["demo-linear"], pmml4s_outputs(demo_linear, rows), "demo linear")
    from scorestream.runtime import tf_model

    want = tf_outputs(tf_model.unpack(keras_zip, tmp_path / "keras", ArtifactPolicy()), rows)
    for i, o in enumerate(got["keras"]):
        np.testing.assert_allclose([o["outputs"][str(k)] for k in range(10)], want[i], rtol=1e-6, atol=1e-7)
