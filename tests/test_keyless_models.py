"""The report's keyless model producer (#32): Apache Kafka refuses a message without a key on a
compacted topic, and the models topic is compacted. Opted in with spec.kafka.keylessModels, the
operator creates (or checks) a second models topic that is not compacted, with the user's retention,
and the job reads keyless messages there, the newest per dataType serving. The compacted, addressed
default stays: the broker refuses keyless messages there, and a job that finds one on a models topic
that is not compacted rejects it saying where it belongs."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from scorestream.api import messages
from scorestream.api.v1alpha1.modelserving import KafkaSpec, ModelServingSpec
from scorestream.config import DEFAULT_MODELS_TOPIC
from scorestream.operator import topics as operator_topics
from scorestream.runtime.modelstopic import KEYLESS_ON_MODELS_TOPIC
from scorestream.tools.demo import feed, models

from harness.admission import admit
from harness.streaming import wait_until

EXAMPLE = yaml.safe_load((Path(__file__).resolve().parent.parent / "examples" / "wine-pmml.yaml").read_text())


def _with_keyless(keyless: dict | None, **kafka) -> dict:
    obj = copy.deepcopy(EXAMPLE)
    obj["spec"]["kafka"].update(kafka)
    if keyless is not None:
        obj["spec"]["kafka"]["keylessModels"] = keyless
    return obj


@pytest.mark.parametrize("keyless, kafka, word", [
    ({"topic": "wine-keyless", "retentionHours": 168}, {}, None),
    ({"topic": "wine-keyless", "retentionHours": 1}, {"modelsTopic": "mine", "acceptUnaddressedModels": True}, None),
    ({"topic": DEFAULT_MODELS_TOPIC, "retentionHours": 24}, {"modelsTopic": "mine"}, "keylessModels.topic needs"),
    ({"topic": "mine", "retentionHours": 24}, {"modelsTopic": "mine"}, "keylessModels.topic needs"),
    ({"topic": "wine-keyless", "retentionHours": 24}, {"modelsTopic": "wine-keyless"}, "keylessModels.topic needs"),
    ({"topic": "wine-keyless", "retentionHours": 0}, {}, "retentionHours"),
    ({"topic": "wine-keyless"}, {}, "retentionHours"),
    ({"topic": "not a topic!", "retentionHours": 24}, {}, "topic"),
])
def test_the_crd_and_the_spec_types_agree_on_keyless_models(keyless, kafka, word):
    obj = _with_keyless(keyless, **kafka)
    if word == "keylessModels.topic needs":  # the data, output and dead-letter topics too
        for other in ("dataTopic", "outputTopic", "deadLetterTopic"):
            same = _with_keyless({**keyless, "topic": obj["spec"]["kafka"][other]}, **kafka)
            assert any(word in e for e in admit(same)), other
    errors = admit(obj)
    try:
        spec = ModelServingSpec.model_validate(obj["spec"])
    except ValidationError as e:
        spec, refusal = None, str(e)
    if word is None:
        assert errors == [] and spec is not None and spec.kafka.keyless_models.topic == "wine-keyless"
    else:
        assert any(word in e for e in errors), errors
        assert spec is None and word in refusal, "pydantic accepts what the CRD rejects"


def test_off_by_default():
    assert KafkaSpec.model_validate(EXAMPLE["spec"]["kafka"]).keyless_models is None


# -- the operator's topic, on the real broker ---------------------------------------------------


def _topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    """The topic's settings, once the broker knows the topic it has just created."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})

    def describe() -> dict[str, str] | None:
        (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
        try:
            return {k: v.value for k, v in future.result(30).items()}
        except KafkaException as e:
            if e.args[0].name() != "UNKNOWN_TOPIC_OR_PART":
                raise
            return None

    deadline = time.monotonic() + 30
    while (config := describe()) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic}'s settings")
        time.sleep(0.2)
    return config


@pytest.mark.broker
def test_operator_creates_the_keyless_topic_uncompacted_and_checks_an_existing_one(serving):
    s = serving()
    bootstrap = s.broker.bootstrap
    keyless = f"{s.topics['models']}-keyless"
    kafka = KafkaSpec.model_validate({"bootstrapServers": bootstrap, **s.resource_topics,
                                      "keylessModels": {"topic": keyless, "retentionHours": 48}})
    report = operator_topics.ensure_topics(kafka, {})
    assert report.error is None and report.created == [keyless], report
    config = _topic_config(bootstrap, keyless)
    assert (config["cleanup.policy"], config["retention.ms"]) == ("delete", str(48 * 3600 * 1000))
    again = operator_topics.ensure_topics(kafka, {})
    assert again.error is None and again.created == [], again

    # Another retention in the spec: reported, not changed behind the topic owner's back.
    longer = kafka.model_copy(update={"keyless_models": kafka.keyless_models.model_copy(update={"retention_hours": 72})})
    report = operator_topics.ensure_topics(longer, {})
    assert report.error == (f"keylessModels.topic {keyless!r} keeps messages for retention.ms={48 * 3600000}, not the"
                            f" {72 * 3600000} of retentionHours 72: set one to the other")
    assert _topic_config(bootstrap, keyless)["retention.ms"] == str(48 * 3600 * 1000)

    # An existing compacted topic refuses what it is for: said so.
    compacted = kafka.model_copy(update={"keyless_models": kafka.keyless_models.model_copy(
        update={"topic": s.topics["models"] + "-c"})})
    from scorestream.tools.local.broker import create_topics

    create_topics(bootstrap, {compacted.keyless_models.topic: 1},
                  {compacted.keyless_models.topic: {"cleanup.policy": "compact", "retention.ms": str(48 * 3600000)}})
    report = operator_topics.ensure_topics(compacted, {})
    assert report.error is not None and "is compacted (cleanup.policy=compact)" in report.error, report
    assert "set its cleanup.policy to delete" in report.error


