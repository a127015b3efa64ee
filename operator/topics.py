"""Kafka topics a ModelServing needs: the output, dead-letter and models topics (and the keyless
models topic, where the spec opts in) are ensured; the data topic is only checked, because creating
it would hide a misspelt name."""

from __future__ import annotations

from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from scorestream.api.v1alpha1.modelserving import KafkaSpec, KeylessModels
from scorestream.operator.kafkabound import Deadline, client_caps, client_timeouts
from scorestream.operator.kafkalog import client_config
from scorestream.operator.models_route import Route


@dataclass
class TopicsReport:
    data_topic_exists: bool | None = None  # None: the broker did not answer
    data_partitions: int | None = None  # the data topic's partitions: the job's useful parallelism
    created: list[str] = field(default_factory=list)
    error: str | None = None
    unreachable: bool = False  # the brokers did not answer in time (error says so)


# What librdkafka says when no broker answered (not a refusal by one that did).
NO_ANSWER = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
                       KafkaError._RESOLVE, KafkaError.REQUEST_TIMED_OUT})


def no_answer(kafka: KafkaSpec, timeout: float) -> str:
    return f"Kafka at {kafka.bootstrap_servers} did not answer within {timeout:g} s"


class SettingsRefused(ValueError):
    """librdkafka refused a client setting (from spec.kafka.properties or its Secret)."""


def _admin(settings: dict[str, str], timeout: float) -> AdminClient:
    try:
        return AdminClient(client_config({**settings, **client_timeouts(timeout), **client_caps()}))
    except KafkaException as e:  # names the property, never its value
        raise SettingsRefused(f"the Kafka client refused its settings: {e.args[0].str()}") from None


def ensure_topics(kafka: KafkaSpec, client_properties: dict[str, str], replication: int = -1,
                  timeout: float = 10.0, models: Route | None = None) -> TopicsReport:
    """Blocking (confluent-kafka admin): run it in a thread. Every call of it together takes at
    most `timeout` seconds (kafkabound). `models` says where the model messages go and as whom
    (models_route.route); None: kafka.modelsTopic, with the resource's credentials. A models topic
    the operator writes with its own principal is created with that principal: the tenant's may
    only read it."""
    if models is None and kafka.models_topic:
        models = Route(kafka.models_topic, kafka.bootstrap_servers, client_properties, by_operator=False)
    deadline = Deadline(timeout)
    try:
        admin = _admin({**client_properties, "bootstrap.servers": kafka.bootstrap_servers}, timeout)
    except SettingsRefused as e:
        return TopicsReport(error=str(e))
    try:
        report = _ensure(admin, kafka, replication, deadline,
                         None if models is None or models.by_operator else models)
    finally:
        admin.poll(0)  # hands librdkafka's queued log messages to Python logging (kafkalog)
    if models is not None and models.by_operator and report.error is None:
        try:
            own = _admin({**models.properties, "bootstrap.servers": models.bootstrap_servers},
                         max(deadline.left(), 0.1))
        except SettingsRefused as e:
            report.error = f"the operator's models topic settings: {e}"
            return report
        try:
            theirs = _ensure_models(own, kafka, models.topic, replication, deadline)
        finally:
            own.poll(0)
        report.created += theirs.created
        report.error, report.unreachable = theirs.error, theirs.unreachable
    return report


def check_data_topic(kafka: KafkaSpec, client_properties: dict[str, str], timeout: float = 10.0) -> TopicsReport:
    """Only whether the data topic exists, and its partitions: where the other topics are made by
    someone else (Strimzi's Topic Operator, spec.kafka.strimziTopics). Blocking: run it in a thread."""
    deadline = Deadline(timeout)
    try:
        admin = _admin({**client_properties, "bootstrap.servers": kafka.bootstrap_servers}, timeout)
    except SettingsRefused as e:
        return TopicsReport(error=str(e))
    try:
        existing = _existing(admin, kafka, deadline, [kafka.data_topic])
    finally:
        admin.poll(0)
    if isinstance(existing, TopicsReport):
        return existing
    topic = existing.get(kafka.data_topic)
    return TopicsReport(data_topic_exists=topic is not None, data_partitions=len(topic.partitions) if topic else None)


