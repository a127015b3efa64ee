"""Model messages and artifacts are untrusted input (issue #15): every abuse is a rejection whose
reason leaks no file content, credential or signature, and the models follower and job go on.

Real files, real archives and a real HTTP server on 127.0.0.1; the last test runs a real job.
"""

from __future__ import annotations

import base64
import io
import ipaddress
import json
import os
import tarfile
import threading
import time
import urllib.request
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pydantic import ValidationError

from scorestream.runtime import artifacts
from scorestream.api import descriptor as descriptors
from scorestream.config import ArtifactPolicy
from scorestream.tools.demo import feed, models

CANARY = "CANARY-7f3c-do-not-leak"
PASSWORD = "hunter2-s3cret"
SIGNATURE = "X-Amz-Signature=0badc0ffee0ddf00d"


# The tests' servers listen on loopback, which a fetch refuses unless the cluster admin allows it:
# these tests allow it explicitly, as an admin would (artifacts.allowedNetworks).
LOOPBACK_ALLOWED = {"allowedNetworks": ["127.0.0.0/8"]}


def policy(tmp_path: Path, **limits) -> ArtifactPolicy:
    return ArtifactPolicy.model_validate({"modelDirs": [str(tmp_path / "models")], **LOOPBACK_ALLOWED, **limits})


@pytest.fixture
def model_dir(tmp_path) -> Path:
    d = tmp_path / "models"
    d.mkdir()
    (d / "tree.pmml").write_bytes(b"<PMML/>")
    return d


def rejected(location: str, pol: ArtifactPolicy) -> str:
    with pytest.raises(artifacts.ArtifactError) as e:
        artifacts.fetch(location, pol)
    reason = str(e.value)
    for secret in (CANARY, PASSWORD, SIGNATURE, "0badc0ffee"):
        assert secret not in reason, reason
    return reason


# --- local files --------------------------------------------------------------------------------


def test_a_file_under_a_model_directory_is_read(tmp_path, model_dir):
    pol = policy(tmp_path)
    assert artifacts.fetch(str(model_dir / "tree.pmml"), pol) == b"<PMML/>"
    assert artifacts.fetch((model_dir / "tree.pmml").as_uri(), pol) == b"<PMML/>"


@pytest.mark.parametrize("location", [
    "file:///dev/zero", "/dev/zero", "file:///proc/self/environ", "/proc/self/environ", "/etc/passwd",
    "file:///etc/scorestream/kafka/client.properties",
])
def test_system_and_config_files_are_refused(tmp_path, model_dir, location):
    assert "not under the job's model directories" in rejected(location, policy(tmp_path))


def test_dot_dot_and_escaping_symlinks_are_refused(tmp_path, model_dir):
    secret = tmp_path / "secret.properties"
    secret.write_text(f"sasl.password={CANARY}\n")
    (model_dir / "link.pmml").symlink_to(secret)
    (model_dir / "dirlink").symlink_to(tmp_path)
    pol = policy(tmp_path)
    assert "not under" in rejected(str(model_dir / ".." / "secret.properties"), pol)
    assert "not under" in rejected(str(model_dir / "link.pmml"), pol)
    assert "not under" in rejected((model_dir / "dirlink" / "secret.properties").as_uri(), pol)


def test_a_symlink_inside_a_model_directory_is_followed(tmp_path, model_dir):
    (model_dir / "current.pmml").symlink_to(model_dir / "tree.pmml")
    assert artifacts.fetch(str(model_dir / "current.pmml"), policy(tmp_path)) == b"<PMML/>"


def test_special_files_are_refused_without_blocking(tmp_path, model_dir):
    fifo = model_dir / "pipe.pmml"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert "not a regular file" in rejected(str(fifo), policy(tmp_path))
    assert time.monotonic() - started < 5


def test_a_file_over_the_limit_is_refused_not_truncated(tmp_path, model_dir):
    (model_dir / "big.pmml").write_text(CANARY * 100)
    reason = rejected(str(model_dir / "big.pmml"), policy(tmp_path, maxFetchBytes=1000))
    assert "larger than maxFetchBytes 1000" in reason


