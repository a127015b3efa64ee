"""A reconcile's Kafka calls within one budget (operator/kafkabound.py): a call gets what is left
as its timeout, none starts once the budget is spent, and one that overruns its own timeout is
given up at the deadline (plus GRACE) while the event loop stays free."""

from __future__ import annotations

import asyncio
import time

import pytest

from scorestream.operator import kafkabound



async def test_a_call_gets_what_is_left_and_none_starts_after_the_deadline():
    deadline = kafkabound.Deadline(2.0)
    got = await kafkabound.call(deadline, "a call", lambda timeout: timeout)
    assert 1.5 < got <= 2.0
    spent = kafkabound.Deadline(0.1)
    await asyncio.sleep(0.1)
    with pytest.raises(kafkabound.KafkaUnreachable, match="no answer from Kafka within 0.1 s"):
        await kafkabound.call(spent, "a call", lambda timeout: pytest.fail("started with no time left"))


async def test_a_call_that_ignores_its_timeout_is_given_up_and_the_loop_keeps_running():
    # A stand-in for a client teardown that overruns: the only way to make one here on purpose.
    ticks = 0

    async def tick():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    ticker = asyncio.create_task(tick())
    started = time.monotonic()
    with pytest.raises(kafkabound.KafkaUnreachable):
        await kafkabound.call(kafkabound.Deadline(0.5), "a stuck call", lambda timeout: time.sleep(timeout + 3))
    took = time.monotonic() - started
    ticker.cancel()
    assert took < 0.5 + kafkabound.GRACE + 0.5
    assert ticks >= 10  # the event loop ran while the call blocked its thread


def test_client_timeouts_stay_within_librdkafka_s_ranges():
    assert kafkabound.client_timeouts(3) == {"socket.timeout.ms": 3000, "socket.connection.setup.timeout.ms": 3000}
    assert kafkabound.client_timeouts(0.001) == {"socket.timeout.ms": 10, "socket.connection.setup.timeout.ms": 1000}


@pytest.mark.parametrize("check", ["ensure_topics", "check_data_topic"])
def test_a_client_setting_librdkafka_refuses_is_a_report_not_an_exception(check):
    # A tenant's kafka.properties (or its Secret) with a value librdkafka refuses: the resource is
    # told so (Degraded), not reconciled into an exception and retried for ever (the operator fuzz
    # found it). The message names the property, never its value.
    from scorestream.api.v1alpha1 import modelserving as s
    from scorestream.operator import topics

    kafka = s.KafkaSpec.model_validate({"bootstrapServers": "127.0.0.1:1", "dataTopic": "d", "outputTopic": "o",
                                        "deadLetterTopic": "x"})
    report = getattr(topics, check)(kafka, {"fetch.max.bytes": "s3cret-ish"}, timeout=1)
    assert report.error == 'the Kafka client refused its settings: Invalid value for configuration property "fetch.max.bytes"'
    assert "s3cret" not in report.error
