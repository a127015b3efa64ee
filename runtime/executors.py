"""Live executor changes: the driver asks Spark's scheduler backend for a new executor total.

Spark's cluster managers with an ExecutorAllocationClient (standalone, Kubernetes, YARN) add and
remove executors of a running application; the streaming query keeps running and the next
micro-batch spreads over the executors it finds. Executors are removed only between micro-batches
(the batch lock is held), so no task of a batch dies with its executor and nothing is written
twice. Local mode has no executors to change: `live` is False, and the operator restarts the job
from its checkpoint instead.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)


class ExecutorControl:
    def __init__(self, spark, master: str, batch_lock: threading.Lock):
        self.spark = spark
        self.live = not master.startswith("local")
        self.batch_lock = batch_lock
        self.target: int | None = None
        self.requested_at: float | None = None
        self._jvm = spark.sparkContext._jvm.dev.scorestream.jvm.Executors if self.live else None

    def _sc(self):
        return self.spark.sparkContext._jsc.sc()

    def running(self) -> int:
        """Executors registered now (1 in local mode: the driver's own)."""
        if not self.live:
            return 1
        return max(0, self._sc().getExecutorMemoryStatus().size() - 1)

    def ids(self) -> list[str]:
        return list(self._jvm.ids(self._sc())) if self.live else ["driver"]

    def scale_to(self, total: int) -> dict:
        """Ask for `total` executors. More: requested from the cluster manager. Fewer: the newest
        are killed between two micro-batches."""
        if total < 0:
            raise ValueError("an executor total cannot be negative")
        if not self.live:
            return self.describe() | {"accepted": False, "reason": "local mode has no executors to change"}
        with self.batch_lock:  # between batches: no task runs on an executor we remove
            ids = self.ids()
            ok = bool(self._jvm.requestTotal(self._sc(), total))
            extra = sorted(ids, key=lambda i: (len(i), i))[total:] if total < len(ids) else []
            if extra:
                ok = bool(self._jvm.kill(self._sc(), ",".join(extra))) and ok
            self.target, self.requested_at = total, time.time()
        log.info("executors: %d running, %d requested%s", len(ids), total,
                 f" (removing {', '.join(extra)})" if extra else "")
        return self.describe() | {"accepted": ok}

    def enforce(self, settle: float = 5.0) -> None:
        """Keep the asked total: a cluster manager may start more executors than asked before the
        first request arrives (standalone offers all its cores at registration)."""
        if not self.live or self.target is None or time.time() - (self.requested_at or 0) < settle:
            return
        if self.running() > self.target:
            self.scale_to(self.target)

    def describe(self) -> dict:
        return {"live": self.live, "running": self.running(), "target": self.target,
                "requestedAt": self.requested_at}
