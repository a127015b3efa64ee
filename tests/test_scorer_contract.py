"""The contract between the driver and the JVM scorer, driven directly in the JVM: a batch
DataFrame of Kafka-shaped rows, no streaming query and no broker.

The routing table is written by ``scorestream.api.scoring.RoutingTable`` and read by
``dev.scorestream.jvm.RoutingTable``; the result schema is ``Scorer.RESULT_DDL``, read by Python
from the JVM; the statistics are ``BatchCounts`` on both sides.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
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


def test_tensorflow_rows_come_back_pending_and_are_finished_in_the_jvm(spark, scorer, tree):
    """A TensorFlow route leaves the JVM with its features; ss_finish writes up what Python scored."""
    from pyspark.sql import functions as F

    from scorestream.runtime.pipeline import fill_slot

    keras = Route(key="keras:3", format="tensorflow", file="unused.zip", inputs=list(feed.WINE_COLUMNS))
    rows = feed.wine_rows()[:4]
    scored = scorer.score(_rows(spark, [(f"k-{i}".encode(), feed.wine_json(r)) for i, r in enumerate(rows)]), 1,
                          _table(wine=keras))
    pending = scored.select("key", "topic", "partition", "offset", "ts",
                            F.col("r.pending.dataType").alias("dataType"),
                            F.col("r.pending.primary").alias("primary"), F.col("r.pending.shadow").alias("shadow"))
    table = pa.Table.from_batches(pending._collect_as_arrow())
    primary = table.column("primary").combine_chunks()
    assert primary.field("tf").to_pylist() == [True] * 4
    assert [len(f) for f in primary.field("features").to_pylist()] == [len(feed.WINE_COLUMNS)] * 4

    class Doubling:  # stands in for a SavedModel: one output per row
        output_name = "y"

        def predict(self, x):
            return x[:, :1] * 2

    filled = fill_slot(primary, lambda route: Doubling())
    assert filled.field("prediction").to_pylist() == pytest.approx(
        [2 * float(json.loads(feed.wine_json(r))["fixed acidity"]) for r in rows])
    assert filled.field("outputs").to_pylist()[0][0][0] == "y"

    def stage(batches):  # what tensorflow_stage does in a Python worker, with the stand-in model
        for b in batches:
            i = b.schema.get_field_index("primary")
            columns = b.columns
            columns[i] = fill_slot(columns[i], lambda route: Doubling())
            yield pa.RecordBatch.from_arrays(columns, schema=b.schema)

    written = pending.mapInArrow(stage, pending.schema).select(scorer.finish().alias("r")).collect()
    records = [json.loads(w.r.value) for w in written]
    assert {r["model"]["name"] for r in records} == {"keras"} and all(w.r.topic == "out" for w in written)
    assert scorer.counts().routes["keras:3"].n == 4
    assert [r["prediction"] for r in sorted(records, key=lambda r: r["key"])] == pytest.approx(
        filled.field("prediction").to_pylist())


def test_fill_slot_scores_only_waiting_rows_and_fails_a_route_as_a_whole():
    from scorestream.runtime.pipeline import fill_slot

    slot_type = pa.struct([("route", pa.string()), ("tf", pa.bool_()), ("features", pa.list_(pa.float64())),
                           ("prediction", pa.float64()), ("label", pa.string()),
                           ("outputs", pa.map_(pa.string(), pa.float64())), ("nanos", pa.int64()),
                           ("stage", pa.string()), ("error", pa.string())])
    slot = pa.array([
        {"route": "tf:1", "tf": True, "features": [1.0, 2.0]},
        {"route": "pmml:1", "tf": False, "prediction": 7.0, "nanos": 5},
        None,
        {"route": "broken:1", "tf": True, "features": [3.0, 4.0]},
        {"route": "tf:1", "tf": True, "features": [5.0, 6.0]},
    ], slot_type)

    class Classes:
        output_name = "probs"

        def predict(self, x):
            return np.stack([x[:, 0], x[:, 1]], axis=1)  # class 1 wins

    def model_of(route):
        if route == "broken:1":
            raise RuntimeError("no such model\nwith a second line")
        return Classes()

    out = fill_slot(slot, model_of).to_pylist()
    assert out[0]["prediction"] == 1.0 and out[0]["label"] == "1" and dict(out[0]["outputs"]) == {"0": 1.0, "1": 2.0}
    assert out[1] == slot.to_pylist()[1], "a row scored in the JVM passes untouched"
    assert out[2] is None
    assert out[3]["stage"] == "score" and out[3]["error"] == "RuntimeError: no such model"
    assert out[4]["label"] == "1" and out[4]["prediction"] == 1.0


def test_batch_counts_are_read_as_the_python_model_says(spark):
    counts = spark.sparkContext._jvm.dev.scorestream.jvm.BatchCounts("1000,2000")
    parsed = BatchCounts.model_validate_json(counts.value())
    assert parsed.in_ == 0 and parsed.le == [0, 0] and parsed.routes == {} and parsed.workers == []
