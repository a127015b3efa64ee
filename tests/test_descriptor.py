"""Model messages: scorestream's JSON descriptor and the report's protobuf ModelDescriptor."""

from __future__ import annotations

import base64
import json

import pytest

from scorestream.api import descriptor, messages
from scorestream.api.descriptor import BadModelMessage, ModelDescriptor


def test_json_round_trip():
    d = ModelDescriptor(name="tree", version="7", dataType="wine", format="pmml", data=b"<PMML/>")
    back = descriptor.decode(d.to_json_bytes(), {"content-type": b"application/json"})
    assert back == d
    assert back.label == "tree:7"


def test_report_protobuf_descriptor_is_accepted():
    msg = messages.ModelDescriptorProto(name="wine-tree", description="d", dataType="wine", modeltype=2, data=b"<PMML/>")
    d = descriptor.decode(msg.SerializeToString())
    assert (d.name, d.data_type, d.format, d.data) == ("wine-tree", "wine", "pmml", b"<PMML/>")
    assert d.version.startswith("sha256:")
    loc = messages.ModelDescriptorProto(name="tf", dataType="wine", modeltype=1, location="/models/tf/1")
    d = descriptor.decode(loc.SerializeToString())
    assert (d.format, d.location, d.data, d.graph) == ("tensorflow", "/models/tf/1", None, None)


def test_report_frozen_graph_is_a_tensorflow_graph_with_inferred_names():
    msg = messages.ModelDescriptorProto(name="graph", dataType="wine", modeltype=0, data=b"graphdef")
    d = descriptor.decode(msg.SerializeToString())
    assert (d.format, d.data, d.graph) == ("tensorflow", b"graphdef", descriptor.TensorFlowGraph())
    assert d.version.startswith("sha256:")


def test_json_frozen_graph_round_trip():
    d = ModelDescriptor(name="g", version="1", dataType="wine", format="tensorflow", data=b"graphdef",
                        graph=descriptor.TensorFlowGraph(input="features:0", output="Identity:0"))
    doc = json.loads(d.to_json_bytes())
    assert doc["graph"] == {"input": "features:0", "output": "Identity:0"}
    assert descriptor.decode(d.to_json_bytes()) == d


@pytest.mark.parametrize(
    "value,reason",
    [
        (b"", "empty"),
        (b"{not json", "not valid JSON"),
        (b"[1]", "must be a JSON object"),
        (json.dumps({"name": "x", "version": "1", "dataType": "w", "format": "onnx", "data": "AA=="}).encode(), "format"),
        (json.dumps({"name": "x", "version": "1", "dataType": "w", "format": "pmml"}).encode(), "exactly one of data and location"),
        (json.dumps({"name": "x", "version": "1", "dataType": "w", "format": "pmml", "data": "%%%"}).encode(), "not base64"),
        (json.dumps({"name": "x", "version": "1", "dataType": "w", "format": "pmml", "data": "AA==",
                     "graph": {}}).encode(), "graph .* needs format tensorflow"),
        (json.dumps({"name": "x", "version": "1", "dataType": "w", "format": "tensorflow", "data": "AA==",
                     "graph": {"inputs": ["a"]}}).encode(), "graph.inputs"),
        (messages.ModelDescriptorProto(name="g", dataType="w", modeltype=7, data=b"x").SerializeToString(),
         "modeltype 7 is unknown"),
        (messages.ModelDescriptorProto(name="g", dataType="w", modeltype=2).SerializeToString(), "neither data nor location"),
        (b"\xff\xff\xff\xff", "nor a protobuf ModelDescriptor"),
    ],
)
def test_bad_messages_are_rejected_with_a_reason(value, reason):
    with pytest.raises(BadModelMessage, match=reason):
        descriptor.decode(value)


def test_wine_record_field_table():
    table = messages.field_table("WineRecord")
    assert table["1"] == ["fixed_acidity", "double"]
    assert table["12"] == ["dataType", "string"]
    assert table["13"] == ["ts", "int64"]
    assert len(table) == 13
    with pytest.raises(ValueError, match="not found"):
        messages.field_table("NoSuchMessage")
    assert base64.b64encode(b"x")  # base64 stays importable for the JSON path
