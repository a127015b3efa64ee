"""A slow broker, for real: Kafka's client quotas (KIP-13), set and removed with Apache Kafka's own
`kafka-configs` tool (``kafka.admin.ConfigCommand``, from the broker's pinned jars).

A producer over its quota is not refused: the broker answers with a throttle time and mutes the
connection for it, and the client holds its next requests as long (KIP-219). So a transactional
producer's transaction stays open as long as its records take at that rate.
"""

from __future__ import annotations

import subprocess
from contextlib import contextmanager

from scorestream.tools.local.broker import kafka_tool

# librdkafka's default client.id: the tests' own producers (their records, not the job's, pace a test).
TESTS_CLIENT_ID = "rdkafka"
UNLIMITED = 1 << 40


def configs(bootstrap: str, *args: str) -> None:
    done = subprocess.run(kafka_tool("kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, *args),
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"kafka-configs {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")


@contextmanager
def producers_throttled(bootstrap: str, bytes_per_second: int):
    """Every client id's produce rate held to `bytes_per_second` (the default client quota), but the
    tests' own producers'; both quotas removed on exit, also on failure."""
    exempt = ("--entity-type", "clients", "--entity-name", TESTS_CLIENT_ID)
    default = ("--entity-type", "clients", "--entity-default")
    configs(bootstrap, "--alter", "--add-config", f"producer_byte_rate={UNLIMITED}", *exempt)
    try:
        configs(bootstrap, "--alter", "--add-config", f"producer_byte_rate={bytes_per_second}", *default)
        try:
            yield
        finally:
            configs(bootstrap, "--alter", "--delete-config", "producer_byte_rate", *default)
    finally:
        configs(bootstrap, "--alter", "--delete-config", "producer_byte_rate", *exempt)
