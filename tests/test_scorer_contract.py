"""The contract between the driver and the JVM scorer, driven directly in the JVM: a batch
DataFrame of Kafka-shaped rows, no streaming query and no broker.

The routing table is written by ``scorestream.api.scoring.RoutingTable`` and read by
``dev.scorestream.jvm.RoutingTable``; the result schema is ``Scorer.RESULT_DDL``, read by Python
from the JVM; the statistics are ``BatchCounts`` on both sides.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from scorestream.api.scoring import LATENCY_BUCKETS, BatchCounts, Route, RoutingTable
from scorestream.tools.demo import feed, models

pytestmark = [pytest.mark.spark]

KAFKA_ROW = "key binary, value binary, headers array<struct<key:string,value:binary>>, topic string, " \
            "partition int, offset long, timestamp timestamp"


@pytest.fixture(scope="module")
def spark(jvm_session):
    return jvm_session


@pytest.fixture(scope="module")
def scorer(spark):
    from scorestream.runtime.pipeline import BatchScorer

    return BatchScorer(spark, sink_options={})


@pytest.fixture(scope="module")
def tree(spark, tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "tree.pmml"
    path.write_bytes(models.tree_pmml())
    spark.sparkContext.addFile(str(path))
    return Route(key="tree:1", format="pmml", file=path.name, inputs=list(feed.WINE_COLUMNS))


def _table(**routes) -> RoutingTable:
    return RoutingTable(routes=routes, outputTopic="out", deadLetterTopic="dlq", served=["wine"])


def _rows(spark, values: list[tuple[bytes | None, bytes]]):
    from datetime import datetime, timezone

    ts = datetime(2026, 11, 23, 9, 0, 0, 123000, tzinfo=timezone.utc)
    return spark.createDataFrame([(k, v, None, "data", 0, i, ts) for i, (k, v) in enumerate(values)], KAFKA_ROW)


def _json_type(prop: dict) -> str:
    """A pydantic JSON-schema property as the JVM's RoutingTable.shape() names it."""
    options = prop.get("anyOf", [prop])
    kinds = [o for o in options if o.get("type") != "null"]
    kind = kinds[0]
    if "$ref" in kind:
        return kind["$ref"].rsplit("/", 1)[1]
    if kind["type"] == "object":
        value = kind["additionalProperties"]
        return "object of " + ("Route" if "$ref" in value else value["type"])
    return kind["type"]


def test_routing_table_has_the_same_fields_on_both_sides(spark):
    jvm_shape = json.loads(spark.sparkContext._jvm.dev.scorestream.jvm.RoutingTable.shape())
    schema = RoutingTable.model_json_schema()
    python_shape = {
        "RoutingTable": {k: _json_type(v) for k, v in schema["properties"].items()},
        "Route": {k: _json_type(v) for k, v in schema["$defs"]["Route"]["properties"].items()},
    }
    assert python_shape == jvm_shape


def test_the_jvm_refuses_a_table_it_does_not_understand(spark):
    parse = spark.sparkContext._jvm.dev.scorestream.jvm.RoutingTable.parse
    table = json.loads(_table().model_dump_json())
    with pytest.raises(Exception, match="Unrecognized field \"colour\""):
        parse(json.dumps({**table, "colour": "red"}))
    with pytest.raises(Exception, match="outputTopic and deadLetterTopic are required"):
        parse(json.dumps({k: v for k, v in table.items() if k != "outputTopic"}))


def test_result_schema_and_records_as_the_sink_writes_them(spark, scorer, tree):
    from pyspark.sql.types import _parse_datatype_string

    rows = feed.wine_rows()[:3]
    good = [(f"k-{i}".encode(), feed.wine_json(r)) for i, r in enumerate(rows)]
    bad = [(b"broken", b'{"dataType": "wine", "alc'), (b"beer", feed.wine_json(rows[0], "beer"))]
    scored = scorer.score(_rows(spark, good + bad), 7, _table(wine=tree))
    assert scored.schema["r"].dataType == _parse_datatype_string(scorer.result_ddl)
    out = {r.key: r.r for r in scored.collect()}

    for key, _ in good:
        r = out[key]
        assert r.topic == "out" and r.deadHeaders is None and r.pending is None
        record = json.loads(r.value)
        assert record["key"] == key.decode() and record["dataType"] == "wine" and record["batchId"] == 7
        assert record["model"] == {"name": "tree", "version": "1"}
        assert record["source"]["topic"] == "data" and record["source"]["partition"] == 0
        assert record["timings"]["eventTime"] == "2026-11-23T09:00:00.123Z"
        assert record["timings"]["scoringMicros"] > 0 and "prediction" in record and record["outputs"]
    for key, stage in ((b"broken", "decode"), (b"beer", "route")):
        r = out[key]
        assert r.topic == "dlq" and r.value is None, "a dead letter keeps the record's own value"
        headers = {h.key: bytes(h.value).decode() for h in r.deadHeaders}
        assert headers["scorestream.stage"] == stage and headers["scorestream.batch"] == "7"
        assert headers["scorestream.source.offset"] in {"3", "4"}

    counts = scorer.counts()
    assert (counts.in_, counts.out, counts.dead) == (5, 3, 2)
    assert counts.routes["tree:1"].n == 3 and counts.routes["tree:1"].min > 0
    assert len(counts.le) == len(LATENCY_BUCKETS) and counts.le[-1] <= 3
    assert counts.workers == ["driver"]


