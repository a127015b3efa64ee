"""s3://, gs:// and bearer-token https:// model locations against real servers of each protocol
(issue #35): moto's S3 server with its IAM authentication on, fake-gcs-server built from Go
(tests/cluster/fakegcs), and an HTTPS server that demands a token.

Every server listens on loopback, which a fetch refuses unless the cluster admin allows it: these
tests allow 127.0.0.0/8 explicitly, as an admin would (artifacts.allowedNetworks), and show the
refusal without it. Credentials are files in a folder laid out as the kubelet mounts a Secret
(`..data` swapped atomically on an update), read at each fetch.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from scorestream.api import descriptor as descriptors
from scorestream.api.verification import Sample
from scorestream.config import ArtifactPolicy
from scorestream.runtime import artifacts
from scorestream.runtime import object_stores
from scorestream.tools.demo import feed, models
from scorestream.tools.local.broker import free_port

LOOPBACK_ALLOWED = ["127.0.0.0/8"]
CANARY = "CANARY-objstore-do-not-quote"
REGION = "us-east-1"
SERVERS = Path(__file__).resolve().parent / "servers"


def tree() -> bytes:
    """What the fetch tests fetch: bytes, not parsed (the real job below parses real models)."""
    return b'<?xml version="1.0"?>\n<PMML version="4.4" xmlns="http://www.dmg.org/PMML-4_4"/>\n' * 40


def write_secret(folder: Path, values: dict[str, str]) -> None:
    """What the kubelet does to a mounted Secret: the new files in a new folder, then one rename
    of the `..data` link, so that a reader sees the old set or the new one, never half of each."""
    folder.mkdir(parents=True, exist_ok=True)
    version = folder / f"..{uuid.uuid4().hex[:8]}"
    version.mkdir()
    for k, v in values.items():
        (version / k).write_text(v)
    tmp = folder / "..data_tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(version.name)
    old = (folder / "..data").resolve() if (folder / "..data").exists() else None
    os.replace(tmp, folder / "..data")
    for k in values:
        if not (folder / k).is_symlink():
            (folder / k).symlink_to(f"..data/{k}")
    if old is not None:
        shutil.rmtree(old)


def policy(**fields) -> ArtifactPolicy:
    return ArtifactPolicy.model_validate({"allowedNetworks": LOOPBACK_ALLOWED, "fetchTimeoutSeconds": 30, **fields})


def rejected(location: str, pol: ArtifactPolicy, *secrets: str) -> str:
    with pytest.raises(artifacts.ArtifactError) as e:
        artifacts.fetch(location, pol)
    reason = str(e.value)
    for secret in (CANARY, *secrets):
        assert secret not in reason, reason
    return reason


def _wait_port(host: str, port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {host}:{port}")


# --- S3: moto's server, IAM authentication on ----------------------------------------------------


class S3Server:
    """moto's S3 and IAM on one port, in moto's own environment (tests/servers/moto_env.py). Its
    first three requests (the admin's user, policy and key) are not authenticated
    (INITIAL_NO_AUTH_ACTION_COUNT); every request after them is checked against the IAM users' keys
    and policies, so a deleted key is refused as AWS would refuse it."""

    def __init__(self, workdir: Path):
        sys.path.insert(0, str(SERVERS))
        import moto_env

        self.workdir = workdir
        try:
            moto = moto_env.ensure()
        except (OSError, subprocess.CalledProcessError) as e:
            pytest.skip(f"moto's environment could not be made: {e}")
        self.python = str(moto.parent / "python")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3", "AWS_DEFAULT_REGION": REGION}
        self.proc = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(self.port)], env=env, cwd=workdir,
                                     stdout=(workdir / "moto.log").open("wb"), stderr=subprocess.STDOUT)
        _wait_port("127.0.0.1", self.port, self.proc)
        self.admin = self._admin("setup")

    def _admin(self, command: str, *args: str) -> str:
        res = subprocess.run([self.python, str(SERVERS / "moto_admin.py"), self.endpoint, command, *args],
                             capture_output=True, text=True, cwd=self.workdir, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        return res.stdout.strip()

    def reader_key(self, user: str = "reader") -> dict[str, str]:
        """A new access key of `user`, a reader that may only get objects (IAM allows two keys a user)."""
        return json.loads(self._admin("reader-key", self.admin, user))

    def revoke(self, key: dict[str, str], user: str = "reader") -> None:
        self._admin("revoke", self.admin, user, key["AWS_ACCESS_KEY_ID"])

    def put(self, bucket: str, key: str, data: bytes) -> None:
        path = self.workdir / uuid.uuid4().hex
        path.write_bytes(data)
        self._admin("put", self.admin, bucket, key, str(path))

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = S3Server(tmp_path_factory.mktemp("moto"))
    try:
        yield server
    finally:
        server.close()


def s3_policy(s3: S3Server, credentials: Path, **fields) -> ArtifactPolicy:
    return policy(stores={"s3": {"endpoint": s3.endpoint, "region": REGION, "credentialsDir": str(credentials)}},
                  **fields)


def test_an_s3_location_is_fetched_signed_and_a_rotated_secret_signs_the_next_fetch(s3, tmp_path):
    s3.put("models", "wine/tree.pmml", tree())
    creds = tmp_path / "s3"
    first = s3.reader_key()
    write_secret(creds, first)
    pol = s3_policy(s3, creds)
    assert artifacts.fetch("s3://models/wine/tree.pmml", pol) == tree()

    # Rotation: a second key, the Secret updated (the kubelet's swap), the first key revoked on
    # the server. The next fetch reads the new files: no restart, no cache.
    second = s3.reader_key()
    write_secret(creds, second)
    s3.revoke(first)
    assert artifacts.fetch("s3://models/wine/tree.pmml", pol) == tree()

    # The revoked key is refused by the server, and the refusal names S3's code, not its text.
    stale = tmp_path / "stale"
    write_secret(stale, first)
    reason = rejected("s3://models/wine/tree.pmml", s3_policy(s3, stale), first["AWS_SECRET_ACCESS_KEY"])
    assert reason == "s3://models/wine/tree.pmml: HTTP 403 Forbidden (InvalidAccessKeyId)", reason
    # Unsigned: refused as well (moto's IAM checks every request after its setup).
    assert "HTTP 403" in rejected("s3://models/wine/tree.pmml", policy(stores={"s3": {"endpoint": s3.endpoint}}))


def test_a_wrong_bucket_or_key_is_a_clear_rejection_that_quotes_nothing(s3, tmp_path):
    s3.put("models", "secret-named.pmml", CANARY.encode())
    creds = tmp_path / "s3"
    write_secret(creds, s3.reader_key("reader-2"))
    pol = s3_policy(s3, creds)
    assert rejected("s3://no-such-models/tree.pmml", pol) == "s3://no-such-models/tree.pmml: HTTP 404 Not Found (NoSuchBucket)"
    assert rejected("s3://models/nothing.pmml", pol) == "s3://models/nothing.pmml: HTTP 404 Not Found (NoSuchKey)"
    assert "not a valid bucket name" in rejected("s3://Bad_Bucket!/m.pmml", pol)
    assert "names no object" in rejected("s3://models/", pol)
    assert "no user, port or query" in rejected("s3://AKIA:pw@models/m.pmml", pol, "pw@")
    # The artifact limits apply unchanged: a large object is refused, not truncated.
    s3.put("models", "big.pmml", CANARY.encode() * 200)
    assert rejected("s3://models/big.pmml", s3_policy(s3, creds, maxFetchBytes=1000)) == \
        "s3://models/big.pmml: larger than maxFetchBytes 1000"


def test_an_s3_endpoint_at_a_disallowed_address_is_refused(s3, tmp_path):
    """The endpoint is the Secret writer's or spec author's choice: it passes the same address check
    as an http(s) location, before any connection (and so before any signed request) is made."""
    creds = tmp_path / "s3"
    write_secret(creds, {"AWS_ACCESS_KEY_ID": "AKIANOTCONTACTED", "AWS_SECRET_ACCESS_KEY": "never-sent"})
    for allowed in ([], ["10.0.0.0/8"]):
        pol = ArtifactPolicy.model_validate({"allowedNetworks": allowed, "stores": {
            "s3": {"endpoint": s3.endpoint, "credentialsDir": str(creds)}}})
        reason = rejected("s3://models/wine/tree.pmml", pol)
        assert reason == ("s3://models/wine/tree.pmml: refused, a destination is a loopback, private or link-local"
                          " address the cluster admin has not allowed (artifacts.allowedNetworks)"), reason
    # A metadata address is refused the same way, allowance or not for loopback.
    meta = policy(stores={"s3": {"endpoint": "http://169.254.169.254"}})
    assert "refused, a destination is" in rejected("s3://models/m.pmml", meta)


# --- GCS: fake-gcs-server, a service-account key exchanged at a token server ---------------------


def reply(handler: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
    handler.send_response(status)
    for k, v in {**(headers or {}), "Content-Length": str(len(body))}.items():
        handler.send_header(k, v)
    handler.end_headers()
    handler.wfile.write(body)


class TokenServer:
    """OAuth's token endpoint for a service-account key: takes the signed JWT assertion, answers a
    token (what oauth2.googleapis.com does), and remembers who asked."""

    def __init__(self):
        self.assertions: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                from urllib.parse import parse_qs

                body = parse_qs(self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode())
                outer.assertions.append(body.get("assertion", [""])[0])
                reply(self, 200, json.dumps({"access_token": f"ya29.test-{len(outer.assertions)}", "expires_in": 3600,
                                             "token_type": "Bearer"}).encode(), {"Content-Type": "application/json"})

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/token"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class GcsServer:
    """fake-gcs-server (Go, built by `make setup` into the tests' cache), serving a data folder."""

    def __init__(self, workdir: Path, objects: dict[str, bytes]):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from harness import cluster as kube_cluster

        try:
            binary = kube_cluster.build(("fakegcs",))["fake-gcs-server"]
        except kube_cluster.BuildFailed as e:
            pytest.skip(f"fake-gcs-server could not be built: {e}")
        data = workdir / "data"
        for name, content in objects.items():
            (data / name).parent.mkdir(parents=True, exist_ok=True)
            (data / name).write_bytes(content)
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port), "-backend", "memory",
             "-data", str(data), "-public-host", f"127.0.0.1:{self.port}", "-log-level", "error"],
            stdout=(workdir / "fake-gcs.log").open("wb"), stderr=subprocess.STDOUT)
        _wait_port("127.0.0.1", self.port, self.proc)

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    server = GcsServer(tmp_path_factory.mktemp("gcs"), {"models/wine/tree.pmml": tree(),
                                                        "models/secret.pmml": CANARY.encode()})
    try:
        yield server
    finally:
        server.close()


