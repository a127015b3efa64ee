"""The models topics (#30 MED 8, docs/adr/0026): one per namespace by default, written by the
operator's own principal, read by each tenant's; the ACLs of docs/operations/security.md applied to
a real Apache Kafka broker with ACLs enabled."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from scorestream import naming
from scorestream.api.v1alpha1.modelserving import KafkaSpec, ModelServingSpec
from scorestream.operator import desired, models_route, publish, topics
from scorestream.operator.settings import ModelsKafka, OperatorConfig

from harness.acl_broker import AclBroker, documented_acls
from test_chart import by_kind, render
from test_desired import EXAMPLE

DOCS = Path(__file__).resolve().parents[1] / "docs" / "operations" / "security.md"
KAFKA = {"bootstrapServers": "kafka-0.kafka:9092,kafka-1.kafka:9092", "dataTopic": "d", "outputTopic": "o",
         "deadLetterTopic": "x"}
OWN = ModelsKafka(bootstrapServers="KAFKA-1.kafka:9092, kafka-0.kafka:9092", propertiesFile="/nonexistent")


def _route(kafka: dict, namespace="team-a", shared=None, models_kafka=OWN, read=lambda path: {"sasl.username": "op"}):
    spec = KafkaSpec.model_validate(kafka)
    assignment = models_route.Assignment(shared=shared)
    original = models_route.operator_properties
    models_route.operator_properties = read
    try:
        return models_route.route(spec, namespace, assignment, {"sasl.username": "tenant"}, models_kafka)
    finally:
        models_route.operator_properties = original


def test_the_default_is_the_namespaces_own_topic_written_by_the_operator():
    r = _route(KAFKA)
    assert (r.topic, r.by_operator, r.properties["sasl.username"]) == ("scorestream-models.team-a", True, "op")
    assert r.bootstrap_servers == OWN.bootstrap_servers
    shared = _route(KAFKA, shared="scorestream-models")
    assert (shared.topic, shared.by_operator) == ("scorestream-models", True)


def test_the_operators_credentials_never_go_where_a_spec_points():
    """Other brokers, another namespace's topic, a topic of the tenant's own: the tenant's credentials."""
    for kafka in ({**KAFKA, "bootstrapServers": "attacker.example:9092"},
                  {**KAFKA, "modelsTopic": "scorestream-models.team-b"},
                  {**KAFKA, "modelsTopic": "mine"}):
        r = _route(kafka)
        assert not r.by_operator and r.properties == {"sasl.username": "tenant"}, kafka
    assert _route({**KAFKA, "modelsTopic": "scorestream-models.team-a"}).by_operator  # its own, named
    assert not _route(KAFKA, models_kafka=None).by_operator  # no principal of its own


def test_an_unreadable_operator_secret_is_a_clear_error(tmp_path):
    with pytest.raises(LookupError, match="modelsKafka.propertiesFile"):
        models_route.operator_properties(str(tmp_path / "missing"))
    (tmp_path / "bad").write_text("sasl.password\n")
    with pytest.raises(LookupError, match="line 1") as e:
        models_route.operator_properties(str(tmp_path / "bad"))
    assert "sasl.password" not in str(e.value).split("line 1")[1]


def test_the_job_reads_the_topic_the_operator_writes():
    """The job's configuration names the assigned topic; the admin's shared topic reaches it too."""
    from scorestream.config import JobConfig

    body = {**EXAMPLE, "spec": {**EXAMPLE["spec"], "kafka": {k: v for k, v in EXAMPLE["spec"]["kafka"].items()
                                                              if k != "modelsTopic"}}}

    def job(settings: desired.Settings) -> JobConfig:
        objs = desired.desired_objects(body, settings=settings)
        return JobConfig.model_validate_json(next(o for o in objs if o["kind"] == "ConfigMap")["data"]["job.json"])

    ns = body["metadata"]["namespace"]
    assert job(desired.Settings()).kafka.models_topic == naming.namespace_models_topic(ns)
    shared = desired.Settings(models=models_route.Assignment(shared="scorestream-models"))
    assert job(shared).kafka.models_topic == "scorestream-models"


