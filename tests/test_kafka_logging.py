"""The operator's own Kafka clients log through Python logging, at WARNING at most and without
repeats, instead of librdkafka's raw `%3|...|FAIL|...` lines on stderr. The broker is unreachable
for real: a loopback port nothing listens on refuses every connection."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest
import yaml

from scorestream.api.v1alpha1.modelserving import KafkaSpec
from scorestream.operator import kafkalog, models_route, publish, topics
from scorestream.tools.local.broker import free_port

EXAMPLE = yaml.safe_load((Path(__file__).resolve().parents[1] / "examples" / "wine-pmml.yaml").read_text())


@pytest.fixture
def unreachable() -> KafkaSpec:
    kafka = copy.deepcopy(EXAMPLE["spec"]["kafka"])
    kafka.pop("secretRef")
    kafka["bootstrapServers"] = f"127.0.0.1:{free_port()}"
    return KafkaSpec.model_validate(kafka)


@pytest.fixture
def fresh_filter():
    """Each test counts from an empty window (the filter is the process's, like the logger)."""
    for f in list(kafkalog.LOGGER.filters):
        kafkalog.LOGGER.removeFilter(f)
    yield
    for f in list(kafkalog.LOGGER.filters):
        kafkalog.LOGGER.removeFilter(f)


def test_topic_check_with_the_broker_down_logs_once_at_warning(unreachable, fresh_filter, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    report = topics.ensure_topics(unreachable, {}, timeout=3)
    assert report.unreachable and "did not answer within 3 s" in report.error
    ours = [r for r in caplog.records if r.name == kafkalog.LOGGER.name]
    assert ours, "librdkafka's messages reach Python logging"
    assert all(r.levelno == logging.WARNING for r in ours)
    messages = [r.getMessage() for r in ours]
    assert any("Connection refused" in m for m in messages)
    assert len({kafkalog.Deduplicated.key(r) for r in ours}) == len(ours), f"repeated: {messages}"
    assert "|FAIL|" not in capfd.readouterr().err


def test_publish_with_the_broker_down_fails_and_logs_without_repeats(unreachable, fresh_filter, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    with pytest.raises(publish.PublishError):
        route = models_route.Route(unreachable.models_topic or "scorestream-models.ml", unreachable.bootstrap_servers,
                                   {}, by_operator=False)
        publish._send(route, "ml/wine/wine", b"{}", [], "a model", timeout=2)
    ours = [r for r in caplog.records if r.name == kafkalog.LOGGER.name]
    assert ours and all(r.levelno == logging.WARNING for r in ours)
    assert len({kafkalog.Deduplicated.key(r) for r in ours}) == len(ours)
    assert "|FAIL|" not in capfd.readouterr().err


def test_a_repeat_after_the_window_says_how_many_were_dropped():
    now = [0.0]
    dedup = kafkalog.Deduplicated(window=60, clock=lambda: now[0])

    def record(text: str) -> logging.LogRecord:
        return logging.LogRecord(kafkalog.LOGGER.name, logging.ERROR, __file__, 1, "%s [%s] %s",
                                 ("FAIL", "rdkafka#producer-3", text), None)

    assert dedup.filter(first := record("Connect to 127.0.0.1:1 failed (after 0ms in state CONNECT)"))
    assert first.levelname == "WARNING"
    for ms in range(5):
        now[0] += 1
        assert not dedup.filter(record(f"Connect to 127.0.0.1:1 failed (after {ms}ms in state CONNECT)"))
    assert dedup.filter(record("Metadata request timed out"))  # another message passes
    now[0] += 60
    later = record("Connect to 127.0.0.1:1 failed (after 9ms in state CONNECT)")
    assert dedup.filter(later) and "(and 5 more like it in the last 60 s)" in later.getMessage()