def service_account_key(token_uri: str, tmp_path: Path) -> str:
    pem = tmp_path / "sa.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(pem), "2048"], check=True, capture_output=True)
    return json.dumps({
        "type": "service_account", "project_id": "test", "private_key_id": "k1",
        "private_key": pem.read_text(), "client_email": "reader@test.iam.gserviceaccount.com",
        "client_id": "1", "token_uri": token_uri})


def test_a_gs_location_is_fetched_with_a_token_from_the_service_account_key(gcs, tmp_path):
    tokens = TokenServer()
    try:
        creds = tmp_path / "gcs"
        write_secret(creds, {"service-account.json": service_account_key(tokens.url, tmp_path)})
        pol = policy(stores={"gcs": {"endpoint": gcs.endpoint, "serviceAccountFile": str(creds / "service-account.json")}})
        assert artifacts.fetch("gs://models/wine/tree.pmml", pol) == tree()
        assert len(tokens.assertions) == 1 and tokens.assertions[0].count(".") == 2  # a signed JWT
        assert rejected("gs://no-such-models/tree.pmml", pol) == "gs://no-such-models/tree.pmml: HTTP 404 Not Found"
        assert rejected("gs://models/nothing.pmml", pol) == "gs://models/nothing.pmml: HTTP 404 Not Found"
        # A rotated key is read at the next fetch.
        write_secret(creds, {"service-account.json": "{not json"})
        assert rejected("gs://models/wine/tree.pmml", pol) == \
            "the GCS service-account key is not a usable key: JSONDecodeError"
    finally:
        tokens.close()


