"""Getting a model's bytes from where its descriptor says they are, as untrusted input.

Whoever can write to the models topic chooses the location, so a location is held to the job's
`ArtifactPolicy`: allowed schemes, files only under the model directories, bounded bytes and
total time, archives bounded in members and unpacked bytes with no path leaving the target.
Every failure is an `ArtifactError` whose message names the location without its credentials
(user:password@) or signature (query string), and never quotes what was read.
"""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import ipaddress
import lzma
import os
import shutil
import socket
import stat
import struct
import tarfile
import threading
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass, field
from http import HTTPStatus
from http import client as http_client
from pathlib import Path, PurePosixPath
from typing import Callable, TypeVar

from scorestream.config import ArtifactPolicy

# No single read waits longer than this, within the fetch's total time.
_READ_TIMEOUT = 30.0
_CHUNK = 1 << 16
_MAX_LOCATION = 8192

T = TypeVar("T")


class ArtifactError(RuntimeError):
    """The artifact cannot be had or must not be used; the message is safe to show anywhere."""


def content(data: bytes | None, location: str | None, policy: ArtifactPolicy) -> bytes | Path:
    """A descriptor's model: its inline bytes within the inline limit, or what its location holds."""
    if data is not None:
        if len(data) > policy.max_inline_bytes:
            raise ArtifactError(f"inline model of {len(data)} bytes exceeds maxInlineBytes {policy.max_inline_bytes}")
        return data
    if not location:
        raise ArtifactError("descriptor has neither data nor location")
    return fetch(location, policy)


def fetch(location: str, policy: ArtifactPolicy) -> bytes | Path:
    """The artifact's bytes, or a checked local folder (a SavedModel on a mounted volume)."""
    shown = redact(location)
    try:
        return _scrubbed(location, lambda: _fetch(location, policy))
    except ArtifactError:
        raise
    except Exception as e:  # anything at all: a bad location is the model's problem, not the job's
        raise ArtifactError(_scrub(f"{shown}: {type(e).__name__}", location)) from None


def _fetch(location: str, policy: ArtifactPolicy) -> bytes | Path:
    if len(location) > _MAX_LOCATION:
        raise ArtifactError(f"location longer than {_MAX_LOCATION} characters")
    shown = redact(location)
    try:
        url = urllib.parse.urlsplit(location)
        url.port  # noqa: B018 - parses the port: a malformed one is a ValueError here, not mid-fetch
    except ValueError:
        raise ArtifactError(f"{shown}: not a valid URL") from None
    scheme = url.scheme.lower()
    if scheme == "" and not location.startswith("/"):
        raise ArtifactError(f"{shown}: a path must be absolute (or use a URL)")
    if (scheme or "file") not in policy.schemes:
        raise ArtifactError(f"{shown}: scheme {scheme or 'file'!r} is not allowed (allowed: {', '.join(policy.schemes)})")
    if scheme in ("", "file"):
        if url.netloc not in ("", "localhost"):
            raise ArtifactError(f"{shown}: a file URL names no host")
        path = urllib.parse.unquote(url.path) if scheme else location
        return _within_deadline(shown, policy, lambda abort: _read_local(shown, path, policy, abort))
    return _within_deadline(shown, policy, lambda abort: _read_remote(shown, location, policy, abort))


def redact(location: str) -> str:
    """The location as it may be shown: no user:password@, no query (a presigned URL's signature),
    no fragment; an unparsable location is not shown at all."""
    try:
        url = urllib.parse.urlsplit(location)
        host = url.hostname or ""
        port = f":{url.port}" if url.port else ""
    except ValueError:
        return "<malformed location>"
    if not url.scheme:
        return url.path[:300]
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"{url.scheme}://{host}{port}{url.path}"[:300]


def _secrets(location: str) -> list[str]:
    """The parts of a location that must never be shown, longest first."""
    try:
        url = urllib.parse.urlsplit(location)
        found = [url.query, url.fragment, url.password or "", url.username or "",
                 url.netloc.rpartition("@")[0] if "@" in url.netloc else ""]
    except ValueError:
        # Unparsable: everything after the scheme may be secret.
        found = [location.partition("://")[2]]
    found += [urllib.parse.unquote(s) for s in found]
    return sorted({s for s in found if len(s) >= 3}, key=len, reverse=True)


