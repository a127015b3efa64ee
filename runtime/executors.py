"""Live executor changes: the driver asks Spark's scheduler backend for a new executor total.

Spark's cluster managers with an ExecutorAllocationClient (standalone, Kubernetes, YARN) add and
remove executors of a running application; the streaming query keeps running and the next
micro-batch spreads over the executors it finds. Executors are removed only between micro-batches
(the batch lock is held), so no task of a batch dies with its executor and nothing is written
twice. Local mode has no executors to change, nor has a real-time query a moment between batches
to remove one: `live` is False, and the operator restarts the job from its checkpoint instead.

A request only records the total; one thread applies it. Applying may wait for a micro-batch to
end and for the cluster manager's answer, and neither the HTTP endpoint the operator calls nor
the loop that watches the query may wait that long.
"""

from __future__ import annotations

import logging
import threading
import time

from scorestream.api.job_http import Executors, ScaleAnswer

log = logging.getLogger(__name__)


class ExecutorControl:
    def __init__(self, spark, master: str, batch_lock: threading.Lock, real_time: bool = False):
        self.spark = spark
        # A real-time query's tasks hold their executors for whole batches: there is no moment
        # between batches to remove one, and one removed mid-batch would redo its records.
        self.cluster = not master.startswith("local")  # executors of their own, not local mode's
        self.live = self.cluster and not real_time
        self._fixed = "local mode has no executors to change" if not self.cluster else \
            "a real-time query holds its executors through every batch: the job restarts to change them"
        self.batch_lock = batch_lock
        self.target: int | None = None
        self.requested_at: float | None = None
        self.applied: int | None = None  # the total last handed to the cluster manager
        self.error: str | None = None
        # Executors asked to go: Spark lists them for a few seconds more, and asking the cluster
        # manager to kill one twice can block on its answer until the RPC timeout (seen: minutes).
        self._killed: set[str] = set()
        self._wake = threading.Event()
        self._closed = False
        self._jvm = spark.sparkContext._jvm.dev.scorestream.jvm.Executors if self.cluster else None
        if self.live:
            threading.Thread(target=self._apply_loop, name="executor-control", daemon=True).start()

    def _sc(self):
        return self.spark.sparkContext._jsc.sc()

    def ids(self) -> list[str]:
        """The executors registered and not asked to go."""
        if not self.cluster:
            return ["driver"]
        listed = list(self._jvm.ids(self._sc()))
        self._killed &= set(listed)  # gone for good: forget them
        return [i for i in listed if i not in self._killed]

    def task_slots(self) -> int:
        """Tasks that can run at once on the executors registered now: Spark's own count, the one
        its barrier scheduling checks (local[N]'s N; each executor's cores over spark.task.cpus)."""
        sc = self._sc()
        return sc.maxNumConcurrentTasks(sc.resourceProfileManager().defaultResourceProfile())

    def running(self) -> int:
        """Executors running now (1 in local mode: the driver's own)."""
        return len(self.ids())

    def scale_to(self, total: int) -> ScaleAnswer:
        """Ask for `total` executors; applied in the background. More: requested from the cluster
        manager. Fewer: the newest are killed between two micro-batches."""
        if total < 0:
            raise ValueError("an executor total cannot be negative")
        if not self.live:
            return ScaleAnswer(**dict(self.describe()), accepted=False, reason=self._fixed)
        self.target, self.requested_at = total, time.time()
        self._wake.set()
        return ScaleAnswer(**dict(self.describe()), accepted=True)

    def enforce(self, running: int, settle: float = 5.0) -> None:
        """Keep the asked total, given the executors `running` now: a cluster manager may start
        more executors than asked before the first request arrives (standalone offers all its
        cores at registration)."""
        if not self.live or self.target is None or time.time() - (self.requested_at or 0) < settle:
            return
        if running > self.target:
            self._wake.set()

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    def _apply_loop(self) -> None:
        while not self._closed:
            self._wake.wait()
            self._wake.clear()
            if self._closed or self.target is None:
                continue
            try:
                self.error = self._apply(self.target)
            except Exception as e:  # py4j errors while the context stops; the next request retries
                self.error = str(e).splitlines()[0]
                log.warning("applying %s executors failed: %s", self.target, self.error)

    def _apply(self, total: int) -> str | None:
        ids = sorted(self.ids(), key=lambda i: (len(i), i))
        extra = ids[total:]
        ok = True
        if extra:
            with self.batch_lock:  # between batches: no task runs on an executor we remove
                ok = bool(self._jvm.kill(self._sc(), ",".join(extra)))
                self._killed.update(extra)
        # After the kill, which lowers Spark's target by as many: the total asked is what counts.
        ok = bool(self._jvm.requestTotal(self._sc(), total)) and ok
        self.applied = total
        log.info("executors: %d running, %d requested%s", len(ids), total,
                 f" (removing {', '.join(extra)})" if extra else "")
        return None if ok else f"the cluster manager did not take a total of {total}"

    def describe(self) -> Executors:
        return Executors(live=self.live, running=self.running(), target=self.target, applied=self.applied,
                         requestedAt=self.requested_at, error=self.error)