def test_a_gs_emulator_or_token_uri_at_a_disallowed_address_is_refused(gcs, tmp_path):
    unallowed = ArtifactPolicy.model_validate({"stores": {"gcs": {"endpoint": gcs.endpoint}}})
    assert "refused, a destination is a loopback" in rejected("gs://models/wine/tree.pmml", unallowed)
    # The key's token_uri is the Secret writer's to choose: checked as any location is.
    creds = tmp_path / "gcs"
    write_secret(creds, {"sa.json": service_account_key("http://169.254.169.254/token", tmp_path)})
    pol = policy(stores={"gcs": {"endpoint": gcs.endpoint, "serviceAccountFile": str(creds / "sa.json")}})
    assert "refused, a destination is a loopback" in rejected("gs://models/wine/tree.pmml", pol)


# --- https with a bearer token -------------------------------------------------------------------


class BearerServer:
    """HTTPS on 127.0.0.1 (a certificate of the test's, trusted through SSL_CERT_FILE) that answers
    only requests carrying `Authorization: Bearer <token>`, the token it currently accepts."""

    def __init__(self, workdir: Path, body: bytes):
        self.token = "tok-" + uuid.uuid4().hex
        self.seen: list[str | None] = []
        outer = self
        key, cert = workdir / "tls.key", workdir / "tls.crt"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
                        "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True)
        self.cert = cert

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.startswith("/elsewhere/"):  # the same server under another host name
                    reply(self, 302, b"", {"Location": f"https://localhost:{outer.port}/{self.path.split('/', 2)[2]}"})
                    return
                auth = self.headers.get("Authorization")
                outer.seen.append(auth)
                ok = auth == f"Bearer {outer.token}"
                reply(self, 200 if ok else 401, body if ok else CANARY.encode())

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_port
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def bearer(tmp_path, monkeypatch):
    server = BearerServer(tmp_path, tree())
    monkeypatch.setenv("SSL_CERT_FILE", str(server.cert))
    try:
        yield server
    finally:
        server.close()