def _scrub(text: str, location: str) -> str:
    for secret in _secrets(location):
        text = text.replace(secret, "***")
    return text


def _scrubbed(location: str, fn: Callable[[], T]) -> T:
    """Runs `fn`; an ArtifactError it raises is scrubbed of the location's secrets on the way out."""
    try:
        return fn()
    except ArtifactError as e:
        raise ArtifactError(_scrub(str(e), location)) from None


# --- total time ---------------------------------------------------------------------------------


@dataclass
class _Abort:
    """What the fetch thread opened, so that the caller can cut it off when the time is up."""

    sockets: list[socket.socket] = field(default_factory=list)
    cancelled: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def track(self, sock: socket.socket) -> None:
        with self.lock:
            if self.cancelled.is_set():
                sock.close()
                raise ArtifactError("cancelled")
            self.sockets.append(sock)

    def cancel(self) -> None:
        with self.lock:
            self.cancelled.set()
            for sock in self.sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)  # unblocks a recv in the fetch thread
                except OSError:
                    pass  # already closed by the fetch thread: nothing left to cut off


def _within_deadline(shown: str, policy: ArtifactPolicy, fn: Callable[[_Abort], T]) -> T:
    """`fn` in a thread, given at most fetchTimeoutSeconds in all. Per-read timeouts alone let a
    source that sends a byte now and then hold the driver's models follower forever."""
    abort = _Abort()
    outcome: list = []

    def run() -> None:
        try:
            outcome.append((True, fn(abort)))
        except BaseException as e:  # handed to the caller, which turns it into a rejection
            outcome.append((False, e))

    worker = threading.Thread(target=run, name="artifact-fetch", daemon=True)
    worker.start()
    worker.join(policy.fetch_timeout_seconds)
    if worker.is_alive():
        abort.cancel()
        # A socket read ends at once; a filesystem call or a credential lookup may not, and is left behind as a
        # daemon thread whose result nobody reads.
        raise ArtifactError(f"{shown}: not fetched within fetchTimeoutSeconds {policy.fetch_timeout_seconds:g}")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _read_limited(shown: str, read: Callable[[int], bytes], limit: int, abort: _Abort) -> bytes:
    """Reads to the end, refusing (not truncating) anything over `limit` bytes."""
    buf = io.BytesIO()
    while True:
        if abort.cancelled.is_set():
            raise ArtifactError(f"{shown}: cancelled")
        chunk = read(_CHUNK)
        if not chunk:
            return buf.getvalue()
        buf.write(chunk)
        if buf.tell() > limit:
            raise ArtifactError(f"{shown}: larger than maxFetchBytes {limit}")


# --- local files --------------------------------------------------------------------------------


def _allowed_root(real: str, policy: ArtifactPolicy) -> str | None:
    for d in policy.model_dirs:
        root = os.path.realpath(d)
        if real == root or real.startswith(root.rstrip("/") + "/"):
            return root
    return None


def _read_local(shown: str, path: str, policy: ArtifactPolicy, abort: _Abort) -> bytes | Path:
    # Symlinks and '..' resolved first: the resolved path is what must lie under a model dir.
    real = os.path.realpath(path)
    if _allowed_root(real, policy) is None:
        raise ArtifactError(f"{shown}: not under the job's model directories ({', '.join(policy.model_dirs)})")
    try:
        st = os.stat(real)
        if stat.S_ISDIR(st.st_mode):
            _check_folder(shown, Path(real), policy)
            return Path(real)
        if not stat.S_ISREG(st.st_mode):
            raise ArtifactError(f"{shown}: not a regular file")
        if st.st_size > policy.max_fetch_bytes:
            raise ArtifactError(f"{shown}: larger than maxFetchBytes {policy.max_fetch_bytes}")
        # O_NOFOLLOW and a second check on the open file: the path cannot be swapped for a link or
        # a device between the check above and the read.
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ArtifactError(f"{shown}: not a regular file")
            return _read_limited(shown, f.read, policy.max_fetch_bytes, abort)
    except OSError as e:
        raise ArtifactError(f"{shown}: {e.strerror or type(e).__name__}") from None


