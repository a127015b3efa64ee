"""The operator's own Kafka clients (topic checks, model publishing) log through Python logging.

Without a `logger`, librdkafka writes every event to stderr as raw `%3|1700000000.123|FAIL|...`
lines: with a broker unreachable, a line per reconnect attempt per client, which buried the
operator's own log. Here each client gets `LOGGER` in its configuration: its messages arrive as
records (args: facility, client name, message), at WARNING at most (a broker the operator cannot
reach is said in the resource's status; the log only adds detail), and a message repeated within
`WINDOW` seconds is dropped, then summarised by its next occurrence.
"""

from __future__ import annotations

import logging
import re
import threading
import time

WINDOW = 60.0
LOGGER = logging.getLogger("scorestream.operator.kafka")


class Deduplicated(logging.Filter):
    """One record per distinct message per window; the next one after it says how many were dropped."""

    def __init__(self, window: float = WINDOW, clock=time.monotonic):
        super().__init__()
        self.window, self.clock = window, clock
        self.seen: dict[tuple, tuple[float, int]] = {}  # key -> (first passed at, dropped since)
        self.lock = threading.Lock()  # librdkafka's records arrive on the threads that poll its clients

    @staticmethod
    def key(record: logging.LogRecord) -> tuple:
        args = record.args if isinstance(record.args, tuple) else ()
        # (facility, client name, message): the client's name (rdkafka#producer-7) and the figures
        # (ms in a state, counts) change between repeats of the same event.
        fac, text = (args[0], args[2]) if len(args) == 3 else ("", record.getMessage())
        return fac, re.sub(r"\d+", "#", str(text))

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        key, now = self.key(record), self.clock()
        with self.lock:
            if len(self.seen) > 1000:  # bounded: drop what has not been seen for a window
                self.seen = {k: v for k, v in self.seen.items() if now - v[0] < self.window}
            first, dropped = self.seen.get(key, (None, 0))
            if first is not None and now - first < self.window:
                self.seen[key] = (first, dropped + 1)
                return False
            self.seen[key] = (now, 0)
        if dropped:
            record.msg = f"{record.msg} (and {dropped} more like it in the last {self.window:.0f} s)"
        return True


def _configure() -> logging.Logger:
    LOGGER.setLevel(logging.WARNING)
    if not any(isinstance(f, Deduplicated) for f in LOGGER.filters):
        LOGGER.addFilter(Deduplicated())
    return LOGGER


def client_config(config: dict) -> dict:
    """`config` for a confluent-kafka client, with its log routed to `LOGGER`."""
    return {**config, "logger": _configure()}
