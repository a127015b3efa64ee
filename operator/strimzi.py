"""Strimzi, as the spec names it: the KafkaUser and cluster CA Secrets, and KafkaTopic resources.

Pure. The Secrets are mounted into the driver and every executor (the job's Java and librdkafka
clients read them there) and read through the API by the operator (`operator_credentials`, for its
own librdkafka clients); topics, with spec.kafka.strimziTopics, are KafkaTopic resources that
Strimzi's Topic Operator creates (`kafka_topics`, `waiting_for`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import threading
from collections import OrderedDict
from typing import Any, Iterable, Mapping

from scorestream.api.v1alpha1.modelserving import KafkaSpec
from scorestream.config import KafkaCredentialFiles
from scorestream.kafka_auth import Credentials

# Where the driver and the executors find them; under /etc/scorestream, where no pod template may mount.
CA_DIR = "/etc/scorestream/kafka-ca"
AUTH_DIR = "/etc/scorestream/kafka-auth"
CA_VOLUME = "kafka-ca"
AUTH_VOLUME = "kafka-auth"
VOLUMES = (CA_VOLUME, AUTH_VOLUME)

KAFKA_TOPIC_GROUP = "kafka.strimzi.io"
# Newest first. Strimzi serves v1 since 0.49, v1beta2 until 0.52 / 1.0: the same KafkaTopic in both
# (its CRD converts with strategy None), so the newest the cluster serves is used.
KAFKA_TOPIC_VERSIONS = ("v1", "v1beta2")
KAFKA_TOPIC_KIND = "KafkaTopic"
CLUSTER_LABEL = "strimzi.io/cluster"
SHARED_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/managed-by")


class CredentialsError(LookupError):
    """A Secret or key that spec.kafka.tls or spec.kafka.authentication names is not there."""


# --- the job: files ---------------------------------------------------------------------------------

def _ca_path(i: int, key: str) -> str:
    return f"{i}/{key}"


def credential_files(kafka: KafkaSpec) -> KafkaCredentialFiles | None:
    """Where the job finds the credentials: paths in the mounted volumes."""
    if kafka.tls is None and kafka.authentication is None:
        return None
    files: dict[str, Any] = {"tls": kafka.tls is not None}
    if kafka.tls is not None:
        files["caFiles"] = [f"{CA_DIR}/{_ca_path(i, c.certificate)}" for i, c in enumerate(kafka.tls.trusted_certificates)]
    auth = kafka.authentication
    if auth is not None:
        files["mechanism"] = auth.type
        if auth.certificate_and_key is not None:
            files.update(certificateFile=f"{AUTH_DIR}/{auth.certificate_and_key.certificate}",
                         keyFile=f"{AUTH_DIR}/{auth.certificate_and_key.key}")
        elif auth.keystore is not None:
            files.update(keystoreFile=f"{AUTH_DIR}/{auth.keystore.keystore}",
                         keystorePasswordFile=f"{AUTH_DIR}/{auth.keystore.password}")
        elif auth.password_secret is not None:
            files.update(username=auth.username, passwordFile=f"{AUTH_DIR}/{auth.password_secret.password}")
    return KafkaCredentialFiles.model_validate(files)


def volumes(kafka: KafkaSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The volumes holding the credentials, and their read-only mounts: the same for the driver
    and the executors (Spark's Kafka consumers and producers run in both)."""
    vols: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if kafka.tls is not None and kafka.tls.trusted_certificates:
        vols.append({"name": CA_VOLUME, "projected": {"defaultMode": 0o440, "sources": [
            {"secret": {"name": c.secret_name, "items": [{"key": c.certificate, "path": _ca_path(i, c.certificate)}]}}
            for i, c in enumerate(kafka.tls.trusted_certificates)]}})
        mounts.append({"name": CA_VOLUME, "mountPath": CA_DIR, "readOnly": True})
    if kafka.authentication is not None:
        secret, keys = kafka.authentication.secret_keys()
        vols.append({"name": AUTH_VOLUME, "secret": {"secretName": secret, "defaultMode": 0o440,
                                                     "items": [{"key": k, "path": k} for k in keys]}})
        mounts.append({"name": AUTH_VOLUME, "mountPath": AUTH_DIR, "readOnly": True})
    return vols, mounts


# --- the operator: Secrets read through the API -------------------------------------------------------

def secrets_named(kafka: KafkaSpec) -> list[str]:
    """The Secrets the operator reads for its own clients."""
    names = [c.secret_name for c in (kafka.tls.trusted_certificates if kafka.tls else [])]
    if kafka.authentication is not None:
        names.append(kafka.authentication.secret_keys()[0])
    return list(dict.fromkeys(names))


