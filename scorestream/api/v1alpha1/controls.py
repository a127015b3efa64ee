"""The values of the control annotations (naming.ROLLBACK_ANNOTATION and its siblings), written by
`kubectl scorestream` and read by the operator: one definition for both sides."""

from __future__ import annotations

from scorestream.api.v1alpha1.modelserving import ModelHistoryEntry


def rollback_value(version: str, request_id: str) -> str:
    """The rollback-to annotation's value: the version, and a request id making it a new request."""
    return f"{version}@{request_id}"


def rollback_version(value: str, history: list[ModelHistoryEntry]) -> str:
    """The version a rollback-to value names: the whole value if a version in the history has
    that name (a version may contain '@'), else what comes before its last '@'."""
    if any(e.version == value for e in history):
        return value
    return value.rpartition("@")[0] or value
