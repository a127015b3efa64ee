"""A live stream of wine records for tests, and waiting on a job."""

from __future__ import annotations

import threading
import time

from scorestream.tools.demo import feed


class Stream(threading.Thread):
    """Produces wine records in small chunks at a steady pace, like a live source."""

    def __init__(self, s, total: int, chunk: int = 100, pause: float = 0.1, start: int = 0, broken_every: int = 0):
        """``broken_every``: every so many records (from the first) is not JSON, a dead letter."""
        super().__init__(daemon=True)
        self.s, self.total, self.chunk, self.pause, self.first = s, total, chunk, pause, start
        self.broken_every = broken_every
        self.sent = 0
        self.error: Exception | None = None
        self._halt = threading.Event()

    def hurry(self) -> None:
        """Send the rest without pausing: for the part of a test where nothing depends any more on
        records still arriving, only on all of them being taken in."""
        self.pause = 0.0

    def stop(self) -> int:
        """Stop after the chunk in flight; returns how many records were sent."""
        self._halt.set()
        self.join(60)
        return self.sent

    def run(self):
        rows = feed.wine_rows()
        try:
            while self.sent < self.total and not self._halt.is_set():
                n = min(self.chunk, self.total - self.sent)
                batch = [rows[(self.first + self.sent + i) % len(rows)] for i in range(n)]
                records = feed.wine_records(batch, start=self.first + self.sent)
                if self.broken_every:
                    records = [(k, b"{broken") if (self.first + self.sent + i) % self.broken_every == 0 else (k, v)
                               for i, (k, v) in enumerate(records)]
                self.s.produce(records)
                self.sent += n
                time.sleep(self.pause)
        except Exception as e:  # surfaced by the test
            self.error = e


def wait_until(predicate, timeout=120.0, what="condition", every: float = 0.2):
    """The predicate's first true value, polled every `every` s until `timeout` (TimeoutError(what) then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(every)
    raise TimeoutError(what)


def models_by_batch(outputs: list[dict]) -> list[tuple[str, str]]:
    """The (name, version) that scored each micro-batch, in batch order; fails if any batch was
    scored by two versions (a swap takes effect at a batch boundary, never inside one)."""
    per_batch: dict[int, set] = {}
    for o in outputs:
        per_batch.setdefault(o["batchId"], set()).add((o["model"]["name"], o["model"]["version"]))
    mixed = {b: v for b, v in per_batch.items() if len(v) > 1}
    assert not mixed, f"batches scored by two versions: {mixed}"
    return [next(iter(per_batch[b])) for b in sorted(per_batch)]


def takeovers(outputs: list[dict]) -> list[tuple[str, str]]:
    """The (name, version) of each model in the order it took over, once per takeover, from the
    batches' predictions (``models_by_batch``, which fails if a batch was scored by two)."""
    order = models_by_batch(outputs)
    return [m for i, m in enumerate(order) if i == 0 or order[i - 1] != m]


def drained(consumer, idle: float = 3.0):
    """Every record the consumer's assignment holds, until none has come for `idle` seconds (a
    read_committed reader's count at a test's end); errors (end of partition) are skipped."""
    last = time.monotonic()
    while time.monotonic() - last < idle:
        batch = consumer.consume(10000, timeout=0.5)
        if batch:
            last = time.monotonic()
        yield from (m for m in batch if not m.error())