def _check_folder(shown: str, folder: Path, policy: ArtifactPolicy) -> None:
    """A SavedModel folder is read file by file later: every entry must be a regular file or a
    folder inside it (a symlink out of it would ship whatever it points at), within the limits."""
    members, total = 0, 0
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            members += 1
            if members > policy.max_members:
                raise ArtifactError(f"{shown}: more than maxMembers {policy.max_members} entries")
            entry = os.path.join(dirpath, name)
            st = os.lstat(entry)
            if stat.S_ISLNK(st.st_mode):
                raise ArtifactError(f"{shown}: holds a symbolic link ({os.path.relpath(entry, folder)})")
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise ArtifactError(f"{shown}: holds a special file ({os.path.relpath(entry, folder)})")
            total += st.st_size if stat.S_ISREG(st.st_mode) else 0
            if total > policy.max_unpacked_bytes:
                raise ArtifactError(f"{shown}: more than maxUnpackedBytes {policy.max_unpacked_bytes}")


# --- http(s) ------------------------------------------------------------------------------------


def _read_remote(shown: str, location: str, policy: ArtifactPolicy, abort: _Abort) -> bytes:
    """http(s), s3 and gs: the store's SDK says what to request and how it is signed
    (runtime/object_stores.py); this client fetches it, within every limit of an http(s) fetch."""
    from scorestream.runtime import object_stores

    def exchange(url: str, method: str, body: bytes | None, headers: dict[str, str]):
        return _exchange(redact(url), url, policy, abort, method, body, headers)

    req = object_stores.request(location, policy, exchange)
    return _read_http(shown, req.url, policy, abort, req.headers, req.explain)


def _opener(shown: str, policy: ArtifactPolicy, abort: _Abort) -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(
        _TrackedHTTPHandler(abort, shown, policy), _TrackedHTTPSHandler(abort, shown, policy),
        _Redirects(policy.max_redirects))


def _exchange(shown: str, url: str, policy: ArtifactPolicy, abort: _Abort, method: str, body: bytes | None,
              headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    """One request of a store's credential flow (a token exchange), through the guarded client:
    its status, headers and body (at most 1 MiB), whatever the status."""
    request = urllib.request.Request(url, data=body, method=method, headers={"User-Agent": "scorestream", **headers})
    limit = min(policy.max_fetch_bytes, 1 << 20)
    try:
        with _opener(shown, policy, abort).open(request, timeout=min(_READ_TIMEOUT, policy.fetch_timeout_seconds)) as r:
            return r.status, dict(r.headers.items()), _read_limited(shown, r.read, limit, abort)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers.items()), _read_limited(shown, e.read, limit, abort)
    except urllib.error.URLError as e:
        raise ArtifactError(f"{shown}: {_reason(e)}") from None
    except (OSError, http_client.HTTPException) as e:
        raise ArtifactError(f"{shown}: {getattr(e, 'strerror', None) or type(e).__name__}") from None


def _reason(e: urllib.error.URLError) -> str:
    return e.reason if isinstance(e.reason, str) else (getattr(e.reason, "strerror", None) or type(e.reason).__name__)


def _read_http(shown: str, location: str, policy: ArtifactPolicy, abort: _Abort, signed: dict[str, str] | None = None,
               explain: Callable[[bytes], str | None] | None = None) -> bytes:
    url = urllib.parse.urlsplit(location)
    headers = {"User-Agent": "scorestream", **(signed or {})}
    if url.username is not None:
        # Credentials in the URL become a Basic header; the URL requested (and any error about
        # it) no longer carries them.
        user = urllib.parse.unquote(url.username)
        password = urllib.parse.unquote(url.password or "")
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        host = url.hostname or ""
        host = f"[{host}]" if ":" in host else host
        url = url._replace(netloc=host + (f":{url.port}" if url.port else ""))
    opener = _opener(shown, policy, abort)
    request = urllib.request.Request(urllib.parse.urlunsplit(url), headers=headers)
    try:
        with opener.open(request, timeout=min(_READ_TIMEOUT, policy.fetch_timeout_seconds)) as resp:
            length = resp.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > policy.max_fetch_bytes:
                raise ArtifactError(f"{shown}: larger than maxFetchBytes {policy.max_fetch_bytes}")
            return _read_limited(shown, getattr(resp, "read1", resp.read), policy.max_fetch_bytes, abort)
    except urllib.error.HTTPError as e:
        # The standard phrase, not the server's: its text is the server's to choose.
        phrase = HTTPStatus(e.code).phrase if e.code in HTTPStatus._value2member_map_ else ""
        code = explain(_error_body(e)) if explain else None
        raise ArtifactError(f"{shown}: HTTP {e.code} {phrase}".rstrip() + (f" ({code})" if code else "")) from None
    except urllib.error.URLError as e:
        raise ArtifactError(f"{shown}: {_reason(e)}") from None
    except (OSError, http_client.HTTPException) as e:
        if abort.cancelled.is_set():
            raise ArtifactError(f"{shown}: cancelled") from None
        raise ArtifactError(f"{shown}: {getattr(e, 'strerror', None) or type(e).__name__}") from None


