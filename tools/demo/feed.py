"""Producers for the demo, the tests and the benchmarks: wine records and model messages."""

from __future__ import annotations

import csv
import json
from importlib import resources
from typing import Iterable, Sequence

from scorestream import naming
from scorestream.api import messages
from scorestream.api.descriptor import JSON_CONTENT_TYPE, ModelDescriptor

# The CSV's column names; records carry them as JSON keys (PMML names, spaces and all).
WINE_COLUMNS = (
    "fixed acidity",
    "volatile acidity",
    "citric acid",
    "residual sugar",
    "chlorides",
    "free sulfur dioxide",
    "total sulfur dioxide",
    "density",
    "pH",
    "sulphates",
    "alcohol",
)


def wine_rows(path: str | None = None) -> list[list[float]]:
    """The wine-quality rows: 11 features then quality. The packaged copy unless a path is given."""
    if path is None:
        text = resources.files("scorestream.tools.demo").joinpath("data/winequality_red.csv").read_text()
    else:
        with open(path) as f:
            text = f.read()
    return [[float(x) for x in row] for row in csv.reader(text.splitlines(), delimiter=";") if row]


def wine_json(row: Sequence[float], data_type: str = "wine") -> bytes:
    doc = {"dataType": data_type}
    doc.update(zip(WINE_COLUMNS, row[:11]))
    return json.dumps(doc).encode()


def wine_records(rows, data_type: str = "wine", start: int = 0) -> list[tuple[bytes, bytes]]:
    """(key, JSON value) pairs; keys are unique per dataType, so tests can match outputs to inputs."""
    return [(f"{data_type}-{start + i}".encode(), wine_json(r, data_type)) for i, r in enumerate(rows)]


def wine_proto(row: Sequence[float], data_type: str = "wine", ts: int = 0) -> bytes:
    fields = dict(zip(messages.WINE_FIELDS, row[:11]))
    return messages.WineRecord(dataType=data_type, ts=ts, **fields).SerializeToString()


def producer(bootstrap: str, **conf):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes]],
    partitions: int = 1,
    headers: list | None = None,
) -> int:
    """Produce (key, value) pairs round-robin over partitions and wait for every delivery."""
    p = producer(bootstrap)
    errors: list = []

    def cb(err, _msg):
        if err is not None:
            errors.append(err)

    n = 0
    for i, (key, value) in enumerate(records):
        _produce(p, topic, key, value, i % partitions, headers, cb)
        n += 1
    p.flush(60)
    if errors:
        raise RuntimeError(f"{len(errors)} deliveries failed: {errors[0]}")
    return n


def _produce(p, topic, key, value, part, headers, cb) -> None:
    while True:
        try:
            p.produce(topic, value, key=key, partition=part, headers=headers, on_delivery=cb)
            return
        except BufferError:
            p.poll(0.05)


def model_key(to: tuple[str, str] | None, data_type: str, candidate: bool = False) -> bytes:
    """The key a model message goes to: addressed to one ModelServing (``to`` = namespace, name),
    or the report's dataType key (``to`` = None) for a job that opted in."""
    if to is None:
        return naming.unaddressed_model_key(data_type, candidate).encode()
    return naming.model_key(*to, data_type, candidate).encode()


def publish_model(bootstrap: str, topic: str, descriptor: ModelDescriptor, to: tuple[str, str] | None) -> None:
    """Publish a JSON descriptor to one ModelServing (``to`` = namespace, name) or unaddressed
    (None: the report's dataType key), keyed by role too so that compaction keeps the latest."""
    produce(
        bootstrap,
        topic,
        [(model_key(to, descriptor.data_type, descriptor.candidate is not None), descriptor.to_json_bytes())],
        headers=[("content-type", JSON_CONTENT_TYPE.encode())],
    )


def withdraw_candidate(bootstrap: str, topic: str, data_type: str, to: tuple[str, str] | None) -> None:
    """A tombstone on the candidate's key: the job drops the candidate, compaction the message."""
    produce(bootstrap, topic, [(model_key(to, data_type, candidate=True), None)])


def publish_raw(bootstrap: str, topic: str, key: bytes | None, value: bytes) -> None:
    produce(bootstrap, topic, [(key, value)])
