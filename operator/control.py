"""The job's control token: a Secret the operator makes once per resource and reads to scale.

The token is random, so it is not desired state (a rendering would make a new one each reconcile):
it is created if missing and never rewritten. It is mounted into the driver (the job requires it
on POST /executors) and read here; it appears in no ConfigMap, status, Event or log line.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from typing import Any

from scorestream.naming import Names
from scorestream.operator.desired import CONTROL_TOKEN_KEY, control_secret
from scorestream.operator.kube import Kube


async def ensure_secret(kube: Kube, meta: dict[str, Any]) -> bool:
    """Make the resource's control Secret if it has none; True if made now."""
    return await kube.create(control_secret(meta, secrets.token_urlsafe(32)))


async def token(kube: Kube, names: Names) -> str:
    """The control token the job requires (LookupError when the Secret is missing or unusable:
    the message names the Secret, never its content)."""
    secret = await kube.get("v1", "Secret", names.namespace, names.control_secret)
    where = f"Secret {names.namespace}/{names.control_secret}"
    if secret is None or CONTROL_TOKEN_KEY not in (secret.get("data") or {}):
        raise LookupError(f"{where} has no key {CONTROL_TOKEN_KEY!r}")
    try:
        value = base64.b64decode(secret["data"][CONTROL_TOKEN_KEY], validate=True).decode().strip()
    except (binascii.Error, UnicodeDecodeError):
        raise LookupError(f"{where} key {CONTROL_TOKEN_KEY!r} is not a token") from None
    if not value:
        raise LookupError(f"{where} key {CONTROL_TOKEN_KEY!r} is empty")
    return value