def test_a_savedmodel_folder_with_an_escaping_symlink_is_refused(tmp_path, model_dir):
    folder = model_dir / "tf" / "1"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"pb")
    assert artifacts.fetch(str(folder), policy(tmp_path)) == folder.resolve()
    (tmp_path / "secret").write_text(CANARY)
    (folder / "variables" / "variables.index").symlink_to(tmp_path / "secret")
    assert "symbolic link" in rejected(str(folder), policy(tmp_path))


def test_a_savedmodel_folder_over_the_limits_is_refused(tmp_path, model_dir):
    folder = model_dir / "tf"
    folder.mkdir()
    for i in range(12):
        (folder / f"f{i}").write_bytes(b"x" * 100)
    assert "maxMembers 10" in rejected(str(folder), policy(tmp_path, maxMembers=10))
    assert "maxUnpackedBytes 500" in rejected(str(folder), policy(tmp_path, maxUnpackedBytes=500))


@pytest.mark.parametrize("location, why", [
    ("models/tree.pmml", "must be absolute"),
    ("ftp://127.0.0.1/tree.pmml", "scheme 'ftp' is not allowed"),
    ("data:,<PMML/>", "scheme 'data' is not allowed"),
    ("https://[::1/tree.pmml", "not a valid URL"),
    ("https://[\u2026", "not a valid URL"),
    ("http://127.0.0.1:99999/tree.pmml", "not a valid URL"),
    ("file://otherhost/models/tree.pmml", "names no host"),
    ("https://example.invalid/" + "a" * 9000, "longer than"),
])
def test_malformed_and_unlisted_locations_are_rejections(tmp_path, model_dir, location, why):
    assert why in rejected(location, policy(tmp_path))


def test_schemes_are_the_policys(tmp_path, model_dir):
    pol = policy(tmp_path, schemes=["https"])
    assert "scheme 'file' is not allowed" in rejected(str(model_dir / "tree.pmml"), pol)
    assert "scheme 'http' is not allowed" in rejected("http://127.0.0.1:1/x", pol)


def test_model_directories_cannot_be_the_system(tmp_path):
    for bad in (["/"], ["/dev"], ["/proc/self"], ["relative"]):
        with pytest.raises(ValidationError):
            ArtifactPolicy.model_validate({"modelDirs": bad})


def test_inline_models_are_bounded(tmp_path):
    pol = policy(tmp_path, maxInlineBytes=10)
    assert artifacts.content(b"<PMML/>", None, pol) == b"<PMML/>"
    with pytest.raises(artifacts.ArtifactError, match="maxInlineBytes 10"):
        artifacts.content(b"x" * 11, None, pol)


# --- http ---------------------------------------------------------------------------------------


