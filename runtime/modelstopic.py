"""The driver's reader of the models topic: restore on start, then follow.

Only the driver reads this topic, so a new model is loaded and checked once and then used by
every executor from the next micro-batch on. The topic is compacted and keyed by the job's
namespace, name and dataType (``naming.model_key``); the job takes only its own keys (and the
report's dataType keys where it opted in), so ModelServings may share a topic. On start the
whole topic is replayed and, per dataType, the newest message that loads is restored; a
candidate (key ``.../candidate``) is restored from its newest message only, and a tombstone
there withdraws it. Where the spec opts in (``kafka.keylessModels``) a second topic, not
compacted, is read alongside for producers that send no key: its messages count as unaddressed.
Partitions are assigned, not subscribed: the per-run group id only labels the client, and no
offsets are committed, so restarts leave no stale groups behind.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
import traceback
from dataclasses import dataclass

from scorestream import naming
from scorestream.api import descriptor as descriptors
from scorestream.config import JobConfig
from scorestream.runtime.models import ModelLoader, ModelRegistry, ModelRejected

log = logging.getLogger(__name__)

KEYLESS_ON_MODELS_TOPIC = ("a model message without a key on the models topic {topic!r}, which is keyed and"
                           " compacted: key it (<dataType> with acceptUnaddressedModels) or publish it to"
                           " kafka.keylessModels.topic")


@dataclass
class Item:
    """One message's meaning: a model (serving or candidate), a withdrawn candidate, or a reason
    it is unusable."""

    data_type: str
    candidate: bool
    label: str
    descriptor: descriptors.ModelDescriptor | None = None
    reason: str | None = None


class ModelsFollower:
    def __init__(self, config: JobConfig, loader: ModelLoader, registry: ModelRegistry, run_id: str | None = None):
        from confluent_kafka import Consumer

        self.config = config
        self.loader = loader
        self.registry = registry
        self.topic = config.kafka.models_topic
        # The keyless models topic (kafka.keylessModels), read next to the compacted one.
        keyless = config.kafka.keyless_models
        self.keyless_topic = keyless.topic if keyless is not None else None
        self.topics = [self.topic] + ([self.keyless_topic] if self.keyless_topic else [])
        self.group = naming.models_group(config.namespace, config.name, run_id)
        self.consumer = Consumer(
            {
                **config.kafka.client_properties(),
                "group.id": self.group,
                "enable.auto.commit": False,
                "enable.partition.eof": False,
            }
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.restored = False
        self.error: str | None = None

    def _served(self, data_type: str) -> bool:
        return not self.config.data_types or data_type in self.config.data_types

    def restore(self, timeout: float) -> None:
        """Replay the topic up to its current end and install the newest good model per dataType."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        ends: dict[tuple[str, int], int] = {}
        for topic in self.topics:
            meta = self.consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                what = "keyless models topic" if topic == self.keyless_topic else "models topic"
                raise RuntimeError(f"{what} {topic!r} is not available: {meta.error if meta else 'missing'}")
            for p in sorted(meta.partitions):
                ends[(topic, p)] = self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout,
                                                                       cached=False)[1]
        self.consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in ends])
        pending = {tp for tp, end in ends.items() if end > 0}
        # (dataType, candidate?) -> topic -> (timestamp, item), oldest first
        seen: dict[tuple[str, bool], dict[str, list[tuple[int, Item]]]] = {}
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"models topic replay did not reach the end of {sorted(pending)} in {timeout:.0f}s")
            for msg in self.consumer.consume(500, timeout=0.5):
                if msg.error() is not None:
                    log.warning("models topic: %s", msg.error())
                    continue
                item = self._guarded_read(msg)
                if item is not None:
                    seen.setdefault((item.data_type, item.candidate), {}).setdefault(msg.topic(), []).append(
                        (msg.timestamp()[1], item))
                if msg.offset() + 1 >= ends[(msg.topic(), msg.partition())]:
                    pending.discard((msg.topic(), msg.partition()))
        # Each topic in its own order; across the two, the newer message (by its timestamp) is newer.
        seen = {k: [item for _, item in heapq.merge(*by_topic.values(), key=lambda t: t[0])]
                for k, by_topic in seen.items()}
        # Serving models first: a candidate stands next to one.
        for (data_type, candidate), items in sorted(seen.items(), key=lambda kv: kv[0][1]):
            if candidate:
                # Only the newest candidate counts: an older one was replaced or withdrawn on purpose.
                self._guarded_apply(items[-1])
                continue
            for item in reversed(items):  # the newest serving model that loads
                if self._guarded_apply(item):
                    break
        self.restored = True

    def _addressed(self, key: naming.ModelKey, topic: str) -> bool:
        """Is a message for this job: keyed to its namespace and name, or the report's unaddressed
        key where the spec opted in (acceptUnaddressedModels, or any message on the keyless models
        topic). Others' messages on a shared topic are not this job's concern: skipped without a
        trace in its /models, status or Events."""
        if key.namespace is None:
            return self.config.kafka.accept_unaddressed_models or topic == self.keyless_topic
        return key.addressed_to(self.config.namespace, self.config.name)

    def _opted_in(self) -> bool:
        return self.config.kafka.accept_unaddressed_models or self.keyless_topic is not None

    def _read(self, msg) -> Item | None:
        """What a message asks for; None if it is not addressed to this job or is for a dataType
        it does not serve."""
        key = naming.parse_model_key((msg.key() or b"").decode(errors="replace"))
        keyless_here = not msg.key() and msg.topic() != self.keyless_topic
        if not (self._opted_in() if keyless_here else self._addressed(key, msg.topic())):
            return None
        # The key names the dataType (compaction key) even when the value is unreadable.
        if not msg.value() and key.candidate:  # a tombstone: the candidate is withdrawn
            return Item(key.data_type, True, f"offset {msg.offset()}") if self._served(key.data_type) else None
        try:
            d = descriptors.decode(msg.value(), dict(msg.headers() or []))
        except descriptors.BadModelMessage as e:
            data_type, label = key.data_type or e.data_type, e.label or f"offset {msg.offset()}"
            if data_type and self._served(data_type):
                return Item(data_type, key.candidate, label, reason=str(e))
            if not data_type:
                self.registry.reject(label, None, str(e))
            return None
        if keyless_here:
            # Only a topic that is not compacted holds a message without a key, and the models
            # topic is meant to be compacted: such messages go to the keyless models topic.
            return Item(d.data_type, d.candidate is not None, d.label, reason=KEYLESS_ON_MODELS_TOPIC.format(
                topic=self.topic)) if self._served(d.data_type) else None
        mismatch = bool(key.data_type) and (key.data_type != d.data_type or key.candidate != (d.candidate is not None))
        # A message keyed to a dataType this job serves is its concern whatever its descriptor
        # says: skipping it for naming another dataType would leave no trace of the bad message.
        if not self._served(d.data_type) and not (mismatch and self._served(key.data_type)):
            return None
        if mismatch:
            # Compaction keeps the newest message per key: a dataType or role that disagrees with
            # its key would be kept or dropped with the wrong messages.
            want = (naming.model_key(self.config.namespace, self.config.name, d.data_type, d.candidate is not None)
                    if key.namespace is not None else naming.unaddressed_model_key(d.data_type, d.candidate is not None))
            return Item(d.data_type if self._served(d.data_type) else key.data_type, key.candidate, d.label,
                        reason=f"message key for {key.data_type!r} does not match the descriptor: expected {want!r}")
        return Item(d.data_type, d.candidate is not None, d.label, descriptor=d)

    # A model message is untrusted input: whatever goes wrong with one, it is rejected with a
    # reason and the follower goes on. The reason names only the exception's type, since its text
    # may quote the message or what its location pointed at.
    def _guarded_read(self, msg) -> Item | None:
        try:
            return self._read(msg)
        except Exception as e:
            log.error("models topic: offset %s could not be read: %s\n%s", msg.offset(), type(e).__name__, _frames(e))
            self.registry.reject(f"offset {msg.offset()}", None, f"unreadable model message ({type(e).__name__})")
            return None

    def _guarded_apply(self, item: Item) -> bool:
        try:
            return self._apply(item)
        except Exception as e:
            log.error("models topic: %s for dataType %s failed to load: %s\n%s", item.label, item.data_type,
                      type(e).__name__, _frames(e))
            self.registry.reject(item.label, item.data_type, f"model failed to load ({type(e).__name__})")
            return False

    def _apply(self, item: Item) -> bool:
        """Install, install as candidate, withdraw or reject; True if a model now serves from it."""
        if item.reason is not None:
            self.registry.reject(item.label, item.data_type, item.reason)
            return False
        d = item.descriptor
        if d is None:
            self.registry.withdraw_candidate(item.data_type)
            return False
        try:
            model = self.loader.load(d)
            if d.candidate is None:
                self.registry.install(model)
            else:
                self.registry.install_candidate(model, d.candidate.strategy, d.candidate.basis_points)
        except ModelRejected as e:
            self.registry.reject(d.label, d.data_type, str(e))
            return False
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._follow, name="models-follower", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        try:
            while not self._stop.is_set():
                for msg in self._poll():
                    if msg.error() is not None:
                        log.warning("models topic: %s", msg.error())
                        continue
                    item = self._guarded_read(msg)
                    if item is not None:
                        self._guarded_apply(item)
        except Exception as e:  # the job reports it unready rather than serving stale models silently
            self.error = f"models follower stopped: {e}"
            log.exception("models follower stopped")

    def _poll(self) -> list:
        """The messages there are, as soon as one arrives. ``consume(n, timeout)`` returns only
        once it has n messages or the timeout passed, which held every swap back by up to 0.5 s."""
        first = self.consumer.poll(0.5)
        return [] if first is None else [first, *self.consumer.consume(99, timeout=0)]

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5)
        self.consumer.close()


def _frames(e: BaseException) -> str:
    """Where an exception was raised, without its message (which may quote untrusted input)."""
    return "".join(traceback.format_tb(e.__traceback__))
