"""The ModelServing resource: spec and status as typed models, the one source of the CRD.

The attribute docstrings are the CRD's field descriptions (`kubectl explain modelserving.spec`).
A cross-field rule is written twice on purpose, once as CEL for the API server and once as a
pydantic validator for `scorestream render` and the operator; `tests/test_crd.py` evaluates every
CEL rule against the same examples as the validator, so the two cannot drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Iterable, Literal

from pydantic import ConfigDict, Field, StringConstraints, field_validator, model_validator

from scorestream.config import (
    _K8S_NAME,
    _TOPIC,
    DEFAULT_MODELS_TOPIC,
    DURATION_PATTERN,
    EXACTLY_ONCE_KAFKA,
    EXACTLY_ONCE_KAFKA_KEYS,
    EXACTLY_ONCE_NO_SPECULATION,
    KEYLESS_MESSAGE,
    NOT_MODELS_PREFIX_MESSAGE,
    REAL_TIME_NO_MAX_OFFSETS,
    UNADDRESSED_MESSAGE,
    WARM_UP_BATCHES,
    Strict,
    TriggerRules,
    check_delivery,
    check_real_time_offsets,
    check_topics,
    duration_seconds,
)
from scorestream.naming import GROUP, MODELS_TOPIC_PREFIX

VERSION = "v1alpha1"
KIND = "ModelServing"
PLURAL = "modelservings"
SINGULAR = "modelserving"
SHORT_NAMES = ["ms"]
API_VERSION = f"{GROUP}/{VERSION}"

# Child objects are named `<name>-driver` etc. and the driver's pod `<name>-driver-0`: a Service
# name is a DNS-1035 label (≤ 63 characters, starting with a letter).
MAX_NAME_LENGTH = 50
_DNS_1035 = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# CEL can reach metadata.name: child names are built from it and must stay valid.
NAME_RULE = {
    "rule": f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && self.metadata.name.matches('{_DNS_1035}')",
    "message": f"metadata.name must be a DNS-1035 label of at most {MAX_NAME_LENGTH} characters"
               " (lower case letters, digits and '-', starting with a letter): child objects are named after it",
}
_QUANTITY = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_DATA_TYPE = r"^[A-Za-z0-9._-]{1,128}$"
# Entries of spark.conf and kafka.properties: bounds the API server's cost of the CEL rules over them.
MAX_SETTINGS = 256
# Nesting of the free-form objects a spec carries (pod templates): a real PodSpec is at most about
# a dozen levels deep. The API server takes objects up to 10,000 levels, and every recursive walk
# of the operator (the template merge, copies, YAML) would spend its stack on them (issue 48).
MAX_FREE_FORM_DEPTH = 32


def free_form_depth_error(value: Any, limit: int = MAX_FREE_FORM_DEPTH) -> str | None:
    """Why `value` nests too deeply (objects and lists), or None. Iterative: it must not recurse
    on what it is checking."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return f"nests objects and lists more than {limit} levels deep"
        stack.extend((c, depth + 1) for c in children)
    return None


def _bounded_free_form(value: Any, limit: int = MAX_FREE_FORM_DEPTH) -> Any:
    error = free_form_depth_error(value, limit)
    if error:
        raise ValueError(error)
    return value


def _rules(*rules: tuple[str, str]) -> dict:
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]}


# --- tenant settings the operator refuses (docs/tenant-settings.md lists them for users) ---------


@dataclass(frozen=True)
class KeyRule:
    """Configuration keys refused in one map of the spec, with the reason. It is checked twice from
    this one definition: in Python (`refused`) and as a CEL rule on the map (`validation`), whose
    messageExpression names the key as the Python message does. Only exact names, prefixes and
    suffixes, all literals: the API server's cost estimate stays small however long a key is."""

    message: str  # with '{key}', quoted
    exact: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    suffixes: tuple[str, ...] = ()

    def matches(self, key: str) -> bool:
        return key in self.exact or key.startswith(self.prefixes) or key.endswith(self.suffixes)

    def refused(self, keys: Iterable[str]) -> list[str]:
        """The message for each refused key, sorted by key: the key is named, its value never."""
        return [self.message.format(key=k) for k in sorted(keys) if self.matches(k)]

    def _cel_match(self, var: str) -> str:
        def lit(text: str) -> str:
            assert "'" not in text and "\\" not in text, text
            return f"'{text}'"

        parts = [f"{var} in [{', '.join(lit(e) for e in self.exact)}]"] if self.exact else []
        parts += [f"{var}.startsWith({lit(p)})" for p in self.prefixes]
        parts += [f"{var}.endsWith({lit(x)})" for x in self.suffixes]
        return " || ".join(parts)

    def validation(self) -> dict[str, str]:
        before, after = self.message.split("{key}")
        assert '"' not in self.message and "\\" not in self.message, self.message
        return {
            "rule": f"self.all(k, !({self._cel_match('k')}))",
            "message": "a " + self.message.replace(" '{key}'", ""),
            "messageExpression": f'"{before}" + self.filter(k, {self._cel_match("k")})[0] + "{after}"',
        }


# What the operator (operator/desired.py) and the runtime (runtime/job.py) set for the job, and what
# decides where it runs, as whom, with which code, and how many executors: the operator's to set.
OPERATOR_SPARK_CONF = KeyRule(
    message="spark.conf key '{key}' is the operator's to set (docs/tenant-settings.md):"
            " use the spec's own fields (image, replicas, autoscaling, resources) instead",
    exact=(
        "spark.master", "spark.submit.deployMode", "spark.app.name",
        "spark.driver.host", "spark.driver.bindAddress", "spark.driver.port", "spark.driver.blockManager.port",
        "spark.blockManager.port",
        "spark.executor.instances", "spark.executor.memory",
        "spark.driver.extraClassPath", "spark.executor.extraClassPath",
        "spark.redaction.regex",
        "spark.ui.enabled", "spark.ui.port",
        "spark.kubernetes.namespace", "spark.kubernetes.context", "spark.kubernetes.driver.master",
        "spark.kubernetes.driver.pod.name", "spark.kubernetes.executor.podNamePrefix",
        "spark.kubernetes.container.image", "spark.kubernetes.container.image.pullPolicy",
        "spark.kubernetes.driver.container.image", "spark.kubernetes.executor.container.image",
        "spark.kubernetes.driver.podTemplateFile", "spark.kubernetes.executor.podTemplateFile",
        "spark.kubernetes.driver.podTemplateContainerName", "spark.kubernetes.executor.podTemplateContainerName",
        "spark.kubernetes.executor.request.cores", "spark.kubernetes.executor.limit.cores",
        "spark.kubernetes.driver.ownPersistentVolumeClaim", "spark.kubernetes.driver.reusePersistentVolumeClaim",
    ),
    prefixes=("spark.jars", "spark.authenticate", "spark.dynamicAllocation.", "spark.kubernetes.authenticate.",
              # The labels NetworkPolicies and monitoring select by: a pod labelled as Prometheus or
              # as the operator would be admitted where they are (#30).
              "spark.kubernetes.executor.label.app.kubernetes.io/", "spark.kubernetes.driver.label.app.kubernetes.io/",
              "spark.kubernetes.executor.label.scorestream.dev/", "spark.kubernetes.driver.label.scorestream.dev/",
              # Volumes Spark adds to executor pods outside the pod template's rules: a node's
              # files, or any Secret of the namespace mounted where the template could not.
              "spark.kubernetes.executor.volumes.", "spark.kubernetes.driver.volumes.",
              "spark.kubernetes.executor.secrets.", "spark.kubernetes.executor.secretKeyRef."),
)