class Server:
    """A real HTTP server on 127.0.0.1 whose routes are set by the test; it records requests."""

    def __init__(self):
        self.routes: dict[str, object] = {}
        self.requests: list[tuple[str, dict]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append((self.path, dict(self.headers)))
                route = server.routes.get(self.path.split("?")[0])
                if route is None:
                    self.send_error(404)
                elif callable(route):
                    route(self)
                else:
                    status, body, headers = route
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def http():
    s = Server()
    yield s
    s.close()


def drip(seconds: float, headers_too: bool = False):
    """A source that never stalls long enough for a per-read timeout: a byte every 0.1 s."""

    def handle(h: BaseHTTPRequestHandler):
        end = time.monotonic() + seconds
        try:
            if headers_too:
                h.wfile.write(b"HTTP/1.1 200 OK\r\n")
                while time.monotonic() < end:
                    h.wfile.write(b"X-Drip: 1\r\n")
                    h.wfile.flush()
                    time.sleep(0.1)
                return
            h.send_response(200)
            h.send_header("Content-Length", "1000000")
            h.end_headers()
            while time.monotonic() < end:
                h.wfile.write(b"x")
                h.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass  # the client hung up: what the test wants

    return handle


def test_http_fetch_within_limits(tmp_path, http):
    http.routes["/tree.pmml"] = (200, b"<PMML/>", {})
    assert artifacts.fetch(f"{http.url}/tree.pmml", policy(tmp_path)) == b"<PMML/>"


def test_http_over_the_limit_is_refused_with_or_without_a_length(tmp_path, http):
    http.routes["/big"] = (200, CANARY.encode() * 100, {})

    def unannounced(h):
        h.send_response(200)
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(CANARY.encode() * 100)

    http.routes["/unannounced"] = unannounced
    pol = policy(tmp_path, maxFetchBytes=1000)
    assert "larger than maxFetchBytes 1000" in rejected(f"{http.url}/big", pol)
    assert "larger than maxFetchBytes 1000" in rejected(f"{http.url}/unannounced", pol)


def test_a_slow_drip_source_is_cut_off_at_the_total_time(tmp_path, http):
    http.routes["/body"] = drip(30)
    http.routes["/headers"] = drip(30, headers_too=True)
    pol = policy(tmp_path, fetchTimeoutSeconds=1.5)
    for path in ("/body", "/headers"):
        started = time.monotonic()
        assert "not fetched within fetchTimeoutSeconds 1.5" in rejected(f"{http.url}{path}", pol)
        assert time.monotonic() - started < 4, path


def test_credentials_and_signatures_never_reach_a_reason(tmp_path, http):
    http.routes["/private.pmml"] = (403, f"denied: {CANARY}".encode(), {})
    location = f"http://reader:{PASSWORD}@127.0.0.1:{http.httpd.server_port}/private.pmml?{SIGNATURE}&X-Amz-Credential=AKIA"
    reason = rejected(location, policy(tmp_path))
    assert reason == f"http://127.0.0.1:{http.httpd.server_port}/private.pmml: HTTP 403 Forbidden"
    path, headers = http.requests[-1]
    assert headers["Authorization"] == "Basic " + base64.b64encode(f"reader:{PASSWORD}".encode()).decode()
    assert SIGNATURE in path, "the signature is sent, only never shown"


def test_unreachable_hosts_are_rejections_without_the_url_secrets(tmp_path):
    reason = rejected(f"https://u:{PASSWORD}@127.0.0.1:1/m.pmml?{SIGNATURE}", policy(tmp_path))
    assert reason.startswith("https://127.0.0.1:1/m.pmml: ")


def test_object_store_locations_are_rejections_without_their_secrets(tmp_path):
    """An object-store location with credentials in it is a clean rejection that shows none of them."""
    reason = rejected(f"s3://AKIA:{PASSWORD}@bucket-that-is-not/m.pmml?{SIGNATURE}", policy(tmp_path, fetchTimeoutSeconds=20))
    assert reason.startswith("s3://bucket-that-is-not/m.pmml: ")


def test_redirects_only_to_http(tmp_path, http, model_dir):
    http.routes["/to-file"] = (302, b"", {"Location": (model_dir / "tree.pmml").as_uri()})
    http.routes["/to-ftp"] = (302, b"", {"Location": "ftp://127.0.0.1/tree.pmml"})
    http.routes["/tree.pmml"] = (200, b"<PMML/>", {})
    http.routes["/to-tree"] = (301, b"", {"Location": "/tree.pmml"})
    http.routes["/loop"] = (302, b"", {"Location": "/loop"})
    pol = policy(tmp_path)
    assert "redirected to a file location" in rejected(f"{http.url}/to-file", pol)
    assert "redirected to a ftp location" in rejected(f"{http.url}/to-ftp", pol)
    assert artifacts.fetch(f"{http.url}/to-tree", pol) == b"<PMML/>"
    assert "HTTP 302" in rejected(f"{http.url}/loop", pol)


def test_non_public_destinations_are_refused_unless_the_admin_allows_them(tmp_path, http):
    """Loopback, private, link-local (cloud metadata) and the like: refused by default, on the
    address DNS answers and after every redirect; the admin's allowance admits only its networks.
    The refused addresses are never connected to (the check is before connect)."""
    http.routes["/tree.pmml"] = (200, b"<PMML/>", {})
    port = http.httpd.server_port
    # 127.0.0.2 is loopback too, and listened on by the server (bound to 127.0.0.1 only: refused
    # there anyway) — the redirect is refused before any connection is tried.
    http.routes["/elsewhere"] = (302, b"", {"Location": f"http://127.0.0.2:{port}/tree.pmml"})
    default = ArtifactPolicy.model_validate({"modelDirs": [str(tmp_path / "models")]})
    refusal = "refused, a destination is a loopback, private or link-local address the cluster admin has not allowed"
    for location in (f"{http.url}/tree.pmml", f"http://localhost:{port}/tree.pmml",  # a DNS answer
                     f"http://[::ffff:127.0.0.1]:{port}/tree.pmml", "http://169.254.169.254/latest/meta-data/",
                     "http://10.0.0.1/m.pmml", "http://[fe80::1]/m.pmml", "http://0.0.0.0/m.pmml",
                     "http://100.64.0.1/m.pmml", "http://[::1]/m.pmml"):
        assert refusal in rejected(location, default), location
    assert not http.requests
    # Addresses that carry another (NAT64, 6to4): judged by the one they carry. Checked without a
    # connection: only the decision, as the fetch makes it.
    for carried in ("64:ff9b::a9fe:a9fe", "64:ff9b:1::7f00:1", "2002:a9fe:a9fe::1", "::ffff:10.0.0.1"):
        assert not artifacts._public(ipaddress.ip_address(carried), []), carried
    assert artifacts._public(ipaddress.ip_address("64:ff9b::808:808"), [])  # 8.8.8.8 through NAT64
    only_one = policy(tmp_path, allowedNetworks=["127.0.0.1/32"])
    assert artifacts.fetch(f"{http.url}/tree.pmml", only_one) == b"<PMML/>"
    assert refusal in rejected(f"{http.url}/elsewhere", only_one)  # checked again after the redirect
    assert [p for p, _ in http.requests] == ["/tree.pmml", "/elsewhere"]
    with pytest.raises(ValueError, match="allowedNetworks"):
        ArtifactPolicy.model_validate({"allowedNetworks": ["not-a-network"]})


# --- archives -----------------------------------------------------------------------------------


def zip_of(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def tar_of(members: list[tarfile.TarInfo], data: dict[str, bytes] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for m in members:
            body = (data or {}).get(m.name)
            if body is not None:
                m.size = len(body)
            t.addfile(m, io.BytesIO(body) if body is not None else None)
    return buf.getvalue()


@pytest.fixture(scope="module")
def zip_bomb() -> bytes:
    return zip_bomb_bytes()


def zip_bomb_bytes() -> bytes:
    """The review's bomb: about 200 KB of zip unpacking to 200 MB of zeros."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        with z.open("variables/variables.data-00000-of-00001", "w", force_zip64=True) as f:
            zeros = b"\0" * (1 << 20)
            for _ in range(200):
                f.write(zeros)
        z.writestr("saved_model.pb", b"pb")
    return buf.getvalue()


def test_a_zip_bomb_is_refused_and_leaves_nothing(tmp_path, zip_bomb):
    assert len(zip_bomb) < 300_000
    target = tmp_path / "out"
    with pytest.raises(artifacts.ArtifactError, match="unpacks to more than"):
        artifacts.unpack(zip_bomb, target, ArtifactPolicy())
    assert not target.exists()
    # And on the absolute limit alone, with no ratio to hide behind.
    with pytest.raises(artifacts.ArtifactError, match="maxUnpackedBytes 1000000"):
        artifacts.unpack(zip_bomb, target, ArtifactPolicy(maxUnpackedBytes=1_000_000, maxCompressionRatio=1e9))


def long_name_bomb(mib: int) -> bytes:
    """The review's tar bomb: a gzip of a GNU long-name header declaring `mib` MiB of name (then the
    name itself, and a member), about 1 KB of gzip per MiB: small enough to arrive inline."""
    import zlib

    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    long = tarfile.TarInfo("././@LongLink")
    long.type, long.size = tarfile.GNUTYPE_LONGNAME, mib << 20
    parts = [z.compress(long.tobuf(format=tarfile.GNU_FORMAT))]
    chunk = b"a" * (1 << 20)
    parts += [z.compress(chunk) for _ in range(mib)]
    parts.append(z.compress(tarfile.TarInfo("saved_model.pb").tobuf(format=tarfile.GNU_FORMAT) + bytes(1024)))
    return b"".join(parts) + z.flush()


def zip_directory_bomb(entries: int) -> bytes:
    """A zip of `entries` empty members whose end record declares 3: the central directory zipfile
    parses whole (a ZipInfo each) before anything counts members."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for i in range(entries):
            z.writestr(f"f{i}", b"")
    data = bytearray(buf.getvalue())
    at = data.rfind(b"PK\x05\x06")
    data[at + 8:at + 12] = (3).to_bytes(2, "little") * 2  # entries on this disk, entries in total
    return bytes(data)


UNPACK = """
import json, sys
from pathlib import Path
from scorestream.runtime import artifacts
from scorestream.config import ArtifactPolicy

def peak_kib():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1])

before, error = peak_kib(), None
try:
    artifacts.unpack(Path(sys.argv[1]).read_bytes(), Path(sys.argv[2]), ArtifactPolicy.model_validate_json(sys.argv[3]))
except artifacts.ArtifactError as e:
    error = str(e)
print(json.dumps({"error": error, "before": before, "after": peak_kib()}))
"""


def unpack_apart(tmp_path: Path, data: bytes, policy: ArtifactPolicy) -> dict:
    """artifacts.unpack in a process of its own: its reason and its peak RSS (KiB)."""
    import subprocess
    import sys

    bomb = tmp_path / "bomb"
    bomb.write_bytes(data)
    out = subprocess.run([sys.executable, "-c", UNPACK, str(bomb), str(tmp_path / "out"), policy.model_dump_json(by_alias=True)],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    return json.loads(out)


def test_a_tar_long_name_bomb_is_refused_before_it_is_read(tmp_path):
    """#30 MED 4: 300 MiB of declared long name in about 300 KB took unpack from 34 to 2,439 MiB."""
    bomb = long_name_bomb(300)
    seen = unpack_apart(tmp_path, bomb, ArtifactPolicy())
    print(f"long-name bomb of {len(bomb)} bytes: peak RSS {seen['before'] // 1024} -> {seen['after'] // 1024} MiB")
    assert seen["error"] == "model archive has a long name or pax header of more than 65536 bytes"
    assert seen["after"] - seen["before"] < 64 << 10
    assert not (tmp_path / "out").exists()


def test_a_zip_central_directory_is_bounded_before_it_is_parsed(tmp_path):
    bomb = zip_directory_bomb(200_000)
    seen = unpack_apart(tmp_path, bomb, ArtifactPolicy.model_validate({"maxMembers": 100}))
    print(f"zip of 200,000 entries, {len(bomb)} bytes: peak RSS {seen['before'] // 1024} -> {seen['after'] // 1024} MiB")
    assert seen["error"] == "model archive's central directory is larger than 1024 bytes a member (maxMembers 100)"
    assert seen["after"] - seen["before"] < 32 << 10
    # The declared count, where it is the one that lies the other way.
    with pytest.raises(artifacts.ArtifactError, match="more than maxMembers 10 members"):
        artifacts.unpack(zip_of({f"f{i}": b"" for i in range(11)}), tmp_path / "out2", ArtifactPolicy(maxMembers=10))


def test_a_gzip_tar_bomb_is_refused(tmp_path):
    info = tarfile.TarInfo("variables/zeros")
    bomb = tar_of([info], {"variables/zeros": b"\0" * (50 << 20)})
    with pytest.raises(artifacts.ArtifactError, match="unpacks to more than"):
        artifacts.unpack(bomb, tmp_path / "out", ArtifactPolicy())


def test_declared_sizes_are_not_trusted(tmp_path):
    data = bytearray(zip_of({"saved_model.pb": b"\0" * 100_000}))
    # Claim 10 bytes unpacked, in the local header and the central directory alike.
    local, central = data.index(b"PK\x03\x04"), data.index(b"PK\x01\x02")
    data[local + 22:local + 26] = data[central + 24:central + 28] = (10).to_bytes(4, "little")
    with pytest.raises(artifacts.ArtifactError, match="does not unpack"):
        artifacts.unpack(bytes(data), tmp_path / "out", ArtifactPolicy())
    assert not (tmp_path / "out").exists()


def test_too_many_members_are_refused(tmp_path):
    archive = zip_of({f"assets/{i}": b"x" for i in range(20)})
    with pytest.raises(artifacts.ArtifactError, match="maxMembers 10"):
        artifacts.unpack(archive, tmp_path / "out", ArtifactPolicy(maxMembers=10))


@pytest.mark.parametrize("name", ["../evil", "/tmp/evil-abs", "a/../../evil", "..\\evil", "C:/evil"])
def test_zip_path_traversal_is_refused(tmp_path, name):
    target = tmp_path / "deep" / "out"
    with pytest.raises(artifacts.ArtifactError, match="leaves the archive's folder"):
        artifacts.unpack(zip_of({"saved_model.pb": b"pb", name: b"x"}), target, ArtifactPolicy())
    assert not (tmp_path / "evil").exists() and not (tmp_path / "deep" / "evil").exists()
    assert not Path("/tmp/evil-abs").exists()


def test_tar_traversal_links_and_devices_are_refused(tmp_path):
    dotdot = tarfile.TarInfo("../evil")
    link = tarfile.TarInfo("variables")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc"
    hard = tarfile.TarInfo("h")
    hard.type, hard.linkname = tarfile.LNKTYPE, "/etc/passwd"
    dev = tarfile.TarInfo("zero")
    dev.type, dev.devmajor, dev.devminor = tarfile.CHRTYPE, 1, 5
    assert "leaves" in _unpack_error(tar_of([dotdot], {"../evil": b"x"}), tmp_path)
    for member in (link, hard, dev):
        assert "link or special file" in _unpack_error(tar_of([member]), tmp_path)
    assert not (tmp_path / "evil").exists()


def test_zip_symlinks_are_refused(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        info = zipfile.ZipInfo("variables")
        info.external_attr = (0o120777 << 16)
        z.writestr(info, "/etc")
    assert "symbolic link" in _unpack_error(buf.getvalue(), tmp_path)


def test_not_an_archive(tmp_path):
    assert "zip or tar" in _unpack_error(f"<PMML>{CANARY}</PMML>".encode(), tmp_path)


def test_a_good_archive_unpacks_again_over_itself(tmp_path):
    archive = zip_of({"m/saved_model.pb": b"pb", "m/variables/v.index": b"i"})
    for _ in range(2):
        artifacts.unpack(archive, tmp_path / "out", ArtifactPolicy())
    assert (tmp_path / "out" / "m" / "variables" / "v.index").read_bytes() == b"i"


def _unpack_error(data: bytes, tmp_path: Path) -> str:
    with pytest.raises(artifacts.ArtifactError) as e:
        artifacts.unpack(data, tmp_path / "out", ArtifactPolicy())
    assert CANARY not in str(e.value)
    return str(e.value)


# --- model messages -----------------------------------------------------------------------------


def test_hostile_messages_are_bad_model_messages():
    deep = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    for value, headers in [
        (deep, None),
        (b'{"name": "x"}', {"content-type": None}),
        (b"\xff" * 1000, None),
        (b"[" * 100_000, None),
    ]:
        with pytest.raises(descriptors.BadModelMessage):
            descriptors.decode(value, headers)


# --- through the running job --------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.broker
def test_abuse_through_the_models_topic_is_rejected_and_the_job_keeps_serving(serving, tmp_path, http, zip_bomb):
    model_dir = tmp_path / "models"
    model_dir.mkdir()
    tree = models.tree_pmml()
    (tmp_path / "secret.properties").write_text(f"sasl.password={CANARY}\n")
    (model_dir / "escape.pmml").symlink_to(tmp_path / "secret.properties")
    http.routes["/drip"] = drip(60)
    http.routes["/private.pmml"] = (403, CANARY.encode(), {})
    port = http.httpd.server_port

    s = serving(artifacts={"modelDirs": [str(model_dir)], "fetchTimeoutSeconds": 2, **LOOPBACK_ALLOWED})
    s.publish(models.descriptor("tree", "1", "pmml", tree))
    job = s.start().wait_ready()

    def by_location(version: str, location: str) -> descriptors.ModelDescriptor:
        return descriptors.ModelDescriptor(name="evil", version=version, dataType="wine", format="pmml",
                                           location=location)

    abuses = [
        by_location("dev-zero", "file:///dev/zero"),
        by_location("environ", "/proc/self/environ"),
        by_location("symlink", str(model_dir / "escape.pmml")),
        by_location("malformed", "https://[\u2026"),
        by_location("credentials", f"http://reader:{PASSWORD}@127.0.0.1:{port}/private.pmml?{SIGNATURE}"),
        by_location("drip", f"http://127.0.0.1:{port}/drip"),
        # Cloud metadata: link-local, not allowed (refused before any connection is tried).
        by_location("metadata", "http://169.254.169.254/latest/meta-data/"),
        models.descriptor("evil", "bomb", "tensorflow", zip_bomb),
        models.descriptor("evil", "traversal", "tensorflow", zip_of({"saved_model.pb": b"pb", "../../x": b"x"})),
    ]
    for d in abuses:
        s.publish(d)
    # Messages no descriptor decoder accepts: deep JSON, and a null content-type header.
    feed.publish_raw(s.broker.bootstrap, s.topics["models"], s.key("wine"), b"[" * 200_000)
    feed.produce(s.broker.bootstrap, s.topics["models"], [(s.key("wine"), b'{"name": "x"}')],
                 headers=[("content-type", None)])

    def all_rejected():
        state = job.get("/models")
        return state if len(state["rejected"]) >= len(abuses) + 2 else None

    deadline = time.monotonic() + 120
    state = None
    while state is None and time.monotonic() < deadline:
        state = all_rejected()
        time.sleep(0.5)
    assert state is not None, (job.get("/models"), job.tail(40))
    assert state["serving"]["wine"]["name"] == "tree", state
    reasons = {r["model"]: r["reason"] for r in state["rejected"]}
    text = json.dumps(state)
    for secret in (CANARY, PASSWORD, "0badc0ffee", "reader"):
        assert secret not in text
    assert "not under the job's model directories" in reasons["evil:dev-zero"]
    assert "not under the job's model directories" in reasons["evil:environ"]
    assert "not under the job's model directories" in reasons["evil:symlink"]
    assert "not a valid URL" in reasons["evil:malformed"]
    assert "HTTP 403" in reasons["evil:credentials"]
    assert "fetchTimeoutSeconds" in reasons["evil:drip"]
    assert "refused, a destination is a loopback, private or link-local address" in reasons["evil:metadata"]
    assert "unpacks to more than" in reasons["evil:bomb"]
    assert "leaves the archive's folder" in reasons["evil:traversal"]
    assert job.ready()

    # Still serving: records after the abuse are scored by the good model.
    n = s.produce(feed.wine_records(feed.wine_rows()[:20]))
    job.wait_records(n)
    out = s.outputs(expect=n)
    assert len(out) == n and {o["model"]["name"] for o in out} == {"tree"}
    assert CANARY not in job.tail(400) and PASSWORD not in job.tail(400)
    assert job.stop() == 0


@pytest.mark.parametrize("target, kept", [
    ("https://models.example/elsewhere", True),   # the same host, as safely: the credentials go along
    ("http://models.example/m", False),            # a downgrade on the same host: they do not
    ("https://other.example/m", False),            # another host: they do not
    ("https://models.example:8443/m", False),      # another port is another origin
])
def test_credentials_follow_a_redirect_only_to_the_same_host_over_https(target, kept):
    from scorestream.runtime.artifacts import _CREDENTIAL_HEADERS, _Redirects

    request = urllib.request.Request("https://models.example/m", headers={
        "Authorization": "Bearer t0ken", "X-Amz-Security-Token": "s3ssion", "User-Agent": "scorestream"})
    new = _Redirects(5).redirect_request(request, None, 302, "Found", {}, target)
    assert all(new.has_header(h) == kept for h in _CREDENTIAL_HEADERS), new.header_items()
    assert new.has_header("User-agent")
