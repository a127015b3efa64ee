"""The report's protobuf messages (WineRecord, ModelDescriptor), built without protoc.

Producers written for *Serving Machine Learning Models* send these; scorestream accepts them
unchanged. The descriptors are constructed in code so that no generated module or compiler is
needed at build time.
"""

from __future__ import annotations

from functools import cache

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

WINE_FIELDS = (
    "fixed_acidity",
    "volatile_acidity",
    "citric_acid",
    "residual_sugar",
    "chlorides",
    "free_sulfur_dioxide",
    "total_sulfur_dioxide",
    "density",
    "pH",
    "sulphates",
    "alcohol",
)

_F = descriptor_pb2.FieldDescriptorProto
PACKAGE = "com.lightbend.model"


@cache
def _pool() -> descriptor_pool.DescriptorPool:
    fd = descriptor_pb2.FileDescriptorProto(name="scorestream/report.proto", package=PACKAGE, syntax="proto3")

    wine = fd.message_type.add(name="WineRecord")
    for number, name in enumerate(WINE_FIELDS, start=1):
        wine.field.add(name=name, number=number, type=_F.TYPE_DOUBLE, label=_F.LABEL_OPTIONAL)
    wine.field.add(name="dataType", number=12, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    wine.field.add(name="ts", number=13, type=_F.TYPE_INT64, label=_F.LABEL_OPTIONAL)

    md = fd.message_type.add(name="ModelDescriptor")
    kind = md.enum_type.add(name="ModelType")
    for number, name in enumerate(("TENSORFLOW", "TENSORFLOWSAVED", "PMML")):
        kind.value.add(name=name, number=number)
    md.oneof_decl.add(name="MessageContent")
    md.field.add(name="name", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    md.field.add(name="description", number=2, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    md.field.add(name="dataType", number=3, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    md.field.add(
        name="modeltype",
        number=4,
        type=_F.TYPE_ENUM,
        type_name=f".{PACKAGE}.ModelDescriptor.ModelType",
        label=_F.LABEL_OPTIONAL,
    )
    md.field.add(name="data", number=5, type=_F.TYPE_BYTES, label=_F.LABEL_OPTIONAL, oneof_index=0)
    md.field.add(name="location", number=6, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL, oneof_index=0)

    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return pool


def message_class(name: str) -> type:
    return message_factory.GetMessageClass(_pool().FindMessageTypeByName(f"{PACKAGE}.{name}"))


def WineRecord(**fields):  # noqa: N802 - reads like the message it builds
    return message_class("WineRecord")(**fields)


def ModelDescriptorProto(**fields):  # noqa: N802
    return message_class("ModelDescriptor")(**fields)


_SCALAR_TYPES = {
    _F.TYPE_DOUBLE: "double",
    _F.TYPE_FLOAT: "float",
    _F.TYPE_INT64: "int64",
    _F.TYPE_UINT64: "uint64",
    _F.TYPE_INT32: "int32",
    _F.TYPE_UINT32: "uint32",
    _F.TYPE_FIXED64: "fixed64",
    _F.TYPE_FIXED32: "fixed32",
    _F.TYPE_SFIXED64: "sfixed64",
    _F.TYPE_SFIXED32: "sfixed32",
    _F.TYPE_SINT64: "sint64",
    _F.TYPE_SINT32: "sint32",
    _F.TYPE_BOOL: "bool",
    _F.TYPE_ENUM: "enum",
    _F.TYPE_STRING: "string",
    _F.TYPE_BYTES: "bytes",
}


def field_table(message_type: str, descriptor_file: str | None = None) -> dict[str, list[str]]:
    """``{"<number>": [name, type]}`` for a flat message: what the JVM decoder reads records by."""
    if descriptor_file is None:
        pool = _pool()
        full = message_type if "." in message_type else f"{PACKAGE}.{message_type}"
    else:
        fds = descriptor_pb2.FileDescriptorSet()
        with open(descriptor_file, "rb") as f:
            fds.ParseFromString(f.read())
        pool = descriptor_pool.DescriptorPool()
        for fd in fds.file:
            pool.Add(fd)
        full = message_type
    try:
        desc = pool.FindMessageTypeByName(full)
    except KeyError:
        raise ValueError(f"protobuf message type {message_type!r} not found") from None
    table = {}
    for f in desc.fields:
        if f.type == _F.TYPE_MESSAGE or f.type == _F.TYPE_GROUP:
            raise ValueError(f"{message_type}.{f.name}: nested messages are not supported")
        if f.is_repeated:
            raise ValueError(f"{message_type}.{f.name}: repeated fields are not supported")
        table[str(f.number)] = [f.name, _SCALAR_TYPES[f.type]]
    return table