# kafka.properties land in the job's ConfigMap and in status.lastStableSpec: no secrets there.
KAFKA_SECRET_PROPERTIES = KeyRule(
    message="kafka.properties key '{key}' carries a secret: put it in the Secret named by"
            " kafka.secretRef (properties are copied into the job's ConfigMap and the status)",
    exact=("sasl.jaas.config", "sasl.oauthbearer.config", "ssl.key.pem", "ssl.keystore.key",
           "sasl.oauthbearer.assertion.private.key.pem"),
    suffixes=(".password", ".secret", ".passphrase"),
)

# kafka.properties (and the Secret's settings) also configure the operator's own Kafka clients, in
# the operator's process and network: nothing that loads code, runs a command or calls a URL.
KAFKA_CODE_PROPERTIES = KeyRule(
    message="kafka.properties key '{key}' loads code, runs a command or calls out, and the operator's"
            " own Kafka clients use these settings: it is refused",
    exact=("plugin.library.paths", "ssl.engine.location", "sasl.kerberos.kinit.cmd", "metric.reporters",
           "interceptor.classes", "config.providers", "security.providers"),
    suffixes=(".class", ".classes", ".url", ".cmd", ".providers"),
    # Kerberos makes librdkafka run kinit (a command line) and read keytabs from the operator's disk.
    prefixes=("sasl.kerberos.",),
)


def operator_client_refusals(properties: Iterable[str]) -> list[str]:
    """Why the operator will not build its own Kafka clients from these settings (the Secret's
    included: a tenant writes it too); empty when it will."""
    return KAFKA_CODE_PROPERTIES.refused(properties)


# --- credentials in artifact locations ------------------------------------------------------------

# A model's or sample's location is published on the models topic (which every reader of that topic
# reads), kept in status.model.history and status.lastStableSpec, and shown in Events: no place for
# a password or a signed URL's signature. One regular expression each, used by pydantic and by the
# CRD's CEL rule alike (RE2 and Python's re read them the same). Not a filter against a hostile
# author (a percent-encoded name passes): a guard against publishing one's own secret by mistake.
URI_USERINFO = r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@"
URI_SECRET_PARAMETERS = (
    "x-amz-signature", "x-amz-credential", "x-amz-security-token", "awsaccesskeyid", "signature",  # S3
    "x-goog-signature", "x-goog-credential", "googleaccessid",  # GCS
    "sig",  # an Azure SAS
    "token", "access_token", "id_token", "refresh_token", "api_key", "apikey", "api-key", "x-api-key",
    "password", "passwd", "secret", "client_secret", "auth", "authorization",
)
# Names are letters, '_' and '-' only: no escapes in the CEL string literal.
URI_SECRET_PARAMETER = rf"(?i)[?&;#]({'|'.join(URI_SECRET_PARAMETERS)})="
URI_CREDENTIALS_MESSAGE = (
    "carries credentials ({what}): a location is published on the models topic and kept in the"
    " status, so credentials belong in a Secret the job's pods mount (docs/pod-templates.md), not in"
    " the URI; a presigned URL cannot be used")


def uri_credentials(uri: str) -> str | None:
    """What in a location is a credential (user info, a signed URL's signature or a token), or None.
    A data: URI carries content, not a location: not checked."""
    if uri.startswith("data:"):
        return None
    if re.search(URI_USERINFO, uri):
        return "user info before '@'"
    found = re.search(URI_SECRET_PARAMETER, uri)
    if found:
        return f"the query parameter {found.group(1)!r}"
    return None


def _uri_field(description_pattern: str) -> Any:
    """A model's or sample's uri: a location or a data: URI, without credentials (CEL and pydantic)."""
    return Field(min_length=1, max_length=262144, pattern=description_pattern, json_schema_extra={
        "x-kubernetes-validations": [
            {"rule": f"self.startsWith('data:') || !self.matches('{URI_USERINFO}')",
             "message": URI_CREDENTIALS_MESSAGE.format(what="user info before '@'")},
            {"rule": f"self.startsWith('data:') || !self.matches('{URI_SECRET_PARAMETER}')",
             "message": URI_CREDENTIALS_MESSAGE.format(what="a signature, token or key in its query")},
        ]})


def _check_uri(uri: str) -> str:
    what = uri_credentials(uri)
    if what:
        raise ValueError(URI_CREDENTIALS_MESSAGE.format(what=what))
    return uri


class SecretRef(Strict):
    name: str = Field(pattern=_K8S_NAME, max_length=253)
    """A Secret in the ModelServing's namespace holding Kafka client settings (SASL, TLS)."""
    key: str = Field("client.properties", min_length=1, max_length=253)
    """The Secret's key whose value is a properties file of librdkafka settings
    (`sasl.password=...`). It is mounted into the driver, never copied into a ConfigMap or status."""


_SECRET_KEY = r"^[-._a-zA-Z0-9]+$"


class CertSecretSource(Strict):
    """A certificate in a Secret (Strimzi's CertSecretSource)."""

    secret_name: str = Field(alias="secretName", pattern=_K8S_NAME, max_length=253)
    """The Secret in the ModelServing's namespace: for a Strimzi cluster's CA,
    `<cluster>-cluster-ca-cert`."""
    certificate: str = Field("ca.crt", pattern=_SECRET_KEY, max_length=253)
    """The key holding the PEM certificate(s)."""


class KafkaClientTls(Strict):
    """TLS to the brokers (Strimzi's ClientTls)."""

    trusted_certificates: list[CertSecretSource] = Field(default_factory=list, alias="trustedCertificates",
                                                         max_length=16)
    """The certificates the brokers' certificates are checked against (none: the image's system
    trust store)."""


class CertAndKeySecretSource(Strict):
    """A client certificate and its key in a Secret (Strimzi's CertAndKeySecretSource)."""

    secret_name: str = Field(alias="secretName", pattern=_K8S_NAME, max_length=253)
    """The Secret: a KafkaUser's, named as the KafkaUser."""
    certificate: str = Field("user.crt", pattern=_SECRET_KEY, max_length=253)
    """The key holding the PEM certificate."""
    key: str = Field("user.key", pattern=_SECRET_KEY, max_length=253)
    """The key holding the PEM private key (PKCS#8, as Strimzi writes it)."""


class KeystoreSecretSource(Strict):
    """A PKCS#12 keystore and its password in a Secret: a KafkaUser's `user.p12` and `user.password`."""

    secret_name: str = Field(alias="secretName", pattern=_K8S_NAME, max_length=253)
    """The Secret: a KafkaUser's, named as the KafkaUser."""
    keystore: str = Field("user.p12", pattern=_SECRET_KEY, max_length=253)
    """The key holding the PKCS#12 keystore."""
    password: str = Field("user.password", pattern=_SECRET_KEY, max_length=253)
    """The key holding the keystore's password."""


class PasswordSecretSource(Strict):
    """A password in a Secret (Strimzi's PasswordSecretSource)."""

    secret_name: str = Field(alias="secretName", pattern=_K8S_NAME, max_length=253)
    """The Secret: a KafkaUser's, named as the KafkaUser."""
    password: str = Field("password", pattern=_SECRET_KEY, max_length=253)
    """The key holding the password."""


