"""Which models topic a ModelServing's model messages go to, and as whom the operator writes them
(docs/adr/0027-one-models-topic-per-namespace-written-by-the-operator.md).

A spec that leaves kafka.modelsTopic unset gets the topic the operator assigns: its namespace's own,
`<modelsTopicPrefix><namespace>`, or the one shared topic the cluster admin configured. The
operator writes an assigned topic with its own principal (OperatorConfig.modelsKafka), so a tenant's
principal needs only to read its namespace's topic. A topic the spec names is the tenant's own: the
operator writes it with the tenant's credentials, and Kafka's ACLs decide. The operator's
credentials go only to the brokers the admin named with them: a spec names any brokers it likes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scorestream import naming
from scorestream.api.v1alpha1.modelserving import KafkaSpec
from scorestream.config import read_properties_text, under_models_prefix


@dataclass(frozen=True)
class Assignment:
    """The admin's choice (OperatorConfig): a shared topic, or one per namespace under a prefix."""

    shared: str | None = None
    prefix: str = naming.MODELS_TOPIC_PREFIX

    @classmethod
    def of(cls, config) -> "Assignment":
        return cls(shared=config.models_topic, prefix=config.models_topic_prefix)

    def assigned(self, namespace: str) -> str:
        return self.shared or naming.namespace_models_topic(namespace, self.prefix)

    def topic(self, kafka: KafkaSpec, namespace: str) -> str:
        return kafka.models_topic or self.assigned(namespace)

    def refusal(self, kafka: KafkaSpec) -> str | None:
        """Why a spec may not read or write the topics it names for data, output or dead letters:
        one is a models topic of the admin's choice. The CRD's rule knows only the default prefix;
        the chart may set another prefix, or one shared topic."""
        why = under_models_prefix(kafka, self.prefix)
        if why is not None:
            return why
        if self.shared in (kafka.data_topic, kafka.output_topic, kafka.dead_letter_topic):
            return (f"dataTopic, outputTopic and deadLetterTopic may not be {self.shared!r}: it is the"
                    f" operator's shared models topic")
        return None


@dataclass(frozen=True)
class Route:
    topic: str
    bootstrap_servers: str
    properties: dict[str, str]  # the client settings the operator writes the topic with
    by_operator: bool  # with the operator's own principal (else the resource's credentials)


def brokers(bootstrap: str) -> frozenset[str]:
    """A bootstrap list as a set of host:port, so that order, spaces and case do not matter."""
    return frozenset(b.strip().lower() for b in bootstrap.split(",") if b.strip())


def route(kafka: KafkaSpec, namespace: str, assignment: Assignment, tenant_properties: dict[str, str],
          models_kafka=None) -> Route:
    """Where and as whom the model messages of a resource in `namespace` are published.
    `models_kafka` is OperatorConfig.modelsKafka (None: the operator has no principal of its own)."""
    topic = assignment.topic(kafka, namespace)
    if (models_kafka is not None and topic == assignment.assigned(namespace)
            and brokers(kafka.bootstrap_servers) == brokers(models_kafka.bootstrap_servers)):
        return Route(topic, models_kafka.bootstrap_servers, operator_properties(models_kafka.properties_file), True)
    return Route(topic, kafka.bootstrap_servers, tenant_properties, False)


def operator_properties(path: str) -> dict[str, str]:
    """The operator's own client settings, read at each use (a rotated Secret applies at once).
    A line that does not parse is named by number: its text may be a password."""
    try:
        return read_properties_text(Path(path).read_text())
    except OSError as e:
        raise LookupError(f"the operator's Kafka settings (modelsKafka.propertiesFile) cannot be read:"
                          f" {e.strerror}") from None
    except ValueError as e:
        raise LookupError(f"the operator's Kafka settings (modelsKafka.propertiesFile): {e}") from None
