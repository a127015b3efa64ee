"""The driver's reader of the models topic: restore on start, then follow.

Only the driver reads this topic, so a new model is loaded and checked once and then used by
every executor from the next micro-batch on. The topic is compacted and keyed by dataType; on
start the whole topic is replayed and, per dataType, the newest message that loads is restored.
Partitions are assigned, not subscribed: the per-run group id only labels the client, and no
offsets are committed, so restarts leave no stale groups behind.
"""

from __future__ import annotations

import logging
import threading
import time

from scorestream import naming
from scorestream.api import descriptor as descriptors
from scorestream.config import JobConfig
from scorestream.runtime.models import ModelLoader, ModelRegistry, ModelRejected

log = logging.getLogger(__name__)


class ModelsFollower:
    def __init__(self, config: JobConfig, loader: ModelLoader, registry: ModelRegistry, run_id: str | None = None):
        from confluent_kafka import Consumer

        self.config = config
        self.loader = loader
        self.registry = registry
        self.topic = config.kafka.models_topic
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

        meta = self.consumer.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise RuntimeError(f"models topic {self.topic!r} is not available: {meta.error if meta else 'missing'}")
        parts = sorted(meta.partitions)
        ends = {p: self.consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=timeout, cached=False)[1] for p in parts}
        self.consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])
        pending = {p for p, end in ends.items() if end > 0}
        candidates: dict[str, list] = {}  # dataType -> messages, oldest first
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"models topic replay did not reach the end of {sorted(pending)} in {timeout:.0f}s")
            for msg in self.consumer.consume(500, timeout=0.5):
                if msg.error() is not None:
                    log.warning("models topic: %s", msg.error())
                    continue
                self._remember(msg, candidates)
                if msg.offset() + 1 >= ends[msg.partition()]:
                    pending.discard(msg.partition())
        for data_type, msgs in candidates.items():
            for label, desc_or_reason in reversed(msgs):
                if isinstance(desc_or_reason, str):
                    self.registry.reject(label, data_type, desc_or_reason)
                    continue
                if self._install(desc_or_reason):
                    break
        self.restored = True

    def _remember(self, msg, candidates: dict[str, list]) -> None:
        key = (msg.key() or b"").decode(errors="replace")
        try:
            d = descriptors.decode(msg.value(), dict(msg.headers() or []))
        except descriptors.BadModelMessage as e:
            # The key names the dataType (compaction key) even when the value is unreadable.
            data_type = key.split("/", 1)[0] or None
            if data_type and self._served(data_type):
                candidates.setdefault(data_type, []).append((f"offset {msg.offset()}", str(e)))
            elif not data_type:
                self.registry.reject(f"offset {msg.offset()}", None, str(e))
            return
        if self._served(d.data_type):
            candidates.setdefault(d.data_type, []).append((d.label, d))

    def _install(self, d: descriptors.ModelDescriptor) -> bool:
        try:
            model = self.loader.load(d)
        except ModelRejected as e:
            self.registry.reject(d.label, d.data_type, str(e))
            return False
        self.registry.install(model)
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._follow, name="models-follower", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        try:
            while not self._stop.is_set():
                for msg in self.consumer.consume(100, timeout=0.5):
                    if msg.error() is not None:
                        log.warning("models topic: %s", msg.error())
                        continue
                    batch: dict[str, list] = {}
                    self._remember(msg, batch)
                    for data_type, msgs in batch.items():
                        for label, item in msgs:
                            if isinstance(item, str):
                                self.registry.reject(label, data_type, item)
                            else:
                                self._install(item)
        except Exception as e:  # the job reports it unready rather than serving stale models silently
            self.error = f"models follower stopped: {e}"
            log.exception("models follower stopped")

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5)
        self.consumer.close()