_AUTH_TLS = "type tls takes one of certificateAndKey and keystore, and no username or passwordSecret"
_AUTH_SCRAM = "type scram-sha-512 takes username and passwordSecret, and no certificateAndKey or keystore"


class KafkaClientAuthentication(Strict):
    """How the job and the operator authenticate to Kafka, shaped as Strimzi's
    KafkaClientAuthenticationTls and KafkaClientAuthenticationScramSha512."""

    model_config = Strict.model_config | {"json_schema_extra": _rules(
        ("self.type != 'tls' || (has(self.certificateAndKey) != has(self.keystore)"
         " && !has(self.username) && !has(self.passwordSecret))", _AUTH_TLS),
        ("self.type != 'scram-sha-512' || (has(self.username) && has(self.passwordSecret)"
         " && !has(self.certificateAndKey) && !has(self.keystore))", _AUTH_SCRAM))}

    type: Literal["tls", "scram-sha-512"]
    """tls: a client certificate (mTLS; needs kafka.tls). scram-sha-512: a user name and password
    (SASL, over TLS where kafka.tls is set)."""
    certificate_and_key: CertAndKeySecretSource | None = Field(None, alias="certificateAndKey")
    """tls: the client's certificate and key (a KafkaUser Secret's user.crt and user.key)."""
    keystore: KeystoreSecretSource | None = None
    """tls: the client's PKCS#12 keystore instead (a KafkaUser Secret's user.p12 and user.password)."""
    username: str | None = Field(None, min_length=1, max_length=253, pattern=r"^[^\\\"]+$")
    """scram-sha-512: the user name (a KafkaUser's name)."""
    password_secret: PasswordSecretSource | None = Field(None, alias="passwordSecret")
    """scram-sha-512: where the password is (a KafkaUser Secret's `password`)."""

    @model_validator(mode="after")
    def _by_type(self) -> "KafkaClientAuthentication":
        if self.type == "tls" and ((self.certificate_and_key is None) == (self.keystore is None)
                                   or self.username is not None or self.password_secret is not None):
            raise ValueError(_AUTH_TLS)
        if self.type == "scram-sha-512" and (self.username is None or self.password_secret is None
                                             or self.certificate_and_key is not None or self.keystore is not None):
            raise ValueError(_AUTH_SCRAM)
        return self

    def secret_keys(self) -> tuple[str, list[str]]:
        """The Secret it names, and the keys read from it."""
        if self.certificate_and_key is not None:
            return self.certificate_and_key.secret_name, [self.certificate_and_key.certificate, self.certificate_and_key.key]
        if self.keystore is not None:
            return self.keystore.secret_name, [self.keystore.keystore, self.keystore.password]
        assert self.password_secret is not None
        return self.password_secret.secret_name, [self.password_secret.password]


# modelsTopic may be absent: a ModelServing leaves it to the operator (operator/models_route.py).
_DISTINCT_TOPICS = (
    "self.dataTopic != self.outputTopic && self.dataTopic != self.deadLetterTopic"
    " && (!has(self.modelsTopic) || self.dataTopic != self.modelsTopic) && self.outputTopic != self.deadLetterTopic"
)
_UNADDRESSED_OWN_TOPIC = (
    f"!has(self.acceptUnaddressedModels) || !self.acceptUnaddressedModels"
    f" || (has(self.modelsTopic) && self.modelsTopic != '{DEFAULT_MODELS_TOPIC}')"
)
# The per-namespace models topics are the operator's: a tenant's ACLs refuse its job a write there,
# so a spec naming one for data, output or dead letters is refused where it is written.
_NOT_MODELS_PREFIX = " && ".join(f"!self.{field}.startsWith('{MODELS_TOPIC_PREFIX}')"
                                 for field in ("dataTopic", "outputTopic", "deadLetterTopic"))
_KEYLESS_OWN_TOPIC = (
    "!has(self.keylessModels) || !(self.keylessModels.topic in [self.dataTopic, self.outputTopic,"
    f" self.deadLetterTopic, '{DEFAULT_MODELS_TOPIC}'] || (has(self.modelsTopic)"
    " && self.keylessModels.topic == self.modelsTopic))"
)


class KeylessModels(Strict):
    """A models topic for producers that send model messages without a key."""

    topic: str = Field(pattern=_TOPIC)
    """The topic: not compacted (Kafka refuses messages without a key on a compacted topic), so it
    keeps every message for retentionHours. The operator creates it with cleanup.policy=delete,
    or checks the one that exists."""
    retention_hours: int = Field(alias="retentionHours", ge=1, le=876000)
    """How long the topic keeps a model message (its retention.ms). A job restores the newest
    model per dataType that is still there: publish again within this time, or the next start of
    the job finds none."""


class StrimziTopics(Strict):
    """Topics as Strimzi KafkaTopic resources, for the cluster's Topic Operator to create."""

    cluster: str = Field(pattern=_K8S_NAME, max_length=63)
    """The Kafka cluster's name: the KafkaTopics' `strimzi.io/cluster` label. The Topic Operator
    must watch the ModelServing's namespace, where the KafkaTopics are made."""
    replicas: int | None = Field(None, ge=1, le=32767)
    """Each topic's replication factor (the cluster's default when unset)."""


_AUTH_NEEDS_TLS = "authentication type tls needs kafka.tls (a client certificate is only sent over TLS)"
_ONE_CREDENTIALS_SOURCE = "kafka.secretRef and kafka.tls/kafka.authentication both configure the client: use one"