def test_an_https_location_gets_the_bearer_token_only_on_the_named_hosts(bearer, tmp_path):
    creds = tmp_path / "https"
    write_secret(creds, {"token": bearer.token})
    pol = policy(stores={"https": {"hosts": [f"127.0.0.1:{bearer.port}"], "tokenFile": str(creds / "token")}})
    location = f"https://127.0.0.1:{bearer.port}/models/tree.pmml"
    assert artifacts.fetch(location, pol) == tree()
    # Rotation: the server takes only the new token; the Secret is updated; the next fetch has it.
    old, bearer.token = bearer.token, "tok-" + uuid.uuid4().hex
    assert rejected(location, pol, old) == f"{location}: HTTP 401 Unauthorized"
    write_secret(creds, {"token": bearer.token})
    assert artifacts.fetch(location, pol) == tree()
    # Another host name for the same server is not a named host: no token is sent there.
    elsewhere = f"https://localhost:{bearer.port}/models/tree.pmml"
    assert rejected(elsewhere, pol, bearer.token) == f"{elsewhere}: HTTP 401 Unauthorized"
    assert bearer.seen[-1] is None
    # A redirect to another host does not take the token along.
    redirected = f"https://127.0.0.1:{bearer.port}/elsewhere/models/tree.pmml"
    assert rejected(redirected, pol, bearer.token) == f"{redirected}: HTTP 401 Unauthorized"
    assert bearer.seen[-1] is None
    # Nor over plain http, where anyone on the path could read it.
    assert object_stores.request(f"http://127.0.0.1:{bearer.port}/m", pol, exchange=None).headers == {}


