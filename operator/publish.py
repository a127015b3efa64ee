"""A spec.model becomes a model message on the models topic: the declarative side of a rollout.

The descriptor is a pure function of the spec, and its rollout id a digest of the descriptor, so
publishing is idempotent end to end: the operator skips a rollout id its status already records,
and a message published twice (a crash between producing and recording it) installs nothing new,
because the job ignores a model identical to the one it serves.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import threading
import urllib.parse
from collections import OrderedDict

from scorestream import naming
from scorestream.api.descriptor import JSON_CONTENT_TYPE, ModelDescriptor
from scorestream.api.v1alpha1.modelserving import URI_CREDENTIALS_MESSAGE, ModelServingSpec, uri_credentials
from scorestream.api.verification import BadSample, Sample, read_records
from scorestream.operator.models_route import Route

ROLLOUT_HEADER = "scorestream-rollout"


class PublishError(RuntimeError):
    """The models topic did not take the message."""


def decode_data_uri(uri: str) -> bytes:
    """RFC 2397: data:[<mediatype>][;base64],<data>."""
    head, sep, payload = uri[len("data:"):].partition(",")
    if not sep:
        raise ValueError("a data: URI needs a ',' before its content")
    if head.endswith(";base64"):
        try:
            return base64.b64decode(payload, validate=True)
        except binascii.Error as e:
            raise ValueError(f"a data: URI's base64 content does not decode: {e}") from None
    return urllib.parse.unquote_to_bytes(payload)


def descriptor(spec: ModelServingSpec) -> ModelDescriptor:
    """The models-topic message for spec.model. A data: URI travels inline; anything else by
    location, fetched by the job (file:// paths are the driver pod's mounts)."""
    m = spec.model
    if m is None:
        raise ValueError("spec.model is not set")
    common = dict(name=m.name, version=m.version, description=m.description, dataType=spec.data_type,
                  format=m.format, inputs=spec.input.fields if m.format == "tensorflow" and spec.input.fields else None)
    # The spec's validation refused these already; a model copied from the status (rollback-to)
    # is built without it, and a message once published stays on the topic.
    for where, uri in (("spec.model.uri", m.uri), ("spec.model.verification.uri", m.verification and m.verification.uri),
                       ("spec.model.baseline.uri", m.baseline and m.baseline.uri)):
        what = uri and uri_credentials(uri)
        if what:
            raise ValueError(f"{where} {URI_CREDENTIALS_MESSAGE.format(what=what)}")
    for name, (uri, field, rules) in _samples_of(m).items():
        common[name] = _sample(uri, field, **rules)
    if m.uri.startswith("data:"):
        return ModelDescriptor(data=decode_data_uri(m.uri), **common)
    return ModelDescriptor(location=m.uri, **common)


# Parsed data: samples by digest. Every reconcile rebuilds the descriptor (rollout.plan, and
# again for a candidate): a sample is parsed once per content, not once per turn, and a sample that
# does not parse is remembered as such. The cache holds at most SAMPLE_CACHE_SIZE samples and
# SAMPLE_CACHE_CELLS fields of records in all (a parsed field costs about 40 bytes: 40 MB), the
# least recently used going first.
SAMPLE_CACHE_SIZE = 64
SAMPLE_CACHE_CELLS = 1_000_000
_samples: OrderedDict[str, tuple[Sample | None, str | None, int]] = OrderedDict()  # (sample, error, cells)
_samples_lock = threading.Lock()  # descriptor() runs on the event loop and in executor threads
# A cached Sample is shared by the descriptors built from it: descriptors are values, never edited.


class BadSampleURI(ValueError):
    """spec.model's verification or baseline data: URI does not hold readable records."""


def _samples_of(m) -> dict[str, tuple[str, str, dict]]:
    """The descriptor's samples of spec.model: its field, and (uri, the spec's field, the rules)."""
    out = {}
    if m.verification is not None:
        v = m.verification
        out["verification"] = (v.uri, "spec.model.verification",
                               dict(minShare=v.min_share, expectedField=v.expected_field, tolerance=v.tolerance))
    if m.baseline is not None:
        out["baseline"] = (m.baseline.uri, "spec.model.baseline", {})
    return out


def _sample(uri: str, field: str, **rules) -> Sample:
    """spec.model's verification or baseline as the descriptor carries it: data: records inline,
    else where they are. Parsing is linear in the uri, which the CRD bounds (262,144 characters),
    with bounded columns and records (scorestream.api.verification), and done once per content:
    `prepare` does it in a thread, so that the reconcile's own call finds it parsed."""
    if not uri.startswith("data:"):
        return Sample(location=uri, **rules)
    key = hashlib.sha256("\0".join([uri, field, repr(sorted(rules.items()))]).encode()).hexdigest()
    with _samples_lock:
        hit = _samples.get(key)
        if hit is not None:
            _samples.move_to_end(key)
    if hit is None:
        hit = _parse(uri, field, rules)
        with _samples_lock:
            _samples[key] = hit
            while len(_samples) > SAMPLE_CACHE_SIZE or (
                    len(_samples) > 1 and sum(c for _, _, c in _samples.values()) > SAMPLE_CACHE_CELLS):
                _samples.popitem(last=False)
    sample, error, _ = hit
    if error is not None:
        raise BadSampleURI(error)
    return sample


def _parse(uri: str, field: str, rules: dict) -> tuple[Sample | None, str | None, int]:
    try:
        text = decode_data_uri(uri).decode()
    except UnicodeDecodeError:
        return None, f"{field}: the data: URI is not UTF-8 text", 0
    except ValueError as e:
        return None, f"{field}: {e}", 0
    try:
        records = read_records(text, field, uri)
    except BadSample as e:
        return None, str(e), 0
    return Sample(records=records, **rules), None, sum(len(r) for r in records)


async def prepare(spec: ModelServingSpec) -> str | None:
    """Parses spec.model's data: samples in a thread (into the cache `descriptor` reads): a
    reconcile awaits it before it plans, and its event loop then does no tenant-sized parsing.
    Returns why a sample does not parse (an invalid spec the CRD's schema cannot see), or None."""
    if spec.model is None:
        return None
    for uri, field, rules in _samples_of(spec.model).values():
        if not uri.startswith("data:"):
            continue
        try:
            await asyncio.to_thread(_sample, uri, field, **rules)
        except BadSampleURI as e:
            return str(e)  # remembered too: descriptor() raises it again for this content
    return None


def rollout_id(d: ModelDescriptor) -> str:
    return hashlib.sha256(d.to_json_bytes()).hexdigest()[:16]


def publish(route: Route, d: ModelDescriptor, rid: str, namespace: str, name: str, timeout: float = 10.0) -> None:
    """Blocking (confluent-kafka): run it in a thread. Returns once the broker acknowledged the
    message (acks=all, idempotent producer); `rid` is `rollout_id(d)`, sent as a header. `route`
    (models_route.route) names the topic and the principal. The key addresses the resource
    (namespace, name), so no other ModelServing on a shared topic takes it; a candidate goes to its
    own key, so compaction keeps the serving model and the candidate."""
    _send(route, naming.model_key(namespace, name, d.data_type, candidate=d.candidate is not None),
          d.to_json_bytes(), [("content-type", JSON_CONTENT_TYPE.encode()), (ROLLOUT_HEADER, rid.encode()),
                              ("scorestream-resource", f"{namespace}/{name}".encode())], d.label, timeout)


def withdraw(route: Route, data_type: str, namespace: str, name: str, timeout: float = 10.0) -> None:
    """A tombstone on the resource's candidate key: its job drops the candidate, compaction the message."""
    _send(route, naming.model_key(namespace, name, data_type, candidate=True), None,
          [("scorestream-resource", f"{namespace}/{name}".encode())], f"the withdrawal of the {data_type} candidate",
          timeout)


def _send(route: Route, key: str, value: bytes | None, headers: list[tuple[str, bytes]], what: str,
          timeout: float) -> None:
    from confluent_kafka import Producer

    from scorestream.operator.kafkabound import client_caps, client_timeouts
    from scorestream.operator.kafkalog import client_config

    # message.timeout.ms 0 would be "forever".
    producer = Producer(client_config({**route.properties, "bootstrap.servers": route.bootstrap_servers,
                                       "enable.idempotence": True, "acks": "all",
                                       "message.timeout.ms": max(1, int(timeout * 1000)),
                                       **client_timeouts(timeout), **client_caps()}))
    failures: list[str] = []
    producer.produce(route.topic, key=key.encode(), value=value, headers=headers,
                     on_delivery=lambda err, _msg: failures.append(str(err)) if err else None)
    left = producer.flush(timeout)
    if left or failures:
        who = "the operator's principal" if route.by_operator else "the resource's Kafka credentials"
        raise PublishError(f"models topic {route.topic!r} did not take {what} (written with {who}): "
                           f"{'; '.join(failures) or 'no acknowledgement in time'}")