class KafkaSpec(Strict):
    """The Kafka cluster, the topics, and the client's settings and credentials."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [{
            "rule": _DISTINCT_TOPICS,
            "message": "dataTopic must differ from outputTopic, deadLetterTopic and modelsTopic,"
                       " and outputTopic from deadLetterTopic",
        }, {
            "rule": _UNADDRESSED_OWN_TOPIC,
            "message": UNADDRESSED_MESSAGE,
        }, {
            "rule": _KEYLESS_OWN_TOPIC,
            "message": KEYLESS_MESSAGE,
        }, {
            "rule": _NOT_MODELS_PREFIX,
            "message": NOT_MODELS_PREFIX_MESSAGE,
        }, {
            "rule": "!has(self.authentication) || self.authentication.type != 'tls' || has(self.tls)",
            "message": _AUTH_NEEDS_TLS,
        }, {
            "rule": "!has(self.secretRef) || !(has(self.tls) || has(self.authentication))",
            "message": _ONE_CREDENTIALS_SOURCE,
        }]},
    )

    bootstrap_servers: str = Field(alias="bootstrapServers", min_length=1)
    """Kafka bootstrap servers, comma-separated host:port."""
    data_topic: str = Field(alias="dataTopic", pattern=_TOPIC)
    """The topic of records to score."""
    output_topic: str = Field(alias="outputTopic", pattern=_TOPIC)
    """The topic predictions are written to."""
    models_topic: str | None = Field(None, alias="modelsTopic", pattern=_TOPIC)
    """The compacted topic of model descriptors. Unset (the default): the one the operator assigns,
    `scorestream-models.<namespace>` unless the cluster admin configured another, written only by
    the operator's own principal where the admin gave it one (docs/operations/security.md). Set: a topic of
    your own, which the operator writes with this resource's Kafka credentials. Many ModelServings
    may share a topic: each takes only the messages keyed `<namespace>/<name>/<dataType>` (and
    `.../candidate`) for itself."""
    accept_unaddressed_models: bool = Field(False, alias="acceptUnaddressedModels")
    """Also take model messages in the legacy layout, keyed by dataType alone (`<dataType>`,
    `<dataType>/candidate`). Whoever writes such a message to the topic reaches every ModelServing
    that opts in on it, so this needs a modelsTopic of your own (not the shared default)."""
    keyless_models: KeylessModels | None = Field(None, alias="keylessModels")
    """Also take model messages without a key, from a second models topic that is not compacted
    (docs/model-messages.md): the newest message per dataType serves, as for the unaddressed ones.
    Whoever writes to that topic reaches every ModelServing that reads it: a topic of your own."""
    dead_letter_topic: str = Field(alias="deadLetterTopic", pattern=_TOPIC)
    """Records that cannot be decoded or scored go here unchanged, with headers saying why."""
    properties: dict[str, str] = Field(default_factory=dict, max_length=MAX_SETTINGS, json_schema_extra={
        "x-kubernetes-validations": [KAFKA_SECRET_PROPERTIES.validation(), KAFKA_CODE_PROPERTIES.validation()]})
    """Client settings (librdkafka names) that are not secret: security.protocol, sasl.mechanism...
    Passwords belong in the Secret (secretRef); settings that load code or call out are refused
    (docs/tenant-settings.md)."""
    starting_offsets: Literal["group", "earliest", "latest"] = Field("group", alias="startingOffsets")
    """Where a new job starts: `group` = the data group's committed offsets, partitions without a
    commit from the earliest offset (a serving job must not skip records it never saw)."""
    max_offsets_per_trigger: int | None = Field(None, alias="maxOffsetsPerTrigger", gt=0)
    """At most this many records per micro-batch (unbounded when unset)."""
    secret_ref: SecretRef | None = Field(None, alias="secretRef")
    """Kafka credentials and TLS settings as a properties file in a Secret (the older way: tls and
    authentication name Strimzi's Secrets as they are)."""
    tls: KafkaClientTls | None = None
    """Connect over TLS, trusting these certificates (Strimzi's cluster CA Secret)."""
    authentication: KafkaClientAuthentication | None = None
    """Authenticate with a Strimzi KafkaUser's Secret (docs/strimzi.md)."""
    strimzi_topics: StrimziTopics | None = Field(None, alias="strimziTopics")
    """Make the output, dead-letter and models topics as Strimzi KafkaTopic resources and wait
    for them to be Ready, instead of creating them through Kafka's admin API."""

    @model_validator(mode="after")
    def _credentials(self) -> "KafkaSpec":
        if self.authentication is not None and self.authentication.type == "tls" and self.tls is None:
            raise ValueError(_AUTH_NEEDS_TLS)
        if self.secret_ref is not None and (self.tls is not None or self.authentication is not None):
            raise ValueError(_ONE_CREDENTIALS_SOURCE)
        return self

    @field_validator("properties")
    @classmethod
    def _properties(cls, v: dict[str, str]) -> dict[str, str]:
        refused = KAFKA_SECRET_PROPERTIES.refused(v) + KAFKA_CODE_PROPERTIES.refused(v)
        if refused:
            raise ValueError("; ".join(refused))
        return v

    @model_validator(mode="after")
    def _topics(self) -> "KafkaSpec":
        check_topics(self)
        return self


_ENDPOINT = r"^https?://[^/?#@\s]+/?$"
_REGION = r"^[a-z0-9-]{1,32}$"
_HOST = r"^[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?$"


class StoreSecretRef(Strict):
    name: str = Field(pattern=_K8S_NAME, max_length=253)
    """A Secret in the ModelServing's namespace, mounted into the driver (the one pod that fetches
    models and samples) and read at every fetch: a rotated Secret signs the next fetch, no restart."""


class KeyedStoreSecretRef(StoreSecretRef):
    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")
    """The Secret's key holding the credential."""


_ONE_CREDENTIAL = ("!(has(self.secretRef) && has(self.workloadIdentity) && self.workloadIdentity)",
                   "secretRef and workloadIdentity exclude each other: credentials come from one of them")


def _one_credential(store: "S3Store | GcsStore") -> None:
    if store.secret_ref is not None and store.workload_identity:
        raise ValueError(_ONE_CREDENTIAL[1])


class S3Store(Strict):
    model_config = ConfigDict(json_schema_extra=_rules(_ONE_CREDENTIAL))

    endpoint: str | None = Field(None, pattern=_ENDPOINT, max_length=1024)
    """An S3-compatible endpoint (MinIO, Ceph, a cloud's S3 API): https://host[:port], buckets
    addressed by path. Unset: AWS S3 in `region`. It passes the same address check as an http(s)
    location (the chart's artifacts.allowedNetworks for an in-cluster store)."""
    region: str = Field("us-east-1", pattern=_REGION)
    """The region requests are signed for (SigV4)."""
    workload_identity: bool = Field(False, alias="workloadIdentity")
    """Sign with the pod's own identity, AWS's default credential chain (IRSA: the web identity
    token and role the EKS pod identity webhook sets in the environment; EKS Pod Identity; the
    instance's role), instead of a Secret. Neither set: requests are unsigned (public buckets)."""

    secret_ref: StoreSecretRef | None = Field(None, alias="secretRef")
    """A Secret with the keys AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and optionally
    AWS_SESSION_TOKEN: what s3:// fetches are signed with."""

    @model_validator(mode="after")
    def _one(self) -> "S3Store":
        _one_credential(self)
        return self


class GcsStore(Strict):
    model_config = ConfigDict(json_schema_extra=_rules(_ONE_CREDENTIAL))

    endpoint: str | None = Field(None, pattern=_ENDPOINT, max_length=1024)
    """Google Cloud Storage's JSON API at another address (an emulator, a private endpoint):
    http(s)://host[:port]. Unset: https://storage.googleapis.com. It passes the same address check
    as an http(s) location."""
    workload_identity: bool = Field(False, alias="workloadIdentity")
    """Use the pod's own identity, Google's Application Default Credentials (GKE Workload
    Identity: the node's metadata server answers for the pod's Kubernetes ServiceAccount),
    instead of a Secret. Neither set: requests carry no token (public objects)."""

    secret_ref: KeyedStoreSecretRef | None = Field(None, alias="secretRef")
    """A Secret holding a service-account key (its JSON, key `service-account.json` by
    convention): gs:// fetches carry a read-only token made from it."""

    @model_validator(mode="after")
    def _one(self) -> "GcsStore":
        _one_credential(self)
        return self


class BearerStore(Strict):
    hosts: list[Annotated[str, StringConstraints(pattern=_HOST, max_length=260)]] = Field(min_length=1, max_length=64)
    """The hosts (host, or host:port when not 443) the token is sent to; a location elsewhere, a
    redirect to another host and every http:// location get no token: a models-topic writer
    names the location, and must not be able to collect the token."""
    secret_ref: KeyedStoreSecretRef = Field(alias="secretRef")
    """A Secret holding the bearer token (sent as `Authorization: Bearer <token>`)."""


class ProtobufInputSpec(Strict):
    descriptor_file: str | None = Field(None, alias="descriptorFile")
    """A FileDescriptorSet (protoc --descriptor_set_out) in the job's filesystem; without one, the
    legacy messages (WineRecord) built into scorestream are used."""
    message_type: str = Field("WineRecord", alias="messageType", min_length=1)
    """The message type of input records."""


class InputSpec(Strict):
    """How input records are decoded."""

    format: Literal["json", "protobuf"] = "json"
    """How input records are encoded: JSON objects or protobuf messages."""
    data_type_field: str = Field("dataType", alias="dataTypeField", min_length=1)
    """The record field that routes a record to the model of its dataType."""
    fields: list[str] | None = None
    """The record's feature fields in order. A model whose inputs are not among them is rejected
    at load time, and a TensorFlow model with one dense input reads them in this order."""
    protobuf: ProtobufInputSpec = Field(default_factory=ProtobufInputSpec)
    """Protobuf decoding, when format is protobuf."""


class ModelStoreSpec(Strict):
    """How the job reaches object stores and token-protected https locations, for every model it
    fetches (spec.model, or a models-topic message) and every verification sample. Credentials
    are named here, never written in a location, a spec or a message."""

    s3: S3Store | None = None
    """s3:// locations: the endpoint, region and credentials."""
    gcs: GcsStore | None = None
    """gs:// locations: the endpoint and credentials."""
    https: BearerStore | None = None
    """https:// locations on the named hosts: a bearer token."""


class VerificationSpec(Strict):
    uri: str = _uri_field(r"^((file|https?|s3|gs)://|/|data:)")
    """Records in the input format, one JSON object per line or CSV with a header row naming the
    fields (a .csv location or a text/csv data: URI, else told by the content), that the model must
    score before it serves: a location as for the model's uri (fetched by the job), or a data: URI
    carrying them."""
    min_share: float = Field(1.0, alias="minShare", ge=0.0, le=1.0)
    """The share of the records that must yield a prediction (not dead-lettered, not NaN)."""
    expected_field: str | None = Field(None, alias="expectedField", min_length=1, max_length=253)
    """The record field holding each record's expected prediction (a number or a class label)."""
    tolerance: float = Field(1e-6, ge=0.0)
    """How far a numeric prediction may be from the expected one (absolute)."""

    @field_validator("uri")
    @classmethod
    def _no_credentials(cls, v: str) -> str:
        return _check_uri(v)


class BaselineSpec(Strict):
    uri: str = _uri_field(r"^((file|https?|s3|gs)://|/|data:)")
    """Records drawn like the data the model is meant to score, in the input format (JSON lines or
    CSV, as verification's), at a location as for the model's uri or in a data: URI."""

    @field_validator("uri")
    @classmethod
    def _no_credentials(cls, v: str) -> str:
        return _check_uri(v)


class ModelSpec(Strict):
    name: str = Field(min_length=1, max_length=253)
    """The model's name, as it appears in every prediction."""
    version: str = Field(min_length=1, max_length=128)
    """The model's version; changing it rolls the model without restarting the job."""
    format: Literal["pmml", "tensorflow"]
    """pmml (scored by PMML4S in Spark's JVM) or tensorflow (a SavedModel)."""
    uri: str = _uri_field(r"^((file|https?|s3|gs)://|/|data:)")
    """Where the model's artifact is: file:// or an absolute path (under the job's model
    directories, /models by default: a volume or the image's folder for models),
    http(s)://, s3://bucket/key or gs://bucket/key (credentials and endpoints: spec.modelStore), or
    a data: URI (RFC 2397) carrying a small model inline. The job fetches it; an artifact it cannot fetch or load fails the rollout and
    the current model keeps serving."""
    description: str = Field("", max_length=1024)
    """A human description, reported with the serving statistics."""
    verification: VerificationSpec | None = None
    """A sample the job scores with the model before it serves (besides a PMML's own
    ModelVerification records, always checked): a model that fails is rolled back with the
    records that failed and how, and the current model keeps serving."""
    baseline: BaselineSpec | None = None
    """The model's drift baseline: the job scores these records with the model when it admits it,
    and compares the distributions of the inputs and predictions it then serves with theirs
    (docs/monitoring.md, rollout rule maxDrift). Unset: the verification sample is the baseline;
    neither: the model has none."""

    @field_validator("uri")
    @classmethod
    def _no_credentials(cls, v: str) -> str:
        return _check_uri(v)


class AnalysisSpec(Strict):
    min_records: int = Field(1000, alias="minRecords", ge=1)
    """Records the candidate must have scored before its figures are judged."""
    max_error_rate: float = Field(0.01, alias="maxErrorRate", ge=0.0, le=1.0)
    """The largest share of the candidate's records that may fail (dead-lettered by it) before
    it is rolled back."""
    max_latency_ratio: float = Field(2.0, alias="maxLatencyRatio", gt=0.0)
    """The largest ratio of the candidate's mean scoring time to the serving model's before it
    is rolled back."""
    max_drift: float | None = Field(None, alias="maxDrift", gt=0.0)
    """The largest population stability index of the candidate's predictions against its
    baseline (what it predicted for spec.model.baseline's records, else for its verification
    sample's) before it is rolled back; by the usual reading below 0.1 is stable and above 0.25
    shifted. Unset: drift is not judged. Judged once minRecords are scored; a candidate without a
    baseline is never judged on drift."""


class CanarySpec(AnalysisSpec):
    percent: float = Field(10.0, gt=0.0, lt=100.0)
    """The share of records the candidate scores, picked by the hash of the record key: a key
    meets the same version for the whole canary."""
    promote_after: str = Field("5m", alias="promoteAfter", json_schema_extra={"pattern": DURATION_PATTERN})
    """How long the canary runs at least; it is promoted once this has passed, minRecords are
    scored and the rules pass ('30s', '5m')."""

    @field_validator("promote_after")
    @classmethod
    def _duration(cls, v: str) -> str:
        duration_seconds(v)
        return v


class ShadowSpec(AnalysisSpec):
    """A shadow is never promoted by the operator: compare its figures in status, then promote
    with `strategy: Immediate` (same model). The rules roll a failing shadow back."""


class RolloutSpec(Strict):
    strategy: Literal["Immediate", "Canary", "Shadow"] = "Immediate"
    """How a model change is rolled out. Immediate: the next micro-batch uses the new model.
    Canary: the new model scores `canary.percent` of the records until it is promoted or rolled
    back by the rules. Shadow: the new model scores every record next to the serving one, its
    predictions are compared and not written. The first model of a resource always rolls out
    immediately (there is nothing to compare with)."""
    canary: CanarySpec = Field(default_factory=CanarySpec)
    """The canary's share and rules (strategy Canary)."""
    shadow: ShadowSpec = Field(default_factory=ShadowSpec)
    """The shadow's rules (strategy Shadow)."""


class AutoscalingSpec(Strict):
    model_config = Strict.model_config | {"json_schema_extra": _rules(
        ("self.minReplicas <= self.maxReplicas", "minReplicas must not exceed maxReplicas"))}

    min_replicas: int = Field(1, alias="minReplicas", ge=1, le=1000)
    """The fewest executors."""
    max_replicas: int = Field(alias="maxReplicas", ge=1, le=1000)
    """The most executors (the data topic's partition count caps it too)."""
    target_lag_seconds: float = Field(30.0, alias="targetLagSeconds", gt=0)
    """Drain the current lag within this many seconds, on top of the arriving records."""
    target_utilization: float = Field(0.8, alias="targetUtilization", gt=0, le=1)
    """The share of an executor's busy-time processing rate to plan with (headroom for bursts)."""
    stabilization_window: str = Field("60s", alias="stabilizationWindow",
                                      json_schema_extra={"pattern": DURATION_PATTERN})
    """Scale down no lower than the highest recommendation of this window."""
    scale_down_cooldown: str = Field("120s", alias="scaleDownCooldown",
                                     json_schema_extra={"pattern": DURATION_PATTERN})
    """The least time between the last change and a scale-down."""
    max_step: int = Field(2, alias="maxStep", ge=1)
    """The most executors added or removed by one decision."""

    @field_validator("stabilization_window", "scale_down_cooldown")
    @classmethod
    def _durations(cls, v: str) -> str:
        duration_seconds(v)
        return v

    @model_validator(mode="after")
    def _bounds(self) -> "AutoscalingSpec":
        if self.min_replicas > self.max_replicas:
            raise ValueError("minReplicas must not exceed maxReplicas")
        return self


class Resources(Strict):
    cpu: str = Field("1", pattern=_QUANTITY)
    """CPU request and limit (a Kubernetes quantity, e.g. 500m, 2)."""
    memory: str = Field("2Gi", pattern=_QUANTITY)
    """Memory request and limit (a Kubernetes quantity, e.g. 2Gi)."""


class SparkUISpec(Strict):
    enabled: bool = False
    """Spark's web UI on the driver (jobs, stages, streaming query progress, executors, and Spark's
    own Prometheus endpoints /metrics/prometheus and /metrics/executors/prometheus), on the
    driver Service's port spark-ui; `kubectl scorestream ui NAME` port-forwards to it. Off by
    default: the UI keeps every recent batch's plans and stages in the driver's memory, and it
    has no authentication (the NetworkPolicy admits no one to it; a port-forward goes through
    the API server)."""


class SparkSpec(TriggerRules):
    """The Spark job: how its query runs, its image, resources and configuration."""

    trigger: Literal["processingTime", "realTime"] = "processingTime"
    """How the query runs. processingTime: a micro-batch every triggerInterval. realTime: Spark's
    real-time mode, one long task per data-topic partition writing each prediction as soon as its
    record is scored (p50 a few ms instead of about the interval), except at each batch's end,
    where reading stops while Spark plans and launches the next batch: 0.05-0.15 s on 2 cores,
    in a new job too, which warms that path up before it reads (warmUpBatches). With 5s batches
    those pauses are the p99; with 10s batches they reach fewer than 1 record in 100, and the p99
    is the records' own path (17-50 ms at half the peak rate on 2 cores).
    triggerInterval, at least 5s, is then how often progress is checkpointed, when a new model
    takes over, how much a restart reads again and how long a graceful stop may wait. realTime
    serves PMML models only (it runs no Python), takes no kafka.maxOffsetsPerTrigger, needs a task
    slot per data-topic partition, and changes executors by restarting the job."""
    trigger_interval: str = Field("1s", alias="triggerInterval", json_schema_extra={"pattern": DURATION_PATTERN})
    """How often a micro-batch starts: '500ms', '1s', '2 minutes' (with realTime: how long each batch runs)."""
    warm_up_batches: int = Field(WARM_UP_BATCHES, alias="warmUpBatches", ge=0, le=10_000)
    """With trigger realTime: before it reads its first record, the job runs its own query this
    many times as small micro-batches of generated records that it drops unread (nothing is
    scored, counted or written), so the code Spark runs at every batch end is compiled before
    the first real one: a new job's first pauses are then about a warm job's, not two to three
    times them. About 20 s at the start on 2 cores (at most 2 minutes), not ready meanwhile; 0:
    none. Ignored with processingTime."""
    conf: dict[str, str] = Field(default_factory=dict, max_length=MAX_SETTINGS, json_schema_extra={
        "x-kubernetes-validations": [OPERATOR_SPARK_CONF.validation()]})
    """Spark configuration (spark.* keys) for the job; the keys the operator sets are refused
    (docs/tenant-settings.md)."""

    @field_validator("conf")
    @classmethod
    def _conf(cls, v: dict[str, str]) -> dict[str, str]:
        refused = OPERATOR_SPARK_CONF.refused(v)
        if refused:
            raise ValueError("; ".join(refused))
        return v

    image: str | None = Field(None, min_length=1, max_length=1024)
    """The runtime image (scorestream with Spark, PMML4S and TensorFlow); driver and executors run it.
    Unset: the operator's default (the chart's runtimeImage). The operator refuses an image its
    allow-list (the chart's allowedImages) does not match."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field("IfNotPresent", alias="imagePullPolicy")
    """The image pull policy of the driver and executor pods."""
    driver: Resources = Field(default_factory=Resources)
    """The driver pod's resources."""
    executor: Resources = Field(default_factory=Resources)
    """Each executor pod's resources."""
    ui: SparkUISpec = Field(default_factory=SparkUISpec)
    """Spark's web UI (off by default)."""


class PodTemplateMetadata(Strict):
    labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    """Labels added to the pods; app.kubernetes.io/* and scorestream.dev/* are the operator's
    (what NetworkPolicies and monitoring select by): a template's are dropped."""
    annotations: dict[str, str] = Field(default_factory=dict, max_length=64)
    """Annotations added to the pods; the operator's own (scorestream.dev/config-hash) win."""


class PodTemplate(Strict):
    """A Kubernetes PodTemplateSpec merged under what the operator renders (docs/pod-templates.md):
    the operator's fields win, lists of named items (containers, volumes, env, ports,
    imagePullSecrets) are merged by name, the template's other items are kept."""

    metadata: PodTemplateMetadata = Field(default_factory=PodTemplateMetadata)
    """The pods' extra labels and annotations."""
    spec: dict[str, Any] = Field(default_factory=dict, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    """A core/v1 PodSpec (imagePullSecrets, nodeSelector, tolerations, affinity, priorityClassName,
    volumes, initContainers, sidecar containers, and the main container's env, volumeMounts...):
    not checked here but by the API server when the pod is made. The main container is named
    'driver' (or 'executor'); its image, command, args, ports, resources and probes, the
    operator's volumes and mounts, serviceAccountName and the selector labels are the operator's
    and override the template's."""

    @field_validator("spec", mode="before")
    @classmethod
    def _bounded_spec(cls, v: Any) -> Any:
        return _bounded_free_form(v)


class PodSettings(Strict):
    pod_template: PodTemplate | None = Field(None, alias="podTemplate")
    """A pod template merged under the operator's pod (docs/pod-templates.md)."""


class CheckpointSpec(Strict):
    model_config = Strict.model_config | {"json_schema_extra": _rules(
        ("self == oldSelf", "checkpoint is immutable: it is the driver's volume claim template"))}

    size: str = Field("1Gi", pattern=_QUANTITY)
    """The size of the driver's checkpoint volume."""
    storage_class_name: str | None = Field(None, alias="storageClassName")
    """The storage class of the checkpoint volume (the cluster's default when unset)."""


# A real-time query's executors change by restarting the job, which takes spec.replicas.
REAL_TIME_NO_AUTOSCALING = ("trigger realTime takes no autoscaling: a real-time query holds its executors through"
                            " every batch, so they change by restarting the job, to spec.replicas")


def _unless_exactly_once(rule: str, message: str) -> tuple[str, str]:
    """A CEL rule that must hold when spec.delivery is exactlyOnce."""
    return f"!has(self.delivery) || self.delivery != 'exactlyOnce' || ({rule})", message


def _unless_real_time(rule: str, message: str) -> tuple[str, str]:
    """A CEL rule that must hold when spec.spark.trigger is realTime."""
    return f"!has(self.spark.trigger) || self.spark.trigger != 'realTime' || {rule}", message


class ModelServingSpec(Strict):
    """The desired state of one serving job."""

    model_config = Strict.model_config | {"json_schema_extra": _rules(
        ("self.dataType == oldSelf.dataType",
         "dataType is immutable: it keys the model messages this job serves"),
        _unless_real_time("!has(self.kafka.maxOffsetsPerTrigger)", REAL_TIME_NO_MAX_OFFSETS),
        _unless_real_time("!has(self.autoscaling)", REAL_TIME_NO_AUTOSCALING),
        _unless_exactly_once("!has(self.spark.conf) || !('spark.speculation' in self.spark.conf)"
                             " || !self.spark.conf['spark.speculation'].matches('^[ \\t]*[Tt][Rr][Uu][Ee][ \\t]*$')",
                             EXACTLY_ONCE_NO_SPECULATION),
        _unless_exactly_once("!has(self.kafka.properties) || !self.kafka.properties.exists(k, k in ["
                             + ", ".join(f"'{k}'" for k in EXACTLY_ONCE_KAFKA_KEYS) + "])", EXACTLY_ONCE_KAFKA))}

    delivery: Literal["atLeastOnce", "exactlyOnce"] = "atLeastOnce"
    """atLeastOnce: after a failure (a killed driver or executor) the batch in flight is written
    again, so a prediction or dead letter may appear twice. exactlyOnce: each task writes an input
    partition's predictions and dead letters in a Kafka transaction that also commits the data
    group's offset, so read_committed consumers see each exactly once through failures, retries,
    upgrades and rescales (docs/delivery.md). Predictions become visible to them when their
    batch's transaction commits: about a trigger interval after their record arrived, also with
    trigger realTime (a transaction per partition and real-time batch). It takes no
    spark.speculation, and leaves the producer's transactional.id, acks and enable.idempotence
    and the consumer's isolation.level to the job."""
    data_type: str = Field(alias="dataType", pattern=_DATA_TYPE)
    """The routing key: records whose dataType field has this value are scored by this resource's
    model, and model messages for it apply."""
    kafka: KafkaSpec
    """The Kafka cluster and topics."""
    input: InputSpec = Field(default_factory=InputSpec)
    """How input records are decoded."""
    model: ModelSpec | None = None
    """The desired model. Changing it rolls the model; unset, the job serves what the models topic holds."""
    model_store: ModelStoreSpec | None = Field(None, alias="modelStore")
    """Credentials and endpoints for s3://, gs:// and token-protected https:// model and sample
    locations (docs/model-messages.md#object-stores); unset: unsigned requests to the public endpoints."""
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    """How a model change is rolled out."""
    replicas: int = Field(1, ge=0, le=1000)
    """Spark executors. The scale subresource points here (`kubectl scale`); changed live, without
    restarting the streaming query. With autoscaling, the starting point only."""
    autoscaling: AutoscalingSpec | None = None
    """Scale the executors on the data topic's lag and arrival rate (status.autoscaling says why)."""
    spark: SparkSpec
    """The Spark job: image, resources, trigger interval and configuration."""
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    """The driver's checkpoint volume."""
    driver: PodSettings = Field(default_factory=PodSettings)
    """The driver pod: a pod template merged into the driver StatefulSet's."""
    executor: PodSettings = Field(default_factory=PodSettings)
    """The executor pods: a pod template Spark starts every executor pod from."""
    upgrade_mode: Literal["last-state", "stateless"] = Field("last-state", alias="upgradeMode")
    """How a changed job resumes: last-state from its checkpoint, stateless from the data
    consumer group's committed offsets with a fresh checkpoint."""
    upgrade_timeout: str = Field("10m", alias="upgradeTimeout", json_schema_extra={"pattern": DURATION_PATTERN})
    """How long a changed job may take to become ready before the operator runs the last stable
    spec again (status.lastStableSpec) until the spec changes."""
    suspend: bool = False
    """Stop the job gracefully, keeping its position; false resumes."""
    restart_nonce: int | None = Field(None, alias="restartNonce", ge=0)
    """Change it to restart the driver on purpose (`kubectl scorestream restart`): it is part of the
    driver's configuration hash, so the driver rolls as for any other change, resuming from its
    checkpoint (the same upgradeMode and upgradeTimeout apply)."""

    @field_validator("upgrade_timeout")
    @classmethod
    def _upgrade_timeout(cls, v: str) -> str:
        duration_seconds(v)
        return v

    @model_validator(mode="after")
    def _real_time(self) -> "ModelServingSpec":
        check_real_time_offsets(self.spark, self.kafka)
        check_delivery(self.delivery, self.spark, self.kafka)
        if self.spark.real_time and self.autoscaling is not None:
            raise ValueError(REAL_TIME_NO_AUTOSCALING)
        return self


# --- status -------------------------------------------------------------------------------------

ConditionType = Literal["Ready", "ModelReady", "Progressing", "Degraded"]
Phase = Literal["Pending", "Running", "Suspended", "Degraded", "Failed"]


class Condition(Strict):
    type: ConditionType
    """Ready, ModelReady, Progressing or Degraded."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024)
    """A CamelCase machine-readable reason for the last transition."""
    message: str = Field("", max_length=32768)
    """A human-readable message on the last transition."""
    last_transition_time: str = Field(alias="lastTransitionTime")
    """When the status last changed (RFC 3339)."""
    observed_generation: int = Field(0, alias="observedGeneration", ge=0)
    """The generation of the spec this condition was set for."""


class ServedModel(Strict):
    name: str
    """The model's name."""
    version: str
    """The model's version."""
    since: str | None = None
    """When the job started serving it (RFC 3339)."""


class ModelHistoryEntry(Strict):
    name: str
    """The model's name."""
    version: str
    """The model's version."""
    outcome: Literal["Published", "Serving", "Replaced", "RolledBack"]
    """Published (not yet confirmed by the job), Serving, Replaced (by a later one) or RolledBack."""
    at: str
    """When it reached this outcome (RFC 3339)."""
    reason: str | None = None
    """Why it was rolled back."""
    model: ModelSpec | None = None
    """spec.model as it was published (kept where its JSON is at most 4 KiB, so a data: model is
    kept only if small): what `rollback-to` publishes again."""


class VersionFigures(Strict):
    name: str
    """The model's name."""
    version: str
    """The model's version."""
    records: int = Field(0, ge=0)
    """Records it scored (during the trial, for the candidate)."""
    errors: int = Field(0, ge=0)
    """Records it failed to score."""
    mean_ms: float | None = Field(None, alias="meanMs")
    """Its mean scoring time per record, in milliseconds."""
    prediction_drift: float | None = Field(None, alias="predictionDrift")
    """The population stability index of its predictions against its baseline (what it
    predicted for spec.model.baseline, else for its verification sample); unset: it has none."""


class RolloutStatus(Strict):
    strategy: Literal["Canary", "Shadow"]
    """The trial's strategy."""
    phase: Literal["Analyzing", "Promoting", "Promoted", "RolledBack"]
    """Analyzing (the candidate scores next to the serving model), Promoting (published as the
    serving model, waiting for the job), Promoted, or RolledBack (withdrawn; not retried until the
    spec changes)."""
    started_at: str = Field(alias="startedAt")
    """When the candidate was published (RFC 3339)."""
    percent: float | None = None
    """The canary's share of records."""
    current: VersionFigures | None = None
    """The serving model's figures."""
    candidate: VersionFigures
    """The candidate and its figures."""
    agreement: float | None = None
    """Shadow: the share of records on which both models predicted the same (label, or value)."""
    mean_abs_diff: float | None = Field(None, alias="meanAbsDiff")
    """Shadow: the mean absolute difference of the two predictions."""
    message: str = ""
    """The analysis' last finding, or why the candidate was promoted or rolled back."""


class PinnedModel(Strict):
    name: str
    """The model's name."""
    version: str
    """The version rolled back to."""
    overrides: str | None = None
    """The rollout id of the spec.model it holds back: it ends when spec.model changes."""
    at: str
    """When the rollback was asked for (RFC 3339)."""


class ModelStatus(Strict):
    current: ServedModel | None = None
    """The model the job reports it serves."""
    desired: ServedModel | None = None
    """The model spec.model asks for."""
    published: str | None = None
    """The rollout id (a digest of the model message) last published for spec.model; the same
    spec is never published twice."""
    history: list[ModelHistoryEntry] = Field(default_factory=list, max_length=10)
    """The last versions rolled out, oldest first, with their outcome."""
    rollout: RolloutStatus | None = None
    """The last canary or shadow trial and its figures."""
    pinned: PinnedModel | None = None
    """A version rolled back to by request (the rollback-to annotation): it serves instead of
    spec.model until spec.model changes."""


class ControlsStatus(Strict):
    """The last value of each control annotation the operator acted on: a value is acted on once."""

    promote: str | None = None
    """The last scorestream.dev/promote request handled."""
    abort: str | None = None
    """The last scorestream.dev/abort request handled."""
    rollback_to: str | None = Field(None, alias="rollbackTo")
    """The last scorestream.dev/rollback-to request handled."""
    message: str = ""
    """What the last request did, or why it did nothing."""
    acted: bool | None = None
    """Whether the last request was carried out (false: answered, with why not in message)."""


class ScalingStatus(Strict):
    target: int = Field(ge=0)
    """The executors asked of the job: spec.replicas (or the autoscaler's decision), capped by the
    data topic's partitions."""
    mode: Literal["Live", "Restart"]
    """Live: the job's cluster manager adds and removes executors while the query runs. Restart:
    it cannot (local mode), so the driver restarts from its checkpoint with the new total."""
    capped: bool = False
    """The request exceeded the data topic's partitions and was lowered to them."""
    message: str = ""
    """What was done last, and why."""


class RecommendationSample(Strict):
    at: float
    """When (seconds since the epoch)."""
    replicas: int
    """The executors the load needed then."""


class AutoscalingStatus(Strict):
    replicas: int = Field(ge=0)
    """The executors the autoscaler decided on."""
    recommended: int = Field(ge=0)
    """What the load needed at the last decision, before stabilization, cooldown and step bounds."""
    reason: str = ""
    """The last decision's inputs and reasoning."""
    last_change: float | None = Field(None, alias="lastChange")
    """When the autoscaler last changed the executors (seconds since the epoch)."""
    input_rate: float | None = Field(None, alias="inputRate")
    """Records per second arriving on the data topic."""
    per_executor_rate: float | None = Field(None, alias="perExecutorRate")
    """Records one executor processes per busy second."""
    recommendations: list[RecommendationSample] = Field(default_factory=list, max_length=60)
    """Recent recommendations (the stabilization window's memory)."""


class StableSpec(Strict):
    generation: int = Field(ge=0)
    """The generation whose spec it is."""
    spec: dict[str, Any] = Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    """The spec under which the job last ran ready."""

    @field_validator("spec", mode="before")
    @classmethod
    def _bounded_spec(cls, v: Any) -> Any:
        # A whole spec: its pod templates sit a few levels under its root.
        return _bounded_free_form(v, MAX_FREE_FORM_DEPTH + 8)


class UpgradeStatus(Strict):
    generation: int = Field(ge=0)
    """The generation being rolled out."""
    phase: Literal["Upgrading", "Failed"]
    """Upgrading (the driver rolls to the new configuration) or Failed (not ready in time: the
    last stable spec runs until the spec changes)."""
    started_at: str = Field(alias="startedAt")
    """When the upgrade started (RFC 3339)."""
    message: str = ""
    """What is happening, or why it failed."""


class ConsumerGroups(Strict):
    data: str
    """The data topic's consumer group; its lag is the job's backlog."""
    models: str
    """The models topic's group prefix; each run of the job reads the whole topic under its own group."""


class ModelServingStatus(Strict):
    observed_generation: int = Field(0, alias="observedGeneration", ge=0)
    """The spec generation the operator last acted on."""
    phase: Phase = "Pending"
    """Pending, Running, Suspended, Degraded or Failed."""
    conditions: list[Condition] = Field(default_factory=list)
    """Ready, ModelReady, Progressing, Degraded."""
    reason: str = ""
    """Why the resource is not ready, in one word: the Degraded condition's reason while it is True,
    else the Ready condition's while that is False; empty when ready (a column of `kubectl get ms`)."""
    replicas: int = Field(0, ge=0)
    """Executors the job runs, as it reports them (the scale subresource reads this)."""
    selector: str = ""
    """The label selector of the job's pods (for the scale subresource)."""
    model: ModelStatus = Field(default_factory=ModelStatus)
    """The model served and the model desired."""
    consumer_groups: ConsumerGroups | None = Field(None, alias="consumerGroups")
    """The consumer groups the job uses."""
    lag: int | None = Field(None, ge=0)
    """Records in the data topic not yet processed (the data group's lag)."""
    driver: str | None = None
    """The driver's serving endpoint (http://host:port)."""
    scaling: ScalingStatus | None = None
    """The executors asked of the job, and how they change."""
    autoscaling: AutoscalingStatus | None = None
    """The autoscaler's last decision (with spec.autoscaling)."""
    last_stable_spec: StableSpec | None = Field(None, alias="lastStableSpec")
    """The spec under which the job last ran ready: what a failed upgrade goes back to."""
    upgrade: UpgradeStatus | None = None
    """A job upgrade in progress, or the one that failed."""
    controls: ControlsStatus | None = None
    """The manual rollout controls acted on (promote, abort, rollback-to annotations)."""


def transition_errors(old: ModelServingSpec, new: ModelServingSpec) -> list[str]:
    """The CRD's transition rules (CEL `oldSelf`), for the operator and `render` alike."""
    errors = []
    if old.data_type != new.data_type:
        errors.append("spec.dataType: dataType is immutable: it keys the model messages this job serves")
    if old.checkpoint != new.checkpoint:
        errors.append("spec.checkpoint: checkpoint is immutable: it is the driver's volume claim template")
    return errors