def _plain_produce(bootstrap: str, topic: str, value: bytes) -> str | None:
    """What the report's client does: a value, no key, no headers. The delivery error, if any."""
    from confluent_kafka import Producer

    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, value=value, on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(30) == 0
    return str(errors[0]) if errors[0] is not None else None


def _report_model(name: str, pmml: bytes) -> bytes:
    return messages.ModelDescriptorProto(name=name, dataType="wine", modeltype=2, data=pmml).SerializeToString()


@pytest.mark.broker
def test_the_compacted_models_topic_refuses_a_keyless_message(serving):
    s = serving()
    error = _plain_produce(s.broker.bootstrap, s.topics["models"], _report_model("report", models.tree_pmml()))
    assert error is not None and "INVALID_RECORD" in error, error


@pytest.mark.spark
@pytest.mark.broker
def test_keyless_protobuf_models_are_served_from_the_opted_in_topic(serving):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    rows = feed.wine_rows()
    tree, shallow = models.tree_pmml(rows), models.tree_pmml(rows, max_depth=2)
    s = serving()
    bootstrap, keyless = s.broker.bootstrap, f"{s.topics['models']}-keyless"
    kafka = KafkaSpec.model_validate({"bootstrapServers": bootstrap, **s.resource_topics,
                                      "keylessModels": {"topic": keyless, "retentionHours": 24}})
    assert operator_topics.ensure_topics(kafka, {}).created == [keyless]
    # Two keyless messages before the job starts: the newer one serves.
    assert _plain_produce(bootstrap, keyless, _report_model("report-1", shallow)) is None
    assert _plain_produce(bootstrap, keyless, _report_model("report-2", tree)) is None
    job = s.start(kafka={"keylessModels": {"topic": keyless, "retentionHours": 24}}).wait_ready()

    def serving_now():
        return job.get("/models")["serving"]["wine"]["name"]

    assert serving_now() == "report-2"
    n = s.produce(feed.wine_records(rows[:200]))
    job.wait_records(n)
    # While it runs: the next keyless message takes over.
    assert _plain_produce(bootstrap, keyless, _report_model("report-3", shallow)) is None
    wait_until(lambda: serving_now() == "report-3", timeout=60, what="the third keyless model")
    n += s.produce(feed.wine_records(rows[:200], start=1000))
    job.wait_records(n)

    # A models topic someone made without compaction carries a keyless message: not served, and
    # rejected with where it belongs.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, s.topics["models"], incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    assert _plain_produce(bootstrap, s.topics["models"], _report_model("stray", tree)) is None
    reason = KEYLESS_ON_MODELS_TOPIC.format(topic=s.topics["models"])
    wait_until(lambda: any(r["reason"] == reason for r in job.get("/models")["rejected"]), timeout=60,
               what="the keyless message on the models topic rejected")
    assert serving_now() == "report-3"
    assert job.stop() == 0

    out = s.outputs(expect=n)
    by_key = {o["key"]: o["model"]["name"] for o in out}
    assert len(by_key) == n and s.read("dlq", idle=1.0) == []
    assert {by_key[f"wine-{i}"] for i in range(200)} == {"report-2"}
    assert {by_key[f"wine-{1000 + i}"] for i in range(200)} == {"report-3"}


# -- the operator, against the real control plane and broker -------------------------------------


@pytest.mark.broker
async def test_the_operator_makes_the_keyless_topic_and_says_what_is_wrong_with_one(api, operator, job, broker,
                                                                                     topics):
    import json as jsonlib

    from scorestream.tools.local.broker import create_topics

    from harness.operator import apply, condition, obj, resource, until

    create_topics(broker.bootstrap, {topics["dataTopic"]: 1})
    keyless = {"topic": f"{topics['modelsTopic']}-keyless", "retentionHours": 12}
    await apply(api, resource({**topics, "keylessModels": keyless}, broker))
    await until(lambda: keyless["topic"] in _topics(broker.bootstrap), timeout=60, what="the keyless topic")
    config = _topic_config(broker.bootstrap, keyless["topic"])
    assert (config["cleanup.policy"], config["retention.ms"]) == ("delete", str(12 * 3600 * 1000))
    # The job's configuration names it, so the job reads it.
    job_config = await until(lambda: obj(api, "v1/configmaps", "wine-job"), what="the job's ConfigMap")
    assert jsonlib.loads(job_config["data"]["job.json"])["kafka"]["keylessModels"] == keyless

    # A compacted topic named instead: Degraded, saying why, until the spec or the topic changes.
    compacted = f"{topics['modelsTopic']}-compacted"
    create_topics(broker.bootstrap, {compacted: 1}, {compacted: {"cleanup.policy": "compact",
                                                                 "retention.ms": str(12 * 3600 * 1000)}})
    await apply(api, resource({**topics, "keylessModels": {**keyless, "topic": compacted}}, broker))
    cond = await until(lambda: condition(api, "wine", "Degraded").get("reason") == "TopicsUnavailable"
                       and condition(api, "wine", "Degraded"), timeout=60, what="Degraded: TopicsUnavailable")
    assert f"keylessModels.topic '{compacted}' is compacted" in cond["message"], cond


def _topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)