def test_the_chart_gives_the_operator_its_principal(helm):
    objs = render(helm, "--set", "models.kafka.bootstrapServers=kafka:9092", "--set", "models.kafka.secretName=op-kafka")
    config = OperatorConfig.model_validate(yaml.safe_load(by_kind(objs, "ConfigMap")[0]["data"]["operator.yaml"]))
    assert config.models_kafka.bootstrap_servers == "kafka:9092"
    pod = by_kind(objs, "Deployment")[0]["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "models-kafka"]
    assert volume["secret"]["secretName"] == "op-kafka"
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "models-kafka"]
    assert Path(config.models_kafka.properties_file).parent == Path(mount["mountPath"])
    default = OperatorConfig.model_validate(yaml.safe_load(by_kind(render(helm), "ConfigMap")[0]["data"]["operator.yaml"]))
    assert (default.models_kafka, default.models_topic, default.models_topic_prefix) == (None, None, "scorestream-models.")
    shared = render(helm, "--set", "models.sharedTopic=scorestream-models")
    assert OperatorConfig.model_validate(yaml.safe_load(by_kind(shared, "ConfigMap")[0]["data"]["operator.yaml"])) \
        .models_topic == "scorestream-models"


# --- a broker with ACLs -------------------------------------------------------------------------

USERS = ["operator", "tenant_a", "tenant_b"]
TEAMS = {"tenant_a": "team-a", "tenant_b": "team-b"}


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    from confluent_kafka.admin import AdminClient, NewTopic

    log = tmp_path_factory.mktemp("acl-broker") / "kafka.log"
    with AclBroker(USERS, log=log) as b:
        text = DOCS.read_text()
        per_namespace = documented_acls(text, "Per-namespace topics (the default)")
        for tenant, ns in TEAMS.items():
            b.add_acls(per_namespace, {"KAFKA": b.sasl_bootstrap, "OPERATOR": "operator",
                                       "TENANT": tenant, "NAMESPACE": ns})
            # Not the models topics' business: each tenant's own data topics, made by the admin.
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            for future in admin.create_topics([NewTopic(f"{ns}.data", 1, 1)]).values():
                future.result()
            b.add_acls([f'kafka-acls.sh --add --allow-principal "User:{tenant}" --operation All --topic {ns}. '
                        f'--resource-pattern-type prefixed'], {})
        yield b


def _spec(ns: str, b: AclBroker, **kafka) -> ModelServingSpec:
    raw = {**EXAMPLE["spec"], "kafka": {"bootstrapServers": b.sasl_bootstrap, "dataTopic": f"{ns}.data",
                                         "outputTopic": f"{ns}.out", "deadLetterTopic": f"{ns}.dlq", **kafka}}
    return ModelServingSpec.model_validate(raw)


def _produce(props: dict, topic: str, key: bytes, value: bytes) -> str | None:
    """The delivery error's name (None: taken)."""
    from confluent_kafka import Producer

    errors: list = []
    p = Producer({**props, "message.timeout.ms": 10000, "acks": "all"})
    p.produce(topic, key=key, value=value, on_delivery=lambda err, _m: errors.append(err))
    p.flush(15)
    assert errors, "no delivery report"
    return errors[0].name() if errors[0] is not None else None


def _read(props: dict, topic: str, group: str, timeout: float = 15.0) -> tuple[list, str | None]:
    """What a consumer assigned to partition 0 (as the job's models follower is) reads, and the
    name of the first error it meets."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**props, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    got, error = [], None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not got and error is None:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                error = m.error().name()
            else:
                got.append(m)
    finally:
        c.close()
    return got, error


def _metadata_error(props: dict, topic: str) -> str | None:
    """What the broker answers a principal asking for a topic's metadata (the first step of any read)."""
    from confluent_kafka import Consumer

    c = Consumer({**props, "group.id": "metadata"})
    try:
        error = c.list_topics(topic, timeout=10).topics[topic].error
    finally:
        c.close()
    return error.name() if error is not None else None