@pytest.fixture(scope="module")
def keras_models(tmp_path_factory) -> dict:
    """The demo's classifier as a SavedModel, a frozen graph and that graph optimized for inference
    (no input shape), each as the job ships it, with what Python TensorFlow itself computes for
    every wine row."""
    import io
    import zipfile

    import tensorflow as tf

    from scorestream.api.descriptor import TensorFlowGraph
    from scorestream.runtime import tf_model

    rows = feed.wine_rows()
    x = np.asarray([r[:11] for r in rows], np.float32)
    where = tmp_path_factory.mktemp("tensorflow")
    saved = models.keras_savedmodel_zip(rows, epochs=2)
    zipfile.ZipFile(io.BytesIO(saved)).extractall(where / "saved")
    signature = tf.saved_model.load(str(where / "saved")).signatures["serving_default"]
    (name, spec), = signature.structured_input_signature[1].items()
    out = {"savedmodel": ((where / "saved.zip"), np.asarray(next(iter(signature(**{name: x}).values()))))}
    (where / "saved.zip").write_bytes(saved)
    frozen = models.keras_frozen_graph(rows, epochs=2)
    for kind, graph in (("frozen", frozen), ("optimized", models.optimized_graph(frozen))):
        with tf.Graph().as_default() as g:
            gd = tf.compat.v1.GraphDef()
            gd.ParseFromString(graph)
            tf.compat.v1.import_graph_def(gd, name="")
            with tf.compat.v1.Session(graph=g) as sess:
                want = sess.run(models.FROZEN_OUTPUT, {models.FROZEN_INPUT: x})
        out[kind] = (tf_model.graph_archive(graph, TensorFlowGraph(), where / f"{kind}.graph.zip"), want)
    return out


@pytest.mark.parametrize("kind", ["savedmodel", "frozen", "optimized"])
def test_tensorflow_in_the_jvm_equals_tensorflow_on_every_wine_row_in_both_modes(spark, scorer, keras_models, kind):
    """Every one of the 1,599 wine rows through the job's own plans, a micro-batch's (pending rows
    scored 4,096 a call by Scorer.tensorFlow) and a real-time query's (each record as it comes),
    equal to what Python TensorFlow computes (float32 both ways: within its rounding)."""
    archive, want = keras_models[kind]
    keras = Route(key=f"{kind}:1", format="tensorflow", file=str(archive), inputs=list(feed.WINE_COLUMNS))
    source = _rows(spark, feed.wine_records(feed.wine_rows()))
    batch = [(r.key, r.r.topic, r.r.value) for r in scorer.score(source, 1, _table(wine=keras)).collect()]
    assert scorer.counts().routes[keras.key].n == len(want)
    # Not a plan over the local rows alone, which Spark would run on the driver without serializing
    # the live scorer (where it takes its table, LiveTable.take).
    live, _ = scorer.live(source.coalesce(1), _table(wine=keras))
    real_time = [(r.key, r.topic, r.value) for r in live.collect()]
    for mode, out in (("micro-batch", batch), ("real-time", real_time)):
        assert [k for k, _, _ in out] == [f"wine-{i}".encode() for i in range(len(want))], "in the records' order"
        assert {t for _, t, _ in out} == {"out"}, mode
        records = [json.loads(v) for _, _, v in out]
        have = np.asarray([[r["outputs"][str(k)] for k in range(want.shape[1])] for r in records])
        np.testing.assert_allclose(have, want, rtol=1e-6, atol=1e-7, err_msg=f"{kind}, {mode}")
        assert [r["prediction"] for r in records] == [float(k) for k in want.argmax(1)], f"{kind}, {mode}"
        assert [r["label"] for r in records] == [str(k) for k in want.argmax(1)], f"{kind}, {mode}"


def test_a_tensorflow_model_that_cannot_score_dead_letters_its_rows_saying_why(spark, scorer, tree, tmp_path):
    """Rows of a model whose archive is no model are written up as dead letters (stage score), in
    their order among the PMML rows of the same batch."""
    from scorestream.api.descriptor import TensorFlowGraph
    from scorestream.runtime import tf_model

    bad = tmp_path / "bad.graph.zip"
    tf_model.graph_archive(b"no graph", TensorFlowGraph(), bad)
    broken = Route(key="broken:1", format="tensorflow", file=str(bad), inputs=list(feed.WINE_COLUMNS))
    rows = feed.wine_rows()[:6]
    values = [(f"k-{i}".encode(), feed.wine_json(r, "wine" if i % 2 else "red")) for i, r in enumerate(rows)]
    scored = scorer.score(_rows(spark, values), 3, _table(wine=tree, red=broken).model_copy(
        update={"served": ["wine", "red"]})).collect()
    assert [r.key for r in scored] == [k for k, _ in values]
    for r in scored:
        if r.key in (b"k-0", b"k-2", b"k-4"):
            headers = {h.key: bytes(h.value).decode() for h in r.r.deadHeaders}
            assert r.r.topic == "dlq" and headers["scorestream.stage"] == "score", headers
            assert headers["scorestream.reason"].startswith("IllegalArgumentException: frozen graph is not a binary"), headers
        else:
            assert r.r.topic == "out" and json.loads(r.r.value)["model"]["name"] == "tree"
    counts = scorer.counts()
    assert counts.routes["tree:1"].n == 3 and counts.routes["broken:1"].err == 3


def test_batch_counts_are_read_as_the_python_model_says(spark):
    counts = spark.sparkContext._jvm.dev.scorestream.jvm.BatchCounts("1000,2000")
    parsed = BatchCounts.model_validate_json(counts.value())
    assert parsed.in_ == 0 and parsed.le == [0, 0] and parsed.routes == {} and parsed.workers == []
