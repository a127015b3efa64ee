"""Kafka conditions that stall the job's writes, found by the driver and reported (GET /stats,
``kafkaErrors``; ``scorestream.api.job_http.KafkaError``).

NOT_ENOUGH_REPLICAS: a partition with fewer in-sync replicas than its topic's
``min.insync.replicas`` refuses every ``acks=all`` write. The job's producers (Spark's Kafka sink,
the exactly-once transactions) retry such a write until their delivery timeout (two minutes by
default), then its task fails and Spark runs it again: meanwhile the job looks healthy and only its
lag grows. The driver so reads the cluster's metadata itself, every few seconds, and reports the
condition as soon as the cluster shows it, whether or not a write has failed yet. Nothing is
lost either way: what is not written is not committed (the source's offsets, or the transaction),
and is written once the replicas are back.
"""

from __future__ import annotations

import logging
import threading
import time

from scorestream.api.job_http import KafkaError
from scorestream.config import KafkaConfig

log = logging.getLogger("scorestream.runtime")

# Every few seconds: a metadata request per poll, and the topics' settings (min.insync.replicas may
# change live) every tenth, or at each poll while a replica is out of sync.
POLL_SECONDS = 5.0
CONFIG_EVERY = 10
# Internal topics the job's exactly-once writes also go through (offsets and transaction markers).
INTERNAL = ("__consumer_offsets", "__transaction_state")


class ReplicaWatch(threading.Thread):
    """Follows the in-sync replicas of the job's topics; ``errors()`` is what /stats reports."""

    def __init__(self, kafka: KafkaConfig, exactly_once: bool, poll: float = POLL_SECONDS):
        super().__init__(daemon=True, name="kafka-replica-watch")
        self.kafka = kafka
        self.poll = poll
        self.roles = {kafka.data_topic: "data", kafka.output_topic: "output", kafka.dead_letter_topic: "deadLetter",
                      kafka.models_topic: "models"}
        if exactly_once:
            self.roles.update({t: "internal" for t in INTERNAL})
        self._min_isr: dict[str, int] = {}
        self._since: dict[tuple[str, str], float] = {}
        self._errors: list[KafkaError] = []
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def errors(self) -> list[KafkaError]:
        with self._lock:
            return list(self._errors)

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        from confluent_kafka.admin import AdminClient

        try:
            admin = AdminClient(dict(self.kafka.client_properties()))
        except Exception as e:  # a watch that cannot start must not stop the job
            log.warning("the replica watch did not start: %s", e)
            return
        polls = 0
        while not self._halt.is_set():
            try:
                meta = admin.list_topics(timeout=10)
                # The settings again while a replica is out of sync: min.insync.replicas may have
                # been raised since (the condition is then new), and it costs a request only then.
                if polls % CONFIG_EVERY == 0 or not self._min_isr or self._degraded(meta):
                    self._min_isr.update(self._read_min_isr(admin))
                self._check(meta)
            except Exception as e:  # the cluster unreachable: the job's own clients say so; try again
                log.debug("replica watch: %s", e)
            polls += 1
            self._halt.wait(self.poll)

    def _degraded(self, meta) -> bool:
        """Whether a partition of the watched topics has a replica out of sync."""
        return any(len(p.isrs) < len(p.replicas) for topic in self.roles if (t := meta.topics.get(topic)) is not None
                   for p in t.partitions.values())

    def _read_min_isr(self, admin) -> dict[str, int]:
        from confluent_kafka.admin import ConfigResource

        found = {}
        resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in self.roles]
        for resource, fut in admin.describe_configs(resources).items():
            try:
                entry = fut.result(10).get("min.insync.replicas")
                if entry is not None and entry.value is not None:
                    found[resource.name] = int(entry.value)
            except Exception:  # a topic not there (no models topic of its own; at-least-once's internals)
                continue
        return found

    def _check(self, meta) -> None:
        now = time.time()
        errors = []
        for topic, role in self.roles.items():
            t = meta.topics.get(topic)
            min_isr = self._min_isr.get(topic)
            if t is None or t.error is not None or min_isr is None:
                continue
            short = {p.id: len(p.isrs) for p in t.partitions.values() if len(p.isrs) < min_isr}
            key = (topic, "NOT_ENOUGH_REPLICAS")
            if not short:
                if self._since.pop(key, None) is not None:
                    log.info("%s topic %s: in-sync replicas back to min.insync.replicas or more", role, topic)
                continue
            if key not in self._since:
                self._since[key] = now
                log.warning("%s topic %s: partitions %s have %d in-sync replicas, fewer than its min.insync.replicas "
                            "%d: writes to them are refused until the replicas are back", role, topic,
                            sorted(short), min(short.values()), min_isr)
            errors.append(KafkaError(
                code="NOT_ENOUGH_REPLICAS", topic=topic, role=role, partitions=sorted(short),
                inSyncReplicas=min(short.values()), minInSyncReplicas=min_isr, since=self._since[key],
                message=f"{len(short)} partition(s) of {topic} have {min(short.values())} in-sync replica(s), "
                        f"fewer than min.insync.replicas={min_isr}: acks=all writes to them are refused"))
        for key in [k for k in self._since if k[0] not in {e.topic for e in errors}]:
            del self._since[key]  # a topic gone from the metadata: whatever it had is over
        with self._lock:
            self._errors = errors