def test_a_broker_with_acls_takes_only_the_operators_models(acl_broker, tmp_path):
    """The Must-show of #30: a broker with ACLs enabled refusing a tenant's write to another's model key."""
    b = acl_broker
    secret = tmp_path / "operator.properties"
    secret.write_text(b.properties_text("operator"))
    own = ModelsKafka(bootstrapServers=b.sasl_bootstrap, propertiesFile=str(secret))
    assignment = models_route.Assignment()
    tenant_a, tenant_b = b.client("tenant_a"), b.client("tenant_b")
    props_a = {k: v for k, v in tenant_a.items() if k != "bootstrap.servers"}

    # The operator ensures team-a's topics (its models topic with its own principal) and publishes.
    spec = _spec("team-a", b)
    route = models_route.route(spec.kafka, "team-a", assignment, props_a, own)
    assert route.by_operator and route.topic == "scorestream-models.team-a"
    report = topics.ensure_topics(spec.kafka, props_a, replication=1, models=route)
    assert report.error is None and "scorestream-models.team-a" in report.created, report
    d = publish.descriptor(spec)
    publish.publish(route, d, publish.rollout_id(d), "team-a", "wine")
    spec_b = _spec("team-b", b)
    props_b = {k: v for k, v in tenant_b.items() if k != "bootstrap.servers"}
    route_b = models_route.route(spec_b.kafka, "team-b", assignment, props_b, own)
    assert topics.ensure_topics(spec_b.kafka, props_b, replication=1, models=route_b).error is None

    # Tenant A writes a model for team-b's resource: refused, on B's topic and on its own.
    forged = naming.model_key("team-b", "wine", "wine").encode()
    assert _produce(tenant_a, "scorestream-models.team-b", forged, b"{}") == "TOPIC_AUTHORIZATION_FAILED"
    assert _produce(tenant_a, "scorestream-models.team-a", forged, b"{}") == "TOPIC_AUTHORIZATION_FAILED"
    # A spec of team-a that points its models topic at team-b's: the operator writes it with
    # team-a's credentials, and the broker refuses it.
    pointed = _spec("team-a", b, modelsTopic="scorestream-models.team-b")
    lent = models_route.route(pointed.kafka, "team-a", assignment, props_a, own)
    assert not lent.by_operator
    with pytest.raises(publish.PublishError, match="TOPIC_AUTHORIZATION_FAILED"):
        publish.publish(lent, d, publish.rollout_id(d), "team-a", "wine")

    # Tenant A cannot read team-b's topic; team-a's job, with A's credentials, reads its own model.
    got, error = _read(tenant_a, "scorestream-models.team-b", naming.models_group("team-a", "wine"), timeout=5)
    assert got == [] and error in (None, "TOPIC_AUTHORIZATION_FAILED"), error
    assert _metadata_error(tenant_a, "scorestream-models.team-b") == "TOPIC_AUTHORIZATION_FAILED"
    got, error = _read(tenant_a, "scorestream-models.team-a", naming.models_group("team-a", "wine"))
    assert error is None and [m.key() for m in got] == [naming.model_key("team-a", "wine", "wine").encode()]


def test_the_shared_topic_is_written_by_the_operator_alone(acl_broker, tmp_path):
    """models.sharedTopic with the documented ACLs: only the operator writes; every tenant reads."""
    b = acl_broker
    shared = "scorestream-models"
    commands = documented_acls(DOCS.read_text(), "One shared topic")
    for tenant, ns in TEAMS.items():
        b.add_acls(commands, {"KAFKA": b.sasl_bootstrap, "OPERATOR": "operator", "TENANT": tenant, "NAMESPACE": ns})
    secret = tmp_path / "operator.properties"
    secret.write_text(b.properties_text("operator"))
    own = ModelsKafka(bootstrapServers=b.sasl_bootstrap, propertiesFile=str(secret))
    props_a = {k: v for k, v in b.client("tenant_a").items() if k != "bootstrap.servers"}
    spec = _spec("team-a", b)
    route = models_route.route(spec.kafka, "team-a", models_route.Assignment(shared=shared), props_a, own)
    assert route.by_operator and route.topic == shared
    # New ACLs reach the broker's authorizer through the metadata log: a moment after they are created.
    deadline = time.monotonic() + 15
    while (report := topics.ensure_topics(spec.kafka, props_a, replication=1, models=route)).error is not None:
        assert time.monotonic() < deadline, report.error
        time.sleep(0.5)
    d = publish.descriptor(spec)
    publish.publish(route, d, publish.rollout_id(d), "team-a", "wine")
    forged = naming.model_key("team-a", "wine", "wine").encode()
    assert _produce(b.client("tenant_b"), shared, forged, b"{}") == "TOPIC_AUTHORIZATION_FAILED"
    got, error = _read(b.client("tenant_b"), shared, naming.models_group("team-b", "wine"))
    assert error is None and got, "every tenant reads the shared topic (documented)"


def test_a_spec_may_not_name_the_admins_models_topics_for_its_own_data():
    """The CRD refuses the default prefix; a prefix or shared topic the chart sets is refused by the
    operator (InvalidSpec), or a tenant could read or write another namespace's models."""
    custom = models_route.Assignment(prefix="acme-models.")
    assert custom.refusal(KafkaSpec.model_validate(KAFKA)) is None
    for field in ("dataTopic", "outputTopic", "deadLetterTopic"):
        spec = KafkaSpec.model_validate({**KAFKA, field: "acme-models.team-b"})  # the CRD admits it
        assert "'acme-models.'" in custom.refusal(spec)
    shared = models_route.Assignment(shared="acme-all-models")
    assert "shared models topic" in shared.refusal(KafkaSpec.model_validate({**KAFKA, "outputTopic": "acme-all-models"}))
    assert models_route.Assignment().refusal(KafkaSpec.model_validate(KAFKA)) is None