def _error_body(e: urllib.error.HTTPError) -> bytes:
    """The start of an error answer, for a store's error code: 4 KiB at most, never shown."""
    try:
        return e.read(4096) or b""
    except (OSError, http_client.HTTPException):
        return b""


_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


def _public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, allowed: list[str]) -> bool:
    """Whether a fetch may connect to `ip`: a global address, or one in the admin's allowed networks.
    An IPv6 address that carries an IPv4 one (mapped, NAT64, 6to4) is judged by that one too:
    64:ff9b::a9fe:a9fe is 169.254.169.254 wherever a NAT64 gateway is."""
    if any(ip in ipaddress.ip_network(n, strict=False) for n in allowed):
        return True
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour or (
            ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if any(ip in n for n in _NAT64) else None)
        if inner is not None:
            return _public(inner, allowed)
    return ip.is_global and not ip.is_multicast


def _guarded_connect(shown: str, policy: ArtifactPolicy):
    """socket.create_connection, but only to addresses `_public` allows: the host is resolved
    here and the socket connects to the very address checked (a second DNS answer cannot differ).
    urllib opens a new connection for every redirect, so every hop is checked."""

    def connect(address, timeout=socket._GLOBAL_DEFAULT_TIMEOUT, source_address=None, **_):
        host, port = address[0], address[1]
        refused, last = False, None
        for family, kind, proto, _name, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            if not _public(ipaddress.ip_address(sockaddr[0].split("%")[0]), policy.allowed_networks):
                refused = True
                continue
            sock = socket.socket(family, kind, proto)
            try:
                if timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:
                    sock.settimeout(timeout)
                if source_address:
                    sock.bind(source_address)
                sock.connect(sockaddr)
                return sock
            except OSError as e:
                sock.close()
                last = e
        if last is not None:
            raise last
        if refused:
            # Which address, or which host a redirect named, is not said: both are the fetched side's.
            raise ArtifactError(f"{shown}: refused, a destination is a loopback, private or link-local "
                                "address the cluster admin has not allowed (artifacts.allowedNetworks)")
        raise OSError(f"no address for the host of {shown}")

    return connect


def _tracked(base: type, abort: _Abort, shown: str, policy: ArtifactPolicy) -> type:
    class Tracked(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._create_connection = _guarded_connect(shown, policy)

        def connect(self) -> None:
            super().connect()
            abort.track(self.sock)

    return Tracked


class _TrackedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, abort: _Abort, shown: str, policy: ArtifactPolicy):
        super().__init__()
        self._conn = _tracked(http_client.HTTPConnection, abort, shown, policy)

    def http_open(self, req):
        return self.do_open(self._conn, req)