def _list(admin: AdminClient, kafka: KafkaSpec, deadline: Deadline, topic: str | None = None, who: str = ""):
    """The cluster's topics (or one topic's), or the report of why they could not be listed."""
    try:
        return admin.list_topics(topic, timeout=deadline.left())
    except KafkaException as e:  # broker unreachable, auth failure
        error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
        if error is not None and error.code() in NO_ANSWER:
            return TopicsReport(error=no_answer(kafka, deadline.seconds), unreachable=True)
        return TopicsReport(error=f"cannot list topics on {kafka.bootstrap_servers}{who}: {e}")


def _existing(admin: AdminClient, kafka: KafkaSpec, deadline: Deadline, names: list[str]):
    """The named topics that exist (by name), asked one topic at a time: the metadata of a cluster's
    every topic is as large as the cluster, and the operator needs a few. Or the report of why
    they could not be listed."""
    found = {}
    for name in dict.fromkeys(names):
        meta = _list(admin, kafka, deadline, name)
        if isinstance(meta, TopicsReport):
            return meta
        topic = meta.topics.get(name)
        # librdkafka answers a topic asked for by name even when the broker has none by that name.
        if topic is not None and topic.error is None:
            found[name] = topic
    return found


def _models_topic(topic: str, replication: int) -> NewTopic:
    return NewTopic(topic, 1, replication, config={"cleanup.policy": "compact"})


def _ensure_models(admin: AdminClient, kafka: KafkaSpec, topic: str, replication: int,
                   deadline: Deadline) -> TopicsReport:
    """The models topic, with the operator's principal. Its existence is asked of that topic alone
    (the principal may describe nothing else)."""
    meta = _list(admin, kafka, deadline, topic, who=" as the operator")
    if isinstance(meta, TopicsReport):
        return meta
    report = TopicsReport()
    found = meta.topics.get(topic)
    if found is None or found.error is not None:
        errors = _create(admin, kafka, [_models_topic(topic, replication)], deadline, report, who=" as the operator")
        report.error = "; ".join(errors) or None
    return report


def _create(admin: AdminClient, kafka: KafkaSpec, missing: list[NewTopic], deadline: Deadline,
            report: TopicsReport, who: str = "") -> list[str]:
    """Create the missing topics within the deadline, into `report`; the errors."""
    errors = []
    left = max(deadline.left(), 0.1)  # 0 would mean librdkafka's default
    futures = admin.create_topics(missing, request_timeout=left, operation_timeout=left) if missing else {}
    for name, future in futures.items():
        try:
            future.result(timeout=deadline.left())
            report.created.append(name)
        except FutureTimeout:
            report.unreachable = True
            errors.append(f"cannot create topic {name}{who}: {no_answer(kafka, deadline.seconds)}")
        except Exception as e:
            if "TOPIC_ALREADY_EXISTS" in str(e):
                continue
            errors.append(f"cannot create topic {name}{who}: {e}")
    return errors


def _ensure(admin: AdminClient, kafka: KafkaSpec, replication: int, deadline: Deadline,
            models: Route | None) -> TopicsReport:
    names = [kafka.data_topic, kafka.output_topic, kafka.dead_letter_topic]
    names += [models.topic] if models is not None else []
    names += [kafka.keyless_models.topic] if kafka.keyless_models is not None else []
    existing = _existing(admin, kafka, deadline, names)
    if isinstance(existing, TopicsReport):
        return existing
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
            errors += _check_keyless(admin, keyless, deadline)
    errors += _create(admin, kafka, [t for name, t in wanted.items() if name not in existing], deadline, report)
    if errors:
        report.error = "; ".join(errors)
    return report


def keyless_topic_config(keyless: KeylessModels) -> dict[str, str]:
    """The keyless models topic's settings, as the operator creates it."""
    return {"cleanup.policy": "delete", "retention.ms": str(keyless.retention_hours * 3_600_000)}


def _check_keyless(admin: AdminClient, keyless: KeylessModels, deadline: Deadline) -> list[str]:
    """What is wrong with an existing keyless models topic: compacted (it refuses what it is for)
    or keeping messages for another time than spec.kafka.keylessModels says. Reported, not
    changed: the topic may be someone else's to configure."""
    from confluent_kafka.admin import ConfigResource

    name = keyless.topic
    try:
        (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name)],
                                          request_timeout=deadline.left()).values()
        config = {k: v.value for k, v in future.result(timeout=deadline.left()).items()}
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
