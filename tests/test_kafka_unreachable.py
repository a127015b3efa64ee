"""A reconcile never waits long for Kafka: with spec.kafka.bootstrapServers at an address nobody
answers, the operator's reconciles (the real operator process, on the tests' real API server) each
take a few seconds at most, and the status says why (Degraded: KafkaUnreachable); when a real broker
appears at that address, the next reconcile creates the topics and publishes the model.

Two kinds of nobody: a loopback port nothing listens on (connections refused at once, librdkafka
retries), and a 198.18.x.x address in a network namespace of the test's own whose replies go to a
blackhole route (connections neither accepted nor refused: a dropped packet)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from scorestream import monitoring as m
from scorestream.tools.local.broker import EmbeddedBroker, create_topics, free_port

from harness.netns import OwnHost, Unavailable
from harness.operator import Operator, apply, condition, events, operator_config, resource, until

pytestmark = pytest.mark.broker

# The operator's default kafkaTimeout is 3 s; a reconcile also applies its children and reads its
# driver pod on the side.
BOUND = 5.0


def reconcile_seconds(port: int) -> tuple[float, float]:
    """(reconciles in all, reconciles that took BOUND seconds or less), from the operator's histogram."""
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    total = within = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == m.RECONCILE_SECONDS.name + "_bucket":
                if s.labels["le"] == "+Inf":
                    total += s.value
                elif float(s.labels["le"]) == BOUND:
                    within += s.value
    return total, within


async def unreachable_then_recovered(api, topics, bootstrap: str, broker_at=None):
    port = free_port()
    op = Operator(api, operator_config(api, observeInterval=1, metricsPort=port))
    await op.start()
    try:
        started = time.monotonic()
        await apply(api, resource(topics, SimpleNamespace(bootstrap=bootstrap)))
        degraded = await until(lambda: condition(api, "wine", "Degraded").get("reason") == "KafkaUnreachable"
                               and condition(api, "wine", "Degraded"), timeout=30, what="Degraded KafkaUnreachable")
        took = time.monotonic() - started
        assert degraded["status"] == "True" and bootstrap in degraded["message"] and "did not answer" in degraded["message"]
        # The model could not be sent either, and the status says so rather than waiting for it.
        model = condition(api, "wine", "ModelReady")
        assert model.get("status") != "True", model
        # A few observations more, each bounded.
        await until(lambda: reconcile_seconds(port)[0] >= 4, timeout=30, what="four reconciles")
        total, within = reconcile_seconds(port)
        print(f"\n{bootstrap}: Degraded KafkaUnreachable {took:.1f} s after the apply; "
              f"{within:.0f} of {total:.0f} reconciles within {BOUND} s")
        assert within == total, f"a reconcile took longer than {BOUND} s\n{op.log[-4000:]}"
        assert took < 2 * BOUND
        assert "Traceback" not in op.log
        if broker_at is None:
            return
        with broker_at() as broker:
            create_topics(broker.bootstrap, {topics["dataTopic"]: 2})
            await until(lambda: condition(api, "wine", "Degraded").get("status") == "False", timeout=60,
                        what="Degraded False once the broker answers")
            await until(lambda: events(api, "ModelPublished"), timeout=30, what="the model published")
            assert condition(api, "wine", "Ready").get("reason") != "KafkaUnreachable"
    finally:
        await op.stop()


async def test_a_loopback_port_nobody_listens_on_then_a_broker_there(api, topics, tmp_path):
    port = free_port()
    await unreachable_then_recovered(api, topics, f"127.0.0.1:{port}",
                                     broker_at=lambda: EmbeddedBroker(port=port, log=tmp_path / "kafka.log"))


async def test_an_address_whose_packets_are_dropped(api, topics):
    try:
        host = OwnHost.make()
    except Unavailable as e:
        pytest.skip(str(e))
    try:
        host.unanswering()
        await unreachable_then_recovered(api, topics, f"{host.address}:9092")
    finally:
        host.remove()
