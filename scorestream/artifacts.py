"""Getting a model's bytes from where its descriptor says they are."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

MAX_BYTES = 1 << 30


class ArtifactError(RuntimeError):
    """The artifact cannot be had: unreachable, missing, too large or of an unknown scheme."""


def fetch(location: str, timeout: float = 60.0) -> bytes | Path:
    """The artifact's bytes, or a local directory (a SavedModel folder on a mounted volume)."""
    url = urllib.parse.urlparse(location)
    if url.scheme in ("", "file"):
        path = Path(urllib.parse.unquote(url.path) if url.scheme else location)
        if path.is_dir():
            return path
        try:
            if path.stat().st_size > MAX_BYTES:
                raise ArtifactError(f"{location}: larger than {MAX_BYTES} bytes")
            return path.read_bytes()
        except OSError as e:
            raise ArtifactError(f"{location}: {e.strerror or e}") from None
    if url.scheme in ("http", "https"):
        try:
            with urllib.request.urlopen(location, timeout=timeout) as resp:
                data = resp.read(MAX_BYTES + 1)
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            raise ArtifactError(f"{location}: {getattr(e, 'reason', e)}") from None
        if len(data) > MAX_BYTES:
            raise ArtifactError(f"{location}: larger than {MAX_BYTES} bytes")
        return data
    try:
        import fsspec
    except ImportError:
        raise ArtifactError(f"{location}: scheme {url.scheme!r} needs fsspec (pip install fsspec s3fs/gcsfs)") from None
    try:
        with fsspec.open(location, "rb") as f:
            return f.read(MAX_BYTES)
    except Exception as e:  # fsspec backends raise their own types
        raise ArtifactError(f"{location}: {e}") from None