# --- a real job: publish by location, serve, rotate, refuse a wrong bucket ------------------------


@pytest.mark.spark
@pytest.mark.broker
def test_a_job_serves_a_model_published_by_s3_location_across_a_key_rotation(serving, s3, tmp_path):
    rows = feed.wine_rows()
    s3.put("models", "wine/tree.pmml", models.tree_pmml(rows))
    s3.put("models", "wine/shallow.pmml", models.tree_pmml(rows, max_depth=2))
    # The verification sample is fetched from the store as well, with the same credentials.
    s3.put("models", "wine/sample.jsonl", b"\n".join(value for _key, value in feed.wine_records(rows[:10])))
    creds = tmp_path / "s3-secret"
    first = s3.reader_key("job-reader")
    write_secret(creds, first)
    s = serving(artifacts={"allowedNetworks": LOOPBACK_ALLOWED, "stores": {
        "s3": {"endpoint": s3.endpoint, "region": REGION, "credentialsDir": str(creds)}}})

    def by_location(name: str, version: str, location: str) -> descriptors.ModelDescriptor:
        return descriptors.ModelDescriptor(name=name, version=version, dataType="wine", format="pmml",
                                           location=location)

    s.publish(by_location("tree", "1", "s3://models/wine/tree.pmml"))
    job = s.start().wait_ready()
    n = s.produce(feed.wine_records(rows[:20]))
    job.wait_records(n)
    assert {(o["model"]["name"], o["model"]["version"]) for o in s.outputs(expect=n)} == {("tree", "1")}

    # The key rotates while the job runs: new key, Secret updated, old key revoked on the server.
    second = s3.reader_key("job-reader")
    write_secret(creds, second)
    s3.revoke(first, "job-reader")
    s.publish(by_location("shallow", "2", "s3://models/wine/shallow.pmml").model_copy(
        update={"verification": Sample(location="s3://models/wine/sample.jsonl")}))
    deadline = time.monotonic() + 120
    while job.get("/models")["serving"].get("wine", {}).get("name") != "shallow" and time.monotonic() < deadline:
        time.sleep(0.5)
    state = job.get("/models")
    assert state["serving"]["wine"]["name"] == "shallow", (state, job.tail(40))
    sample = [r for r in state["serving"]["wine"]["verification"]["sets"] if r["set"] == "sample"]
    assert [(r["records"], r["predicted"]) for r in sample] == [(10, 10)], state

    # A wrong bucket: rejected with S3's code, and the serving model goes on.
    s.publish(by_location("tree", "3", "s3://not-our-models/wine/tree.pmml"))
    while not state["rejected"] and time.monotonic() < deadline:
        time.sleep(0.5)
        state = job.get("/models")
    reasons = {r["model"]: r["reason"] for r in state["rejected"]}
    assert reasons["tree:3"] == "cannot fetch model: s3://not-our-models/wine/tree.pmml: HTTP 404 Not Found (NoSuchBucket)"
    assert state["serving"]["wine"]["name"] == "shallow"
    m = s.produce(feed.wine_records(rows[20:40]))
    job.wait_records(n + m)
    # The first n were scored by version 1 (above); every record since by version 2.
    assert sum(o["model"]["version"] == "2" for o in s.outputs(expect=n + m)) == m
    for secret in (first["AWS_SECRET_ACCESS_KEY"], second["AWS_SECRET_ACCESS_KEY"]):
        assert secret not in job.tail(1000) and secret not in json.dumps(state)
    assert job.stop() == 0


