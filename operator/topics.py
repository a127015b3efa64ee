"""Kafka topics a ModelServing needs: the output, dead-letter and models topics (and the keyless
models topic, where the spec opts in) are ensured; the data topic is only checked, because creating
it would hide a misspelt name."""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient, NewTopic

from scorestream.config import KeylessModels
from scorestream.operator.kafkalog import client_config
from scorestream.operator.models_route import Route
from scorestream.operator.spec import KafkaSpec


@dataclass
class TopicsReport:
    data_topic_exists: bool | None = None  # None: the broker did not answer
    data_partitions: int | None = None  # the data topic's partitions: the job's useful parallelism
    created: list[str] = field(default_factory=list)
    error: str | None = None


def ensure_topics(kafka: KafkaSpec, client_properties: dict[str, str], replication: int = -1,
                  timeout: float = 10.0, models: Route | None = None) -> TopicsReport:
    """Blocking (confluent-kafka admin): run it in a thread. `models` says where the model messages
    go and as whom (models_route.route); None: kafka.modelsTopic, with the resource's credentials.
    A models topic the operator writes with its own principal is created with that principal: the
    tenant's may only read it."""
    if models is None and kafka.models_topic:
        models = Route(kafka.models_topic, kafka.bootstrap_servers, client_properties, by_operator=False)
    admin = AdminClient(client_config({**client_properties, "bootstrap.servers": kafka.bootstrap_servers}))
    try:
        report = _ensure(admin, kafka, replication, timeout, None if models is None or models.by_operator else models)
    finally:
        admin.poll(0)  # hands librdkafka's queued log messages to Python logging (kafkalog)
    if models is not None and models.by_operator and report.error is None:
        own = AdminClient(client_config({**models.properties, "bootstrap.servers": models.bootstrap_servers}))
        try:
            created, errors = _ensure_models(own, models.topic, replication, timeout)
        finally:
            own.poll(0)
        report.created += created
        report.error = "; ".join(errors) or None
    return report


def check_data_topic(kafka: KafkaSpec, client_properties: dict[str, str], timeout: float = 10.0) -> TopicsReport:
    """Only whether the data topic exists, and its partitions: where the other topics are made by
    someone else (Strimzi's Topic Operator, spec.kafka.strimziTopics). Blocking: run it in a thread."""
    admin = AdminClient(client_config({**client_properties, "bootstrap.servers": kafka.bootstrap_servers}))
    try:
        meta = admin.list_topics(timeout=timeout)
    except Exception as e:  # KafkaException: broker unreachable, auth failure
        return TopicsReport(error=f"cannot list topics on {kafka.bootstrap_servers}: {e}")
    finally:
        admin.poll(0)
    topic = meta.topics.get(kafka.data_topic)
    return TopicsReport(data_topic_exists=topic is not None, data_partitions=len(topic.partitions) if topic else None)


def _models_topic(topic: str, replication: int) -> NewTopic:
    return NewTopic(topic, 1, replication, config={"cleanup.policy": "compact"})


def _ensure_models(admin: AdminClient, topic: str, replication: int, timeout: float) -> tuple[list[str], list[str]]:
    """The models topic, with the operator's principal: (created, errors). Its existence is asked
    of that topic alone (the principal may describe nothing else)."""
    try:
        meta = admin.list_topics(topic, timeout=timeout)
    except Exception as e:  # KafkaException: broker unreachable, auth failure
        return [], [f"cannot describe the models topic {topic} as the operator: {e}"]
    found = meta.topics.get(topic)
    if found is not None and found.error is None:
        return [], []
    return _create(admin, [_models_topic(topic, replication)], timeout, who=" as the operator")


def _create(admin: AdminClient, missing: list[NewTopic], timeout: float, who: str = "") -> tuple[list[str], list[str]]:
    created, errors = [], []
    for name, future in (admin.create_topics(missing, request_timeout=timeout) if missing else {}).items():
        try:
            future.result()
            created.append(name)
        except Exception as e:
            if "TOPIC_ALREADY_EXISTS" in str(e):
                continue
            errors.append(f"cannot create topic {name}{who}: {e}")
    return created, errors


def _ensure(admin: AdminClient, kafka: KafkaSpec, replication: int, timeout: float,
            models: Route | None) -> TopicsReport:
    try:
        meta = admin.list_topics(timeout=timeout)
    except Exception as e:  # KafkaException: broker unreachable, auth failure
        return TopicsReport(error=f"cannot list topics on {kafka.bootstrap_servers}: {e}")
    existing = meta.topics
    report = TopicsReport(data_topic_exists=kafka.data_topic in existing)
    # Output and dead-letter topics get the data topic's partition count, so a key keeps its
    # partition end to end; the models topic is compacted (the latest model per key is kept).
    partitions = len(existing[kafka.data_topic].partitions) if report.data_topic_exists else 1
    report.data_partitions = partitions if report.data_topic_exists else None
    wanted = {
        kafka.output_topic: NewTopic(kafka.output_topic, partitions, replication),
        kafka.dead_letter_topic: NewTopic(kafka.dead_letter_topic, partitions, replication),
    }
    if models is not None:
        wanted[models.topic] = _models_topic(models.topic, replication)
    errors = []
    keyless = kafka.keyless_models
    if keyless is not None:
        # Not compacted: Kafka refuses a message without a key on a compacted topic.
        wanted[keyless.topic] = NewTopic(keyless.topic, 1, replication, config=keyless_topic_config(keyless))
        if keyless.topic in existing:
            errors += _check_keyless(admin, keyless, timeout)
    created, failed = _create(admin, [t for name, t in wanted.items() if name not in existing], timeout)
    report.created += created
    errors += failed
    if errors:
        report.error = "; ".join(errors)
    return report


def keyless_topic_config(keyless: KeylessModels) -> dict[str, str]:
    """The keyless models topic's settings, as the operator creates it."""
    return {"cleanup.policy": "delete", "retention.ms": str(keyless.retention_hours * 3_600_000)}


def _check_keyless(admin: AdminClient, keyless: KeylessModels, timeout: float) -> list[str]:
    """What is wrong with an existing keyless models topic: compacted (it refuses what it is for)
    or keeping messages for another time than spec.kafka.keylessModels says. Reported, not
    changed: the topic may be someone else's to configure."""
    from confluent_kafka.admin import ConfigResource

    name = keyless.topic
    try:
        (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name)],
                                          request_timeout=timeout).values()
        config = {k: v.value for k, v in future.result().items()}
    except Exception as e:  # KafkaException: no DescribeConfigs right, broker gone
        return [f"cannot check keylessModels.topic {name!r}: {e}"]
    want = keyless_topic_config(keyless)
    problems = []
    if "compact" in (config.get("cleanup.policy") or "").split(","):
        problems.append(f"keylessModels.topic {name!r} is compacted (cleanup.policy={config['cleanup.policy']}), where"
                        f" Kafka refuses messages without a key: set its cleanup.policy to delete")
    if config.get("retention.ms") != want["retention.ms"]:
        problems.append(f"keylessModels.topic {name!r} keeps messages for retention.ms={config.get('retention.ms')},"
                        f" not the {want['retention.ms']} of retentionHours {keyless.retention_hours}: set one to"
                        f" the other")
    return problems
