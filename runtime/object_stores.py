"""s3://, gs:// and bearer-token https:// locations: which request fetches them, signed how.

SDKs decide the credentials and the signature: MinIO's S3 SDK signs with SigV4, with the mounted
Secret's keys or the pod's AWS identity (its IamAwsProvider: IRSA's web identity, EKS Pod
Identity, the instance role); google-auth turns a service-account key or Google's Application
Default Credentials (GKE Workload Identity) into a token. The bytes are then
fetched by the artifacts module's own HTTP client, so a store's endpoint passes the same address
check, size and time limits as any http(s) location (docs/adr/0026-object-stores-are-fetched-by-the-
job-s-own-http-client-signed-by-the-sdks.md).

Secrets are mounted files read at every fetch: a rotated Secret (Kubernetes swaps the files of a
mounted Secret in place) signs the next fetch, without a restart. Nothing here is cached but
the workload-identity provider, which keeps its temporary credentials until they expire.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from scorestream.runtime.artifacts import ArtifactError
from scorestream.config import ArtifactPolicy, BearerAccess, GcsAccess, S3Access

# Bucket names as S3 and GCS accept them (GCS also takes '_' and dotted names up to 222).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_MAX_SECRET_FILE = 64 << 10
GCS_READ_ONLY = "https://www.googleapis.com/auth/devstorage.read_only"
AWS_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# S3's error codes that say what went wrong without saying anything the server chose: shown; any
# other code (the server's text) is not.
S3_CODES = frozenset({
    "NoSuchBucket", "NoSuchKey", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
    "InvalidToken", "TokenRefreshRequired", "PermanentRedirect", "AuthorizationHeaderMalformed",
    "InvalidBucketName", "AllAccessDisabled", "AccountProblem", "InvalidObjectState", "RequestTimeTooSkewed",
})

# A guarded HTTP exchange (artifacts' client): (url, method, body, headers) -> (status, headers, body).
Exchange = Callable[[str, str, bytes | None, dict[str, str]], tuple[int, dict[str, str], bytes]]


@dataclass(frozen=True)
class Request:
    """What the artifacts' HTTP client fetches for a location."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    # Says what an error answer's body means, in the job's words, without quoting it.
    explain: Callable[[bytes], str | None] | None = None


def request(location: str, policy: ArtifactPolicy, exchange: Exchange) -> Request:
    """The request that fetches `location` (an s3://, gs:// or http(s):// URL)."""
    url = urllib.parse.urlsplit(location)
    scheme = url.scheme.lower()
    stores = policy.stores
    if scheme in ("http", "https"):
        bearer = stores.https if stores else None
        if scheme == "https" and bearer is not None and url.username is None and _bearer_host(url, bearer):
            return Request(location, {"Authorization": f"Bearer {_secret_text(bearer.token_file, 'bearer token')}"})
        return Request(location)
    bucket, key = _bucket_and_key(url)
    if scheme == "s3":
        return _s3(bucket, key, stores.s3 if stores else None)
    return _gcs(bucket, key, stores.gcs if stores else None, exchange)


def _bearer_host(url: urllib.parse.SplitResult, bearer: BearerAccess) -> bool:
    host = (url.hostname or "").lower()
    port = url.port or 443
    return any(h.lower() == (host if port == 443 else f"{host}:{port}") or h.lower() == f"{host}:{port}"
               for h in bearer.hosts)


def _bucket_and_key(url: urllib.parse.SplitResult) -> tuple[str, str]:
    shown = f"{url.scheme}://{url.hostname or ''}{url.path}"[:300]
    if "@" in url.netloc or url.port is not None or url.query or url.fragment:
        raise ArtifactError(f"{shown}: an {url.scheme} location is {url.scheme}://bucket/key: no user, port or"
                            " query (credentials come from spec.modelStore)")
    bucket, key = url.netloc, urllib.parse.unquote(url.path.lstrip("/"))
    if not _BUCKET.match(bucket):
        raise ArtifactError(f"{shown}: not a valid bucket name")
    if not key or key.endswith("/"):
        raise ArtifactError(f"{shown}: names no object (a key after the bucket)")
    return bucket, key


def _secret_text(path: str, what: str) -> str:
    """A mounted Secret's file, read now: the current value after a rotation. Its text is never
    shown: an error names the file's role."""
    try:
        data = Path(path).read_bytes()[:_MAX_SECRET_FILE + 1]
    except OSError as e:
        raise ArtifactError(f"cannot read the {what} ({Path(path).name}): {e.strerror or type(e).__name__}") from None
    if len(data) > _MAX_SECRET_FILE:
        raise ArtifactError(f"the {what} ({Path(path).name}) is larger than {_MAX_SECRET_FILE} bytes")
    text = data.decode("utf-8", "replace").strip()
    if not text:
        raise ArtifactError(f"the {what} ({Path(path).name}) is empty")
    return text


# --- S3 -----------------------------------------------------------------------------------------