# --- the operator: spec.modelStore mounted into the driver only, named in the job config ---------


EXAMPLE = yaml.safe_load((Path(__file__).resolve().parent.parent / "examples" / "wine-pmml.yaml").read_text())
EXAMPLE["metadata"]["uid"] = "0f6a6c0e-6a5e-4c40-9b53-0d1c7c1a0035"
MODEL_STORE = {
    "s3": {"endpoint": "https://minio.models.svc:9000", "region": "eu-west-1", "secretRef": {"name": "store-s3"}},
    "gcs": {"secretRef": {"name": "store-gcs", "key": "service-account.json"}},
    "https": {"hosts": ["models.example.com", "models.example.com:8443"],
              "secretRef": {"name": "store-token", "key": "token"}},
}


def with_store(store: dict | None) -> dict:
    body = copy.deepcopy(EXAMPLE)
    if store is not None:
        body["spec"]["modelStore"] = store
    return body


def test_the_store_secrets_are_mounted_into_the_driver_and_named_in_the_job_config():
    from scorestream.config import parse_job_config
    from scorestream.operator import desired

    objects = {o["kind"]: o for o in desired.desired_objects(with_store(MODEL_STORE))}
    for obj in objects.values():
        kubernetes_validate.validate(obj, "1.37.0", strict=True)
    pod = objects["StatefulSet"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["store-s3"]["secret"] == {"secretName": "store-s3", "defaultMode": 0o440}  # whole: the optional session token
    assert volumes["store-gcs"]["secret"]["items"] == [{"key": "service-account.json", "path": "service-account.json"}]
    assert volumes["store-https"]["secret"]["secretName"] == "store-token"
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    for kind in ("s3", "gcs", "https"):
        # No subPath: the kubelet updates a mounted Secret's files in place only without one.
        assert mounts[f"store-{kind}"] == {"name": f"store-{kind}", "mountPath": f"/etc/scorestream/stores/{kind}",
                                           "readOnly": True}
    config = parse_job_config(json.loads(objects["ConfigMap"]["data"]["job.json"]))
    stores = config.artifacts.stores
    assert stores.s3.credentials_dir == "/etc/scorestream/stores/s3" and stores.s3.endpoint == "https://minio.models.svc:9000"
    assert stores.s3.region == "eu-west-1" and not stores.s3.workload_identity
    assert stores.gcs.service_account_file == "/etc/scorestream/stores/gcs/service-account.json"
    assert stores.https.token_file == "/etc/scorestream/stores/https/token"
    assert stores.https.hosts == ["models.example.com", "models.example.com:8443"]
    # Executors fetch nothing: their pod file has none of these volumes.
    executor = yaml.safe_load(objects["ConfigMap"]["data"]["executor-pod-template.yaml"])
    assert not any(v["name"].startswith("store-") for v in executor["spec"]["volumes"])


def test_a_sidecar_gets_none_of_the_store_secrets_and_a_template_cannot_replace_them():
    from scorestream.operator import desired

    body = with_store(MODEL_STORE)
    body["spec"]["driver"] = {"podTemplate": {"spec": {
        "containers": [{"name": "sidecar", "image": "busybox", "volumeMounts": [
            {"name": "store-s3", "mountPath": "/steal"}, {"name": "own", "mountPath": "/own"}]}],
        "volumes": [{"name": "store-s3", "secret": {"secretName": "other"}}, {"name": "own", "emptyDir": {}}]}}}
    sts = next(o for o in desired.desired_objects(body) if o["kind"] == "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "sidecar")
    assert [m["name"] for m in sidecar["volumeMounts"]] == ["own"]
    assert [v["secret"]["secretName"] for v in pod["volumes"] if v["name"] == "store-s3"] == ["store-s3"]


def test_workload_identity_mounts_nothing_and_excludes_a_secret():
    from pydantic import ValidationError

    from harness.admission import admit
    from scorestream.api.v1alpha1 import modelserving as s
    from scorestream.operator import desired

    body = with_store({"s3": {"region": "eu-west-1", "workloadIdentity": True}, "gcs": {"workloadIdentity": True}})
    assert admit(body) == []
    sts = next(o for o in desired.desired_objects(body) if o["kind"] == "StatefulSet")
    assert not any(v["name"].startswith("store-") for v in sts["spec"]["template"]["spec"]["volumes"])
    config = desired.job_config("wine", "default", s.ModelServingSpec.model_validate(body["spec"]))
    assert config.artifacts.stores.s3.workload_identity and config.artifacts.stores.s3.credentials_dir is None
    assert config.artifacts.stores.gcs.workload_identity and config.artifacts.stores.gcs.service_account_file is None
    for kind, ref in (("s3", {"name": "x"}), ("gcs", {"name": "x", "key": "k.json"})):
        both = with_store({kind: {"workloadIdentity": True, "secretRef": ref}})
        assert any("secretRef and workloadIdentity exclude each other" in e for e in admit(both)), kind
        with pytest.raises(ValidationError, match="secretRef and workloadIdentity exclude each other"):
            s.ModelServingSpec.model_validate(both["spec"])
    for bad in ({"https": {"hosts": ["https://x"], "secretRef": {"name": "t", "key": "token"}}},
                {"https": {"hosts": [], "secretRef": {"name": "t", "key": "token"}}},
                {"s3": {"endpoint": "https://user:pw@minio:9000"}}, {"s3": {"endpoint": "ftp://minio"}},
                {"s3": {"region": "EU WEST"}}):
        assert admit(with_store(bad)), bad
        with pytest.raises(ValidationError):
            s.ModelServingSpec.model_validate(with_store(bad)["spec"])


def test_no_model_store_leaves_the_job_config_and_its_hash_as_they_were():
    from scorestream.api.v1alpha1 import modelserving as s
    from scorestream.operator import desired

    spec = s.ModelServingSpec.model_validate(EXAMPLE["spec"])
    config = desired.job_config("wine", "default", spec)
    assert "stores" not in json.loads(config.to_json())["artifacts"]
    with_s3 = s.ModelServingSpec.model_validate(with_store({"s3": {"workloadIdentity": True}})["spec"])
    assert desired.spec_hash("wine", "default", with_s3) != desired.spec_hash("wine", "default", spec)


def test_the_runtime_image_installs_the_store_sdks():
    """The runtime images install the `runtime` extra (runtime/docker/requirements.py): the SDKs
    the fetchers import are in it, pinned in requirements.lock like the rest."""
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, str(root / "runtime" / "docker" / "requirements.py"),
                          str(root / "pyproject.toml"), "runtime"], capture_output=True, text=True, check=True).stdout
    lock = {line.split()[0] for line in (root / "requirements.lock").read_text().splitlines() if line and line[0] != "#"}
    for pin in ("minio==", "google-auth=="):
        (line,) = [r for r in out.splitlines() if r.startswith(pin)]
        assert line.split()[0] in lock
    import google.oauth2.service_account  # noqa: F401
    import minio.credentials.providers  # noqa: F401
    import minio.signer  # noqa: F401


def test_a_redirect_to_another_host_drops_every_credential_header():
    """An S3 session token is a credential as much as the signature is."""
    import urllib.request

    req = urllib.request.Request("https://store.example:9000/b/k", headers={
        "Authorization": "AWS4-HMAC-SHA256 Credential=...", "X-Amz-Security-Token": "session", "x-amz-date": "d"})
    handler = artifacts._Redirects(5)
    same = handler.redirect_request(req, None, 307, "", {}, "https://store.example:9000/b/k2")
    assert same.has_header("Authorization") and same.has_header("X-amz-security-token")
    other = handler.redirect_request(req, None, 307, "", {}, "https://other.example/b/k")
    assert not other.has_header("Authorization") and not other.has_header("X-amz-security-token")
    assert other.has_header("X-amz-date")
