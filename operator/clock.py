"""The one textual form of a time in status (RFC 3339, UTC, to the second), and its reading."""

from __future__ import annotations

from datetime import UTC, datetime

FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def text(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime(FORMAT)


def now_text() -> str:
    return datetime.now(UTC).strftime(FORMAT)


def seconds(rfc3339: str) -> float:
    """Seconds since the epoch of a time status holds."""
    return datetime.strptime(rfc3339, FORMAT).replace(tzinfo=UTC).timestamp()


def from_job(since: float | str | None) -> str | None:
    """A time the job reports (seconds since the epoch, or milliseconds as the report once did) as status holds it."""
    if isinstance(since, (int, float)):
        return text(since / 1000 if since > 1e11 else since)
    return since