def _s3(bucket: str, key: str, access: S3Access | None) -> Request:
    region = access.region if access else "us-east-1"
    quoted = urllib.parse.quote(key, safe="/~")
    if access and access.endpoint:
        url = f"{access.endpoint.rstrip('/')}/{bucket}/{quoted}"  # path-style: what every S3-compatible store serves
    elif "." in bucket:
        url = f"https://s3.{region}.amazonaws.com/{bucket}/{quoted}"  # a dotted name breaks the TLS wildcard
    else:
        url = f"https://{bucket}.s3.{region}.amazonaws.com/{quoted}"
    credentials = _aws_credentials(access)
    if credentials is None:
        return Request(url, explain=_s3_code)
    from minio import signer, time as amz_time

    date = amz_time.utcnow()
    parts = urllib.parse.urlsplit(url)
    # What MinIO's client signs for a GET: the host, the (empty) payload's hash and the date.
    headers = {"Host": parts.netloc, "x-amz-content-sha256": _EMPTY_SHA256, "x-amz-date": amz_time.to_amz_date(date)}
    if credentials.session_token:
        headers["X-Amz-Security-Token"] = credentials.session_token
    signed = signer.sign_v4_s3(method="GET", url=parts, region=region, headers=headers, credentials=credentials,
                               content_sha256=_EMPTY_SHA256, date=date)
    return Request(url, {k: v for k, v in signed.items() if k != "Host"}, _s3_code)


_EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
_workload_provider = None
_provider_lock = threading.Lock()


def _aws_credentials(access: S3Access | None):
    """MinIO SDK credentials to sign with, or None (unsigned: a public bucket)."""
    if access is None:
        return None
    from minio.credentials import Credentials

    if access.credentials_dir:
        folder = Path(access.credentials_dir)
        key_id = _secret_text(str(folder / AWS_KEYS[0]), "S3 access key id")
        secret = _secret_text(str(folder / AWS_KEYS[1]), "S3 secret access key")
        token = _secret_text(str(folder / AWS_KEYS[2]), "S3 session token") if (folder / AWS_KEYS[2]).exists() else None
        return Credentials(key_id, secret, token)
    if access.workload_identity:
        global _workload_provider
        from minio.credentials.providers import IamAwsProvider

        # AWS's chain for a pod: IRSA's web identity token (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN,
        # exchanged at STS), EKS Pod Identity's container endpoint, then the instance role. One
        # provider for the process: it keeps the temporary credentials until they expire.
        with _provider_lock:
            if _workload_provider is None:
                _workload_provider = IamAwsProvider(region=access.region)
            try:
                return _workload_provider.retrieve()
            except Exception as e:  # the SDK's errors: what is wrong is the pod's identity, said by type
                raise ArtifactError(f"s3: workloadIdentity is set but the pod's AWS identity gave no credentials"
                                    f" ({type(e).__name__}; IRSA: the ServiceAccount's eks.amazonaws.com/role-arn"
                                    " annotation)") from None
    return None


def _s3_code(body: bytes) -> str | None:
    found = re.search(rb"<Code>([A-Za-z]{1,64})</Code>", body[:4096])
    code = found.group(1).decode() if found else None
    return code if code in S3_CODES else None


# --- Google Cloud Storage -----------------------------------------------------------------------


def _gcs(bucket: str, key: str, access: GcsAccess | None, exchange: Exchange) -> Request:
    endpoint = (access.endpoint if access and access.endpoint else "https://storage.googleapis.com").rstrip("/")
    url = f"{endpoint}/storage/v1/b/{bucket}/o/{urllib.parse.quote(key, safe='')}?alt=media"
    token = _gcs_token(access, exchange)
    # GCS's error text is the server's: the status says enough.
    return Request(url, {"Authorization": f"Bearer {token}"} if token else {})


def _gcs_token(access: GcsAccess | None, exchange: Exchange) -> str | None:
    if access is None:
        return None
    if access.service_account_file:
        from google.oauth2 import service_account

        try:
            info = json.loads(_secret_text(access.service_account_file, "GCS service-account key"))
            credentials = service_account.Credentials.from_service_account_info(info, scopes=[GCS_READ_ONLY])
        except (ValueError, KeyError, TypeError) as e:
            # The key's own text is never shown: its type is all an error says.
            raise ArtifactError(f"the GCS service-account key is not a usable key: {type(e).__name__}") from None
        # The token exchange goes to the key's token_uri through the same guarded client.
        _refresh(credentials, _GuardedTransport(exchange))
        return credentials.token
    if access.workload_identity:
        import google.auth
        import google.auth.exceptions
        import google.auth.transport.urllib3
        import urllib3

        try:
            credentials, _project = google.auth.default(scopes=[GCS_READ_ONLY])
        except google.auth.exceptions.DefaultCredentialsError:
            raise ArtifactError("gs: workloadIdentity is set but Google's Application Default Credentials found"
                                " none (GKE Workload Identity: the ServiceAccount's"
                                " iam.gke.io/gcp-service-account annotation)") from None
        # The platform's metadata server or token service: not a location anyone wrote in a message.
        _refresh(credentials, google.auth.transport.urllib3.Request(urllib3.PoolManager()))
        return credentials.token
    return None


def _refresh(credentials, transport) -> None:
    import google.auth.exceptions

    try:
        credentials.refresh(transport)
    except google.auth.exceptions.GoogleAuthError as e:
        raise ArtifactError(f"gs: no token for the job's GCS credentials ({type(e).__name__})") from None


class _GuardedTransport:
    """google-auth's transport interface over the artifacts' guarded HTTP client."""

    def __init__(self, exchange: Exchange):
        self.exchange = exchange

    def __call__(self, url, method="GET", body=None, headers=None, timeout=None, **_kwargs):
        from google.auth import transport

        data = body.encode() if isinstance(body, str) else body
        status, answer_headers, answer = self.exchange(url, method, data, dict(headers or {}))

        class Response(transport.Response):
            @property
            def status(self):
                return status

            @property
            def headers(self):
                return answer_headers

            @property
            def data(self):
                return answer

        return Response()