def _value(secrets: Mapping[str, dict[str, Any] | None], namespace: str, name: str, key: str, what: str) -> bytes:
    secret = secrets.get(name)
    if secret is None:
        raise CredentialsError(f"Secret {namespace}/{name} ({what}) does not exist")
    data = secret.get("data") or {}
    if key not in data:
        raise CredentialsError(f"Secret {namespace}/{name} ({what}) has no key {key!r}"
                               f" (it has: {', '.join(sorted(data)) or 'none'})")
    try:
        return base64.b64decode(data[key], validate=True)
    except binascii.Error:
        raise CredentialsError(f"Secret {namespace}/{name} key {key!r} is not base64") from None


def _text(raw: bytes, namespace: str, name: str, key: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise CredentialsError(f"Secret {namespace}/{name} key {key!r} is not UTF-8 text") from None


def operator_credentials(kafka: KafkaSpec, namespace: str, secrets: Mapping[str, dict[str, Any] | None]
                         ) -> Credentials | None:
    """The credentials from the Secrets as read (`secrets`: by name, None where missing).
    A PKCS#12 keystore is checked (size, DER structure) and held in memory, in an anonymous
    file (`_keystore_file`), because librdkafka reads keystores from files only."""
    if kafka.tls is None and kafka.authentication is None:
        return None
    ca = []
    for c in kafka.tls.trusted_certificates if kafka.tls else []:
        text = _text(_value(secrets, namespace, c.secret_name, c.certificate, "kafka.tls.trustedCertificates"),
                     namespace, c.secret_name, c.certificate)
        ca.append(text if text.endswith("\n") else text + "\n")
    values: dict[str, Any] = {"tls": kafka.tls is not None, "ca_pem": "".join(ca) or None}
    auth = kafka.authentication
    if auth is not None:
        name, keys = auth.secret_keys()
        raw = [_value(secrets, namespace, name, k, "kafka.authentication") for k in keys]
        values["mechanism"] = auth.type
        if auth.certificate_and_key is not None:
            values.update(certificate_pem=_text(raw[0], namespace, name, keys[0]),
                          key_pem=_text(raw[1], namespace, name, keys[1]))
        elif auth.keystore is not None:
            values.update(keystore_location=_keystore_file(_checked_keystore(raw[0], namespace, name, keys[0])),
                          keystore_password=_text(raw[1], namespace, name, keys[1]))
        else:
            values.update(username=auth.username, password=_text(raw[0], namespace, name, keys[0]))
    return Credentials(**values)


# Strimzi's user.p12 is a few KiB (one certificate chain and its key); anything much larger is not a
# client keystore, and is refused before it takes memory beyond its Secret's.
MAX_KEYSTORE_BYTES = 64 * 1024
# Keystores held at once: every resource's reconcile builds its credentials, and a rotated or
# distinct keystore is a new entry, so the oldest are closed. Clients read the keystore when they
# are built (librdkafka's rd_kafka_new), so closing one later does not affect clients built before.
KEYSTORE_CACHE_SIZE = 64
_keystores: OrderedDict[str, int] = OrderedDict()  # sha256 -> memfd
_keystores_lock = threading.Lock()


def _checked_keystore(raw: bytes, namespace: str, name: str, key: str) -> bytes:
    """A PKCS#12 PFX as DER: one SEQUENCE spanning the whole value, opening with version 3 (RFC 7292)."""
    where = f"Secret {namespace}/{name} key {key!r}"
    if len(raw) > MAX_KEYSTORE_BYTES:
        raise CredentialsError(f"{where} is larger than a keystore ({len(raw)} bytes, at most {MAX_KEYSTORE_BYTES})")
    if len(raw) < 2 or raw[0] != 0x30:
        raise CredentialsError(f"{where} is not a PKCS#12 keystore (DER)")
    first = raw[1]
    if first < 0x80:
        length, head = first, 2
    else:
        n = first & 0x7F
        if not 1 <= n <= 3 or len(raw) < 2 + n:
            raise CredentialsError(f"{where} is not a PKCS#12 keystore (DER)")
        length, head = int.from_bytes(raw[2:2 + n], "big"), 2 + n
    if head + length != len(raw) or raw[head:head + 3] != b"\x02\x01\x03":
        raise CredentialsError(f"{where} is not a PKCS#12 keystore (DER, version 3)")
    return raw


def _keystore_file(content: bytes) -> str:
    """A path librdkafka can open that is only memory: an anonymous file (memfd), one per distinct
    keystore, at most KEYSTORE_CACHE_SIZE of them; nothing is written to a disk or left behind."""
    digest = hashlib.sha256(content).hexdigest()
    with _keystores_lock:
        fd = _keystores.get(digest)
        if fd is None:
            fd = os.memfd_create("scorestream-keystore", os.MFD_CLOEXEC)
            try:
                os.write(fd, content)  # at most MAX_KEYSTORE_BYTES: one write takes it whole
            except OSError:
                os.close(fd)
                raise
            _keystores[digest] = fd
            while len(_keystores) > KEYSTORE_CACHE_SIZE:
                os.close(_keystores.popitem(last=False)[1])
        else:
            _keystores.move_to_end(digest)
        return f"/proc/self/fd/{fd}"


# --- KafkaTopic resources -----------------------------------------------------------------------------

def resource_name(topic: str) -> str:
    """A KafkaTopic's name for a topic: Kafka allows '_', '.' and capitals, names do not; a digest
    keeps two topics that differ only there apart."""
    name = re.sub(r"[^a-z0-9-]+", "-", topic.lower()).strip("-")[:50] or "topic"
    return name if name == topic else f"{name}-{hashlib.sha256(topic.encode()).hexdigest()[:8]}"


def kafka_topic_api_version(served: Iterable[str]) -> str:
    """The newest KafkaTopic version among those the cluster serves; the oldest this operator
    knows where it serves none of them (its requests then fail, and say so)."""
    chosen = next((v for v in KAFKA_TOPIC_VERSIONS if v in set(served)), KAFKA_TOPIC_VERSIONS[-1])
    return f"{KAFKA_TOPIC_GROUP}/{chosen}"


def kafka_topics(kafka: KafkaSpec, namespace: str, owner: dict[str, Any], partitions: int,
                 labels: Mapping[str, str], models_topic: str, api_version: str) -> list[tuple[dict[str, Any], bool]]:
    """The KafkaTopics to make, each with whether the ModelServing owns it. The output and
    dead-letter topics are its own (deleted with it, and by Strimzi their topics); the models
    topics are shared by the ModelServings that name them, so none of them owns theirs: the first
    makes it, and deleting one never deletes the others' models. `models_topic`: the one the
    resource's models go to (its own, or the namespace's the operator assigns)."""
    assert kafka.strimzi_topics is not None
    from scorestream.operator.topics import keyless_topic_config

    def topic(name: str, parts: int, config: dict[str, str], owned: bool) -> tuple[dict[str, Any], bool]:
        spec: dict[str, Any] = {"topicName": name, "partitions": parts, "config": config}
        if kafka.strimzi_topics.replicas is not None:
            spec["replicas"] = kafka.strimzi_topics.replicas
        # A shared topic's KafkaTopic carries none of one resource's labels: it is not that one's.
        own = labels if owned else {k: v for k, v in labels.items() if k in SHARED_LABELS}
        meta: dict[str, Any] = {"name": resource_name(name), "namespace": namespace,
                                "labels": {**own, CLUSTER_LABEL: kafka.strimzi_topics.cluster}}
        if owned:
            meta["ownerReferences"] = [owner]
        return {"apiVersion": api_version, "kind": KAFKA_TOPIC_KIND, "metadata": meta, "spec": spec}, owned

    out = [topic(kafka.output_topic, partitions, {}, True), topic(kafka.dead_letter_topic, partitions, {}, True),
           topic(models_topic, 1, {"cleanup.policy": "compact"}, False)]
    if kafka.keyless_models is not None:
        out.append(topic(kafka.keyless_models.topic, 1, keyless_topic_config(kafka.keyless_models), False))
    return out


def waiting_for(current: Mapping[str, dict[str, Any] | None]) -> tuple[str | None, str | None]:
    """What the KafkaTopics (as read, by name) say: (why the driver must wait, what is wrong
    meanwhile), each None when there is nothing to say. Strimzi's Topic Operator sets Ready on
    status, and `status.topicName` once it manages a topic: a KafkaTopic that never got that far
    has no topic yet, and the driver waits for it; one that has and is not Ready now (a change
    Strimzi refuses, a broker away) has its topic, and the job goes on serving while it is reported."""
    waiting, failing = [], []
    for name, obj in sorted(current.items()):
        status = (obj or {}).get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        generation = ((obj or {}).get("metadata") or {}).get("generation")
        if obj is None:
            waiting.append(f"KafkaTopic {name} does not exist")
        elif ready is None or ready.get("status") != "True":
            why = (ready or {}).get("message") or (ready or {}).get("reason") or "no Ready condition yet"
            (failing if status.get("topicName") else waiting).append(f"KafkaTopic {name} is not Ready ({why})")
        elif generation is not None and status.get("observedGeneration", generation) < generation:
            failing.append(f"KafkaTopic {name} is not Ready for its generation {generation} yet")
    return ("waiting for Strimzi's Topic Operator: " + "; ".join(waiting) if waiting else None,
            "; ".join(failing) or None)