class _TrackedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, abort: _Abort, shown: str, policy: ArtifactPolicy):
        super().__init__()
        self._conn = _tracked(http_client.HTTPSConnection, abort, shown, policy)

    def https_open(self, req):
        return self.do_open(self._conn, req, context=self._context)


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Redirects to http and https only (urllib would follow ftp too), and only so many."""

    def __init__(self, limit: int):
        super().__init__()
        self.max_redirections = limit

    def http_error_302(self, req, fp, code, msg, headers):
        # Checked before urllib's own check, whose error quotes the whole target URL.
        newurl = headers.get("location") or headers.get("uri") or ""
        try:
            scheme = urllib.parse.urlsplit(urllib.parse.urljoin(req.full_url, newurl)).scheme.lower()
        except ValueError:
            scheme = ""
        if scheme not in ("http", "https"):
            raise ArtifactError(f"redirected to a {scheme or 'malformed'} location")
        if self.max_redirections == 0:
            raise ArtifactError("redirected, and maxRedirects is 0")
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        old_url, new_url = urllib.parse.urlsplit(req.full_url), urllib.parse.urlsplit(newurl)
        downgraded = old_url.scheme.lower() == "https" and new_url.scheme.lower() != "https"
        if new is not None and (new_url.netloc != old_url.netloc or downgraded):
            # Credentials go to the host they were written for, and only as safely as they were
            # meant to travel: a Basic or bearer token, an S3 signature and its session token. A
            # redirect to plain http, even on the same host, would send them readable to anyone on
            # the path (the fetch itself may go on: it is what the location's writer chose).
            for name in _CREDENTIAL_HEADERS:
                new.remove_header(name)
        return new


# As urllib.request.Request stores header names (str.capitalize).
_CREDENTIAL_HEADERS = ("Authorization", "X-amz-security-token")


# --- archives -----------------------------------------------------------------------------------


def unpack(data: bytes, target: Path, policy: ArtifactPolicy) -> None:
    """Extracts a zip or tar[.gz] archive into `target`, refusing path traversal, links and special
    files, and stopping as soon as the members or unpacked bytes exceed the policy (declared sizes
    are not trusted: bytes are counted as they are written)."""
    budget = _Budget(policy, len(data))
    shutil.rmtree(target, ignore_errors=True)  # the same archive again: unpacked afresh, not over itself
    target.mkdir(parents=True)
    try:
        if zipfile.is_zipfile(io.BytesIO(data)):
            _unzip(data, target, budget)
        else:
            _untar(data, target, budget)
    except ArtifactError:
        shutil.rmtree(target, ignore_errors=True)  # half an archive must not be found later
        raise
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, ValueError, RuntimeError) as e:
        shutil.rmtree(target, ignore_errors=True)
        raise ArtifactError(f"model archive does not unpack: {type(e).__name__}") from None


@dataclass
class _Budget:
    policy: ArtifactPolicy
    archive_bytes: int
    members: int = 0
    written: int = 0

    @property
    def max_bytes(self) -> int:
        return min(self.policy.max_unpacked_bytes, int(self.policy.max_compression_ratio * max(self.archive_bytes, 1)))

    def member(self) -> None:
        self.members += 1
        if self.members > self.policy.max_members:
            raise ArtifactError(f"model archive has more than maxMembers {self.policy.max_members} members")

    def too_much(self) -> ArtifactError:
        return ArtifactError(
            f"model archive unpacks to more than {self.max_bytes} bytes (maxUnpackedBytes"
            f" {self.policy.max_unpacked_bytes}, maxCompressionRatio {self.policy.max_compression_ratio:g})")

    def copy(self, src, dst) -> None:
        while chunk := src.read(_CHUNK):
            self.written += len(chunk)
            if self.written > self.max_bytes:
                raise self.too_much()
            dst.write(chunk)


def _member_path(target: Path, name: str) -> Path:
    """Where a member goes, if it stays inside `target`."""
    rel = PurePosixPath(name.replace("\\", "/"))
    if rel.is_absolute() or ".." in rel.parts or (rel.parts and ":" in rel.parts[0]):
        raise ArtifactError(f"model archive member {name[:200]!r} leaves the archive's folder")
    out = target.joinpath(*[p for p in rel.parts if p not in ("", ".")])
    if not out.resolve().is_relative_to(target.resolve()):
        raise ArtifactError(f"model archive member {name[:200]!r} leaves the archive's folder")
    return out


# Zip: what one central-directory entry may take (46 bytes fixed, a name, extra field and comment)
# before zipfile parses them all into objects; tar: the largest long name (GNU 'L'/'K') or pax
# header ('x'/'g') tarfile reads whole into memory.
_MAX_CD_ENTRY_BYTES = 1024
_MAX_TAR_HEADER_MEMBER = 64 << 10


def _check_central_directory(data: bytes, budget: _Budget) -> None:
    """The zip's declared entries and central directory size, from its end records, before zipfile
    reads the directory: a small archive can declare millions of entries (each a ZipInfo)."""
    at = data.rfind(b"PK\x05\x06", max(0, len(data) - 22 - 65535))
    if at < 0 or len(data) < at + 22:
        raise ArtifactError("model archive: no zip end record")
    entries, cd_size = struct.unpack("<10xHL6x", data[at:at + 22])
    if entries == 0xFFFF or cd_size == 0xFFFFFFFF:  # zip64: the locator just before says where
        loc = at - 20
        if loc < 0 or data[loc:loc + 4] != b"PK\x06\x07":
            raise ArtifactError("model archive: a zip64 end record without its locator")
        (end64,) = struct.unpack("<8xQ4x", data[loc:loc + 20])
        if data[end64:end64 + 4] != b"PK\x06\x06" or len(data) < end64 + 56:
            raise ArtifactError("model archive: a zip64 end record that is not there")
        entries, cd_size = struct.unpack("<32xQQ8x", data[end64:end64 + 56])
    if entries > budget.policy.max_members:
        raise ArtifactError(f"model archive has more than maxMembers {budget.policy.max_members} members")
    if cd_size > budget.policy.max_members * _MAX_CD_ENTRY_BYTES:
        raise ArtifactError(f"model archive's central directory is larger than {_MAX_CD_ENTRY_BYTES} bytes"
                            f" a member (maxMembers {budget.policy.max_members})")


def _unzip(data: bytes, target: Path, budget: _Budget) -> None:
    _check_central_directory(data, budget)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for info in z.infolist():
            budget.member()
            out = _member_path(target, info.filename)
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise ArtifactError(f"model archive member {info.filename[:200]!r} is a symbolic link")
            if info.is_dir():
                out.mkdir(parents=True, exist_ok=True)
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(out, "xb") as dst:
                budget.copy(src, dst)


def _decompressed(data: bytes) -> io.BufferedIOBase:
    """The tar stream inside gzip, bzip2 or xz (what tarfile.open detects), read as it inflates."""
    raw = io.BytesIO(data)
    if data[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw)
    if data[:3] == b"BZh":
        return bz2.BZ2File(raw)
    if data[:6] == b"\xfd7zXZ\x00":
        return lzma.LZMAFile(raw)
    return raw


def _scan_tar(data: bytes, budget: _Budget) -> None:
    """A pass over the tar's headers as the stream inflates, before tarfile reads any: tarfile reads
    a GNU long name or a pax header whole (a 306 KB gzip declaring a 300 MiB name took 2.4 GB), so
    those are bounded here, and the inflated bytes are counted against the budget as they come."""
    stream, seen = _decompressed(data), 0
    limit = budget.max_bytes + 512 * (budget.policy.max_members + 2) * 3  # data, plus headers and padding
    with stream:
        while True:
            block = stream.read(512)
            if len(block) < 512 or block == bytes(512):
                return  # the end, or a truncated archive: tarfile says which
            seen += 512
            try:
                size = tarfile.nti(block[124:136])
            except tarfile.HeaderError:
                return  # not a header tarfile takes either: it refuses the archive
            if block[156:157] in (b"L", b"K", b"x", b"g", b"X") and size > _MAX_TAR_HEADER_MEMBER:
                raise ArtifactError(f"model archive has a long name or pax header of more than "
                                    f"{_MAX_TAR_HEADER_MEMBER} bytes")
            skip = -(-size // 512) * 512
            while skip > 0:
                chunk = stream.read(min(skip, _CHUNK))
                if not chunk:
                    return
                skip -= len(chunk)
                seen += len(chunk)
                if seen > limit:
                    raise budget.too_much()


def _untar(data: bytes, target: Path, budget: _Budget) -> None:
    _scan_tar(data, budget)
    try:
        t = tarfile.open(fileobj=io.BytesIO(data))
    except tarfile.TarError:
        raise ArtifactError("model data must be a zip or tar archive of a SavedModel") from None
    with t:
        while (member := t.next()) is not None:
            budget.member()
            out = _member_path(target, member.name)
            if member.isdir():
                out.mkdir(parents=True, exist_ok=True)
            elif member.isreg():
                out.parent.mkdir(parents=True, exist_ok=True)
                src = t.extractfile(member)
                with src, open(out, "xb") as dst:
                    budget.copy(src, dst)
            else:
                raise ArtifactError(f"model archive member {member.name[:200]!r} is a link or special file")
