"""The demo's own models, trained on the packaged wine data: users need no files of ours.

A scikit-learn decision tree and a linear regression exported to PMML with nyoka, and a small
Keras network exported as a TensorFlow SavedModel (zipped, as a model message carries it) or
frozen into a GraphDef.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from scorestream.api.descriptor import ModelDescriptor, TensorFlowGraph
from scorestream.tools.demo.feed import WINE_COLUMNS, wine_rows


def _frame(rows):
    import pandas as pd

    data = np.asarray(rows, dtype=np.float64)
    return pd.DataFrame(data[:, :11], columns=list(WINE_COLUMNS)), data[:, 11]


def _pmml(pipeline, target: str) -> bytes:
    from nyoka import skl_to_pmml

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "model.pmml"
        skl_to_pmml(pipeline, list(WINE_COLUMNS), target, str(out))
        return out.read_bytes()


def tree_pmml(rows=None, max_depth: int = 6) -> bytes:
    from sklearn.pipeline import Pipeline
    from sklearn.tree import DecisionTreeClassifier

    x, y = _frame(rows or wine_rows())
    model = Pipeline([("model", DecisionTreeClassifier(max_depth=max_depth, random_state=0))])
    model.fit(x, y.astype(int).astype(str))
    return _pmml(model, "quality")


def linear_pmml(rows=None) -> bytes:
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import Pipeline

    x, y = _frame(rows or wine_rows())
    model = Pipeline([("model", LinearRegression())])
    model.fit(x, y)
    return _pmml(model, "quality")


def verified_linear_pmml(rows=None, records: int = 20) -> bytes:
    """The linear regression with a ``<ModelVerification>`` of its first ``records`` rows: the
    inputs and scikit-learn's own predictions, as a producer that verifies its export ships them."""
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import Pipeline

    x, y = _frame(rows or wine_rows())
    model = Pipeline([("model", LinearRegression())])
    model.fit(x, y)
    sample = x.iloc[:records]
    expected = model.predict(sample)
    return with_model_verification(_pmml(model, "quality"), sample.to_numpy().tolist(), {"quality": list(expected)})


def with_model_verification(pmml: bytes, inputs: list[list[float]], expected: dict[str, list],
                            precision: float = 1e-6, zero_threshold: float = 1e-16) -> bytes:
    """A PMML (the wine inputs) with a ``<ModelVerification>`` (PMML 4.x) of these input rows and
    expected outputs, placed as the last child of the model element."""
    from xml.sax.saxutils import quoteattr

    def column(name: str) -> str:  # element names cannot hold spaces
        return name.replace(" ", "_")

    fields = [f'<VerificationField field={quoteattr(c)} column="{column(c)}"/>' for c in WINE_COLUMNS]
    fields += [f'<VerificationField field={quoteattr(name)} column="{column(name)}" precision="{precision!r}" '
               f'zeroThreshold="{zero_threshold!r}"/>' for name in expected]
    rows = []
    for i, row in enumerate(inputs):
        cells = [f"<{column(c)}>{float(v)!r}</{column(c)}>" for c, v in zip(WINE_COLUMNS, row)]
        cells += [f"<{column(name)}>{_cell(values[i])}</{column(name)}>" for name, values in expected.items()]
        rows.append(f"<row>{''.join(cells)}</row>")
    block = (f'<ModelVerification recordCount="{len(rows)}" fieldCount="{len(fields)}">'
             f"<VerificationFields>{''.join(fields)}</VerificationFields>"
             f"<InlineTable>{''.join(rows)}</InlineTable></ModelVerification>")
    text = pmml.decode()
    # The model element closes just before </PMML>.
    end = text.rindex("</PMML>")
    close = text.rindex("</", 0, end)
    return (text[:close] + block + "\n    " + text[close:]).encode()


def _cell(v) -> str:
    """A number as Python writes it exactly (repr), a class label as it is."""
    return v if isinstance(v, str) else repr(float(v))


def _keras(rows, epochs: int):
    """A small classifier over quality 0..9, trained the same way for every export of it."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    x, y = _frame(rows or wine_rows())
    keras.utils.set_random_seed(0)
    norm = keras.layers.Normalization()
    norm.adapt(x.to_numpy(np.float32))
    model = keras.Sequential(
        [keras.Input((11,)), norm, keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10, activation="softmax")]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(x.to_numpy(np.float32), y.astype(np.int32), epochs=epochs, batch_size=64, verbose=0)
    return model


def keras_savedmodel_zip(rows=None, epochs: int = 15) -> bytes:
    """The Keras classifier exported as a SavedModel and zipped."""
    from scorestream.runtime import tf_model

    model = _keras(rows, epochs)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "saved"
        model.export(str(folder), verbose=False)
        archive = tf_model.archive(folder, Path(tmp) / "model.zip")
        return archive.read_bytes()


# The frozen graph's tensors, as keras_frozen_graph names them.
FROZEN_INPUT, FROZEN_OUTPUT = "features:0", "Identity:0"


def keras_frozen_graph(rows=None, epochs: int = 15) -> bytes:
    """The Keras classifier frozen into a binary GraphDef, as the report's TENSORFLOW models are:
    its variables folded into constants (``convert_variables_to_constants_v2``), one Placeholder
    ``features`` (None, 11) and one output ``Identity`` (None, 10)."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    model = _keras(rows, epochs)
    spec = tf.TensorSpec((None, 11), tf.float32, name=FROZEN_INPUT.split(":")[0])
    frozen = convert_variables_to_constants_v2(tf.function(lambda x: model(x)).get_concrete_function(spec))
    assert [t.name for t in frozen.inputs] == [FROZEN_INPUT] and [t.name for t in frozen.outputs] == [FROZEN_OUTPUT]
    return frozen.graph.as_graph_def().SerializeToString()


def optimized_graph(frozen: bytes) -> bytes:
    """A frozen graph through TensorFlow's ``optimize_for_inference``, as the report's tooling writes
    one: its input Placeholder with its dtype alone, no shape. (``strip_unused`` writes the
    Placeholder anew; TensorFlow versions that copy the shape attribute onto it are undone.)"""
    import tensorflow as tf
    from tensorflow.python.tools.optimize_for_inference_lib import optimize_for_inference

    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(frozen)
    gd = optimize_for_inference(gd, [FROZEN_INPUT.split(":")[0]], [FROZEN_OUTPUT.split(":")[0]],
                                tf.float32.as_datatype_enum)
    (node,) = [n for n in gd.node if n.op == "Placeholder"]
    for attr in ("shape", "_output_shapes"):
        if attr in node.attr:
            del node.attr[attr]
    return gd.SerializeToString()


def descriptor(name: str, version: str, fmt: str, data: bytes, data_type: str = "wine", description: str = "",
               graph: TensorFlowGraph | None = None) -> ModelDescriptor:
    return ModelDescriptor(
        name=name,
        version=version,
        description=description or f"{name} v{version}, trained by the scorestream demo",
        dataType=data_type,
        format=fmt,
        inputs=list(WINE_COLUMNS) if fmt == "tensorflow" else None,
        data=data,
        graph=graph,
    )
