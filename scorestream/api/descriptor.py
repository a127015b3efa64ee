"""Model messages on the models topic: what a model is, and where its bytes are.

Two encodings are accepted: scorestream's JSON descriptor (``content-type: application/json``, or a
value starting with ``{`` or ``[``), and the report's protobuf ``ModelDescriptor``, so that a producer
written for *Serving Machine Learning Models* works unchanged.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Annotated, Literal

from google.protobuf.message import DecodeError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from scorestream.api import messages
from scorestream.api.verification import Sample

Format = Literal["pmml", "tensorflow"]
JSON_CONTENT_TYPE = "application/json"

# A message's words travel on: into /models, /stats (which the operator reads at most 1 MiB of),
# the status, Events and Prometheus labels. Whoever may write the models topic writes them, so
# each is bounded as a ModelServing's spec.model bounds it (scorestream/api/v1alpha1/modelserving.py).
MAX_NAME = 253
MAX_VERSION = 128
MAX_DESCRIPTION = 1024
MAX_DATA_TYPE = 128
MAX_INPUTS = 4096  # a TensorFlow model's input fields
MAX_FIELD_NAME = 256  # an input field's or a tensor's name


class CandidateRole(BaseModel):
    """A model offered next to the serving one instead of replacing it (key ``<dataType>/candidate``)."""

    model_config = ConfigDict(extra="forbid")

    # Canary: `percent` of the records, picked by the hash of their key, are scored by the
    # candidate instead. Shadow: the candidate scores every record too; only the serving model's
    # predictions are written.
    strategy: Literal["Canary", "Shadow"]
    percent: float = Field(0.0, ge=0.0, le=100.0)

    @property
    def basis_points(self) -> int:
        return round(self.percent * 100) if self.strategy == "Canary" else 0


class TensorFlowGraph(BaseModel):
    """Set on a TensorFlow descriptor: its bytes are a frozen graph (a binary GraphDef, all
    variables constants), not a SavedModel archive. A GraphDef has no signature, so the tensors to
    feed and fetch are named here (``op:0`` or ``op``); one left out is inferred where the graph has
    exactly one Placeholder (the input) or exactly one sink, an op no other op reads (the output)."""

    model_config = ConfigDict(extra="forbid")

    # The one dense (None, n) float input, fed the record's fields in `inputs` order.
    input: str | None = Field(None, min_length=1, max_length=MAX_FIELD_NAME)
    output: str | None = Field(None, min_length=1, max_length=MAX_FIELD_NAME)


class BadModelMessage(ValueError):
    """A message on the models topic that is not a model descriptor, with what it says of itself
    where that could be read (so a rejection names the model, not only where its message was)."""

    def __init__(self, reason: str, name: str | None = None, version: str | None = None,
                 data_type: str | None = None):
        super().__init__(reason)
        # What the message says of itself, cut to the bounds a valid one keeps: a rejection shows it.
        self.name, self.version, self.data_type = (_cut(name, MAX_NAME), _cut(version, MAX_VERSION),
                                                   _cut(data_type, MAX_DATA_TYPE))

    @property
    def label(self) -> str | None:
        return f"{self.name}:{self.version}" if self.name and self.version else self.name


def _cut(text: str | None, limit: int) -> str | None:
    if not text:
        return None
    return text if len(text) <= limit else text[:limit - 1] + "…"


class ModelDescriptor(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(min_length=1, max_length=MAX_NAME)
    version: str = Field(min_length=1, max_length=MAX_VERSION)
    description: str = Field("", max_length=MAX_DESCRIPTION)
    data_type: str = Field(alias="dataType", min_length=1, max_length=MAX_DATA_TYPE)
    format: Format
    # Ordered input fields for a TensorFlow model with one dense input tensor.
    inputs: list[Annotated[str, Field(max_length=MAX_FIELD_NAME)]] | None = Field(None, max_length=MAX_INPUTS)
    # Set (format tensorflow): `data`/`location` is a frozen GraphDef, not a SavedModel.
    graph: TensorFlowGraph | None = None
    # Exactly one of: the model itself (a PMML document, a SavedModel as a zip/tar archive, or a
    # frozen graph's GraphDef bytes),
    # or where to get it (file://, http(s)://, a path, s3://bucket/key or gs://bucket/key: docs/model-locations.md).
    data: bytes | None = None
    location: str | None = None
    # Set: a candidate (canary or shadow) next to the serving model, not a replacement.
    candidate: CandidateRole | None = None
    # Records to score before the model serves (besides a PMML's own <ModelVerification>).
    verification: Sample | None = None
    # Records drawn like the data the model will score: its drift baseline (unset: `verification`).
    baseline: Sample | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ModelDescriptor:
        if (self.data is None) == (self.location is None):
            raise ValueError("exactly one of data and location must be set")
        if self.graph is not None and self.format != "tensorflow":
            raise ValueError("graph (a frozen TensorFlow graph) needs format tensorflow")
        return self

    @property
    def label(self) -> str:
        return f"{self.name}:{self.version}"

    def to_json_bytes(self) -> bytes:
        doc = self.model_dump(by_alias=True, exclude_none=True, exclude={"data"})
        if self.data is not None:
            doc["data"] = base64.b64encode(self.data).decode()
        return json.dumps(doc).encode()


# ModelDescriptor.modeltype -> (format, graph): TENSORFLOW is a frozen GraphDef, its tensor names
# inferred (the report's message carries none); TENSORFLOWSAVED a SavedModel.
_PROTO_FORMATS: dict[int, tuple[Format, TensorFlowGraph | None]] = {
    0: ("tensorflow", TensorFlowGraph()),
    1: ("tensorflow", None),
    2: ("pmml", None),
}


def decode(value: bytes | None, headers: dict[str, bytes] | None = None) -> ModelDescriptor:
    if not value:
        raise BadModelMessage("empty model message")
    # A header may be present with no value (null in Kafka).
    ctype = ((headers or {}).get("content-type") or b"").decode(errors="replace")
    if ctype == JSON_CONTENT_TYPE or (not ctype and value[:1] in (b"{", b"[")):
        return _decode_json(value)
    return _decode_proto(value)


def _decode_json(value: bytes) -> ModelDescriptor:
    try:
        doc = json.loads(value)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadModelMessage(f"model descriptor is not valid JSON: {e}") from None
    except RecursionError:
        raise BadModelMessage("model descriptor is not valid JSON: nested too deeply") from None
    if not isinstance(doc, dict):
        raise BadModelMessage("model descriptor must be a JSON object")
    # What the message says it is, so that a rejection names the model whatever is wrong with it.
    said = [v if isinstance(v, str) else None for v in (doc.get("name"), doc.get("version"), doc.get("dataType"))]
    if isinstance(doc.get("data"), str):
        try:
            doc["data"] = base64.b64decode(doc["data"], validate=True)
        except ValueError:
            raise BadModelMessage("model descriptor field 'data' is not base64", *said) from None
    try:
        return ModelDescriptor.model_validate(doc)
    except ValidationError as e:
        raise BadModelMessage(_explain(e), *said) from None


def _decode_proto(value: bytes) -> ModelDescriptor:
    msg = messages.ModelDescriptorProto()
    try:
        msg.ParseFromString(value)
    except DecodeError as e:
        raise BadModelMessage(f"not a JSON descriptor nor a protobuf ModelDescriptor: {e}") from None
    source = msg.WhichOneof("MessageContent")
    content = msg.data if source == "data" else msg.location.encode()
    # The report's message has no version: the content names it.
    version = "sha256:" + hashlib.sha256(content).hexdigest()[:12] if source is not None else None
    if msg.modeltype not in _PROTO_FORMATS:  # a proto3 enum keeps values it does not know
        raise BadModelMessage(f"ModelDescriptor.modeltype {msg.modeltype} is unknown", msg.name or msg.dataType,
                              version, msg.dataType)
    fmt, graph = _PROTO_FORMATS[msg.modeltype]
    if source is None:
        raise BadModelMessage("ModelDescriptor has neither data nor location", msg.name or msg.dataType, None,
                              msg.dataType)
    try:
        return ModelDescriptor(
            name=msg.name or msg.dataType,
            version=version,
            description=msg.description,
            dataType=msg.dataType,
            format=fmt,
            graph=graph,
            data=msg.data if source == "data" else None,
            location=msg.location if source == "location" else None,
        )
    except ValidationError as e:
        raise BadModelMessage(_explain(e), msg.name or msg.dataType, version, msg.dataType) from None


def _explain(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        where = ".".join(str(p) for p in err["loc"]) or "descriptor"
        parts.append(f"{where}: {err['msg']}")
    return "invalid model descriptor: " + "; ".join(parts)
