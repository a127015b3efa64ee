"""Observe a ModelServing's world: its driver pod, its job's HTTP endpoint, its topics.

Reads only; what it means is decided by status.compute.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import functools
import time
from typing import Any, AsyncIterator, TypeVar

import aiohttp
from pydantic import BaseModel, ValidationError

from scorestream.api import job_http
from scorestream.api.v1alpha1.modelserving import ModelServingSpec, operator_client_refusals
from scorestream.config import read_properties_text
from scorestream.naming import CONFIG_HASH_ANNOTATION, Names
from scorestream.operator import kafkabound, strimzi, topics
from scorestream.operator.kube import Kube
from scorestream.operator.status import DriverState, JobReport, Running

A = TypeVar("A", bound=BaseModel)


def driver_state(pod: dict[str, Any] | None) -> DriverState:
    """The driver pod (as the watch cache holds it) as status reads it."""
    if pod is None:
        return DriverState()
    statuses = pod.get("status", {}).get("containerStatuses") or []
    main = next((c for c in statuses if c.get("name") == "driver"), statuses[0] if statuses else {})
    waiting = (main.get("state") or {}).get("waiting") or {}
    terminated = (main.get("lastState") or {}).get("terminated") or {}
    last = None
    if terminated:
        last = f"{terminated.get('reason', 'Terminated')}: {terminated.get('message', '').strip()[:500]}" \
               f" (exit code {terminated.get('exitCode')})"
    return DriverState(exists=True, ready=bool(main.get("ready")), restarts=int(main.get("restartCount", 0)),
                       waiting_reason=waiting.get("reason"), last_termination=last,
                       terminating=bool(pod.get("metadata", {}).get("deletionTimestamp")),
                       config_hash=(pod.get("metadata", {}).get("annotations") or {}).get(CONFIG_HASH_ANNOTATION))


class JobAnswerError(RuntimeError):
    """The job answered outside its contract (scorestream.api.job_http): what and where."""


async def _body(r: aiohttp.ClientResponse, method: str, path: str) -> bytes:
    """The answer's body, read as it streams in and refused once it exceeds job_http.MAX_ANSWER_BYTES:
    the operator is shared, and whatever answers on a job's port is a tenant's."""
    limit = job_http.MAX_ANSWER_BYTES
    if r.headers.get("Content-Encoding", "identity").lower() != "identity":
        # Not decompressed (auto_decompress is off): a small gzip can unpack to any size.
        raise JobAnswerError(f"{method} {path} answered with a Content-Encoding; the contract has none")
    if r.content_length is not None and r.content_length > limit:
        raise JobAnswerError(f"{method} {path} announced {r.content_length} bytes; at most {limit} are read")
    body = bytearray()
    while chunk := await r.content.read(64 * 1024):
        body += chunk
        if len(body) > limit:
            raise JobAnswerError(f"{method} {path} answered more than {limit} bytes")
    return bytes(body)


async def _answer(session: aiohttp.ClientSession, method: str, endpoint: str, path: str, model: type[A],
                  ok: tuple[int, ...], **request: Any) -> A:
    """One answer of the job, parsed through its model; anything else is a JobAnswerError."""
    async with session.request(method, f"{endpoint}{path}", **request) as r:
        body = await _body(r, method, path)
        if r.status not in ok:
            try:
                why = job_http.Failure.model_validate_json(body).error[:200]
            except ValidationError:
                why = "an answer outside the contract"
            raise JobAnswerError(f"{method} {path} answered HTTP {r.status}: {why}")
    try:
        return model.model_validate_json(body)
    except ValidationError as e:
        raise JobAnswerError(f"{method} {path} answered outside the contract: {job_http.explain(e)}") from None


# A poll's answers share a connection; none is kept from one poll to the next (the job's server
# closes an idle one after its read timeout anyway), so a thousand jobs cost no idle sockets.
KEEPALIVE_SECONDS = 2.0


def job_session() -> aiohttp.ClientSession:
    """A client for the jobs' answers: no decompression (see _body), identity asked for. The
    operator keeps one for its life (reconciler.Context.jobs), where one per poll cost a client's
    making and a connection per answer, a sixth of its CPU at rest with a thousand resources."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(keepalive_timeout=KEEPALIVE_SECONDS),
                                 auto_decompress=False, headers={"Accept-Encoding": "identity"})


@contextlib.asynccontextmanager
async def _client(session: aiohttp.ClientSession | None) -> AsyncIterator[aiohttp.ClientSession]:
    """`session`, or one for this round alone."""
    if session is not None:
        yield session
    else:
        async with job_session() as own:
            yield own


async def job_report(endpoint: str, timeout: float = 3.0, session: aiohttp.ClientSession | None = None) -> JobReport:
    """What the job says; unreachable when it does not answer, or answers outside its contract
    (then `error` says how). All three answers together take at most `timeout` seconds."""
    try:
        async with asyncio.timeout(timeout), _client(session) as session:
            ready = await _answer(session, "GET", endpoint, "/readyz", job_http.Readiness, (200, 503))
            stats = await _answer(session, "GET", endpoint, "/stats", job_http.Stats, (200,))
            models = await _answer(session, "GET", endpoint, "/models", job_http.Models, (200,))
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return JobReport()
    except JobAnswerError as e:
        return JobReport(error=str(e)[:1000])
    return job_report_from(ready, stats, models)


def job_report_from(ready: job_http.Readiness, stats: job_http.Stats, models: job_http.Models) -> JobReport:
    """The job's answers as the operator's decisions read them."""
    totals = stats.totals
    return JobReport(reachable=True, ready=ready.ready, ready_reason=ready.reason,
                     serving={dt: _running(info) for dt, info in stats.dataTypes.items()},
                     candidates={dt: _running(info.candidate) for dt, info in stats.dataTypes.items()
                                 if info.candidate is not None},
                     lag=totals.lag, executors=totals.executors, rejected=_rejections(models.rejected),
                     executor_target=totals.executorTarget, live_scaling=totals.liveScaling,
                     input_rate=totals.inputRate, per_executor_rate=totals.processingRatePerExecutor,
                     kafka_errors=[e.model_copy(update={"message": e.message[:300], "topic": e.topic[:249],
                                                        "partitions": e.partitions[:100]})
                                   for e in stats.kafkaErrors[:20]])


def _running(info: job_http.ModelFigures) -> Running:
    """A version the job runs, with its figures (records scored, failed, mean time, its predictions'
    drift from its baseline); a candidate's with its share of the records and a shadow's comparisons with the serving model."""
    trial = info if isinstance(info, job_http.CandidateFigures) else None
    shadow = trial.comparison if trial else None
    return Running(name=info.name, version=info.version, since=info.since, records=info.invocations,
                   errors=info.errors, mean_ms=info.duration.meanMs,
                   strategy=trial.strategy if trial else None, percent=trial.percent if trial else None,
                   agreement=shadow.agreement if shadow else None,
                   mean_abs_diff=shadow.meanAbsDiff if shadow else None,
                   prediction_drift=info.drift.prediction.psi if info.drift is not None else None)


async def scale_executors(endpoint: str, total: int, token: str, timeout: float = 30.0,
                          session: aiohttp.ClientSession | None = None) -> job_http.ScaleAnswer:
    """Ask the job for `total` executors (it records the total and applies it in the background);
    409: it cannot change them live. `token`: the resource's control token (operator.control)."""
    async with asyncio.timeout(timeout), _client(session) as session:
        return await _answer(session, "POST", endpoint, "/executors", job_http.ScaleAnswer, (202, 409),
                             json=job_http.ScaleRequest(total=total).model_dump(mode="json"),
                             headers={"Authorization": f"Bearer {token}"})


def _rejections(rejected: list[job_http.Rejection]) -> list[job_http.Rejection]:
    """The job's latest rejections, as many and as long as a status message takes: what the job
    says goes into the resource's conditions and history, and a job's answer is a tenant's."""
    return [job_http.Rejection(model=r.model[:300], dataType=r.dataType, reason=r.reason[:1000], at=r.at)
            for r in rejected[-50:]]


async def kafka_client_properties(kube: "Kube | SecretReads", namespace: str, spec: ModelServingSpec) -> dict[str, str]:
    """The Kafka settings the operator's own admin client needs, secret ones from the Secret."""
    props = dict(spec.kafka.properties)
    ref = spec.kafka.secret_ref
    if ref:
        secret = await kube.get("v1", "Secret", namespace, ref.name)
        if secret is None or ref.key not in (secret.get("data") or {}):
            raise LookupError(f"Secret {namespace}/{ref.name} has no key {ref.key!r}")
        try:
            secret_props = read_properties_text(base64.b64decode(secret["data"][ref.key]).decode())
        except UnicodeDecodeError:
            raise LookupError(f"Secret {namespace}/{ref.name} key {ref.key!r} is not UTF-8 text") from None
        except ValueError as e:  # a malformed line, named by number: its text may be a password
            raise LookupError(f"Secret {namespace}/{ref.name} key {ref.key!r}: {e}") from None
        # The Secret is a tenant's too: nothing in it may make the operator load code or call out.
        refused = operator_client_refusals(secret_props)
        if refused:
            raise LookupError(f"Secret {namespace}/{ref.name} key {ref.key!r}: {'; '.join(refused)}")
        props.update(secret_props)
    props.update(await strimzi_client_properties(kube, namespace, spec))
    return props


async def strimzi_client_properties(kube: "Kube | SecretReads", namespace: str,
                                    spec: ModelServingSpec) -> dict[str, str]:
    """librdkafka's settings for the Secrets spec.kafka.tls and spec.kafka.authentication name
    (strimzi.CredentialsError where one or a key is missing)."""
    secrets = {name: await kube.get("v1", "Secret", namespace, name) for name in strimzi.secrets_named(spec.kafka)}
    credentials = strimzi.operator_credentials(spec.kafka, namespace, secrets)
    return {} if credentials is None else credentials.librdkafka()


class SecretReads:
    """The Secrets a resource's Kafka settings name, read by name (the operator may not list or
    watch Secrets: a tenant's namespace holds others) and kept for `ttl` seconds, so a resource at
    rest does not read its Secrets at every look. A Kafka call that fails, or a Secret or key found
    missing or unusable, forgets its namespace's, so a rotated or mended credential is read again
    at the next look. At most `entries` are kept, none over
    `max_bytes`: the operator is shared, and a tenant names the Secrets."""

    def __init__(self, kube: Kube, ttl: float, entries: int = 4096, max_bytes: int = 256 * 1024):
        self.kube, self.ttl, self.entries, self.max_bytes = kube, ttl, entries, max_bytes
        self._held: collections.OrderedDict[tuple[str, str], tuple[float, dict[str, Any] | None]] = \
            collections.OrderedDict()

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if (api_version, kind) != ("v1", "Secret"):
            raise ValueError(f"SecretReads reads Secrets, not {api_version} {kind}")
        at = (namespace, name)
        held = self._held.get(at)
        if held is not None and time.monotonic() - held[0] < self.ttl:
            self._held.move_to_end(at)
            return held[1]
        secret = await self.kube.get(api_version, kind, namespace, name)
        size = sum(len(v) for v in ((secret or {}).get("data") or {}).values())
        # A missing Secret is not kept: made later, it is read at the next look.
        if secret is not None and size <= self.max_bytes:
            self._held[at] = (time.monotonic(), secret)
            self._held.move_to_end(at)
            while len(self._held) > self.entries:
                self._held.popitem(last=False)
        return secret

    def forget(self, namespace: str) -> None:
        for at in [at for at in self._held if at[0] == namespace]:
            del self._held[at]


class TopicsChecks:
    """The last complete topic check per Kafka spec. An admin client costs a broker connection
    and a metadata round trip; with every resource observed every few seconds that load lands on
    the brokers for no news. A complete check (data topic there, nothing to create, no error) is
    reused for `ttl` seconds; anything else is checked again at once."""

    def __init__(self, ttl: float):
        self.ttl, self._done = ttl, {}

    async def check(self, spec: ModelServingSpec, props: dict[str, str],
                    models: "topics.Route | None", deadline: kafkabound.Deadline) -> topics.TopicsReport:
        key = (spec.kafka.model_dump_json(), tuple(sorted(props.items())),
               models and (models.topic, models.bootstrap_servers, tuple(sorted(models.properties.items()))))
        done = self._done.get(key)
        if done is not None and time.monotonic() - done[0] < self.ttl:
            return topics.TopicsReport(data_topic_exists=True, data_partitions=done[1])
        # With spec.kafka.strimziTopics, Strimzi's Topic Operator makes the others (KafkaTopics).
        check = (topics.check_data_topic if spec.kafka.strimzi_topics
                 else functools.partial(topics.ensure_topics, models=models))
        try:
            report = await kafkabound.call(deadline, "the topic check", check, spec.kafka, props)
        except kafkabound.KafkaUnreachable:
            report = topics.TopicsReport(error=topics.no_answer(spec.kafka, deadline.seconds), unreachable=True)
        if report.data_topic_exists and not report.error:
            self._done[key] = (time.monotonic(), report.data_partitions)
        else:
            self._done.pop(key, None)
        return report


def endpoint_of(names: Names, template: str | None) -> str:
    """The job's HTTP endpoint: the driver pod's DNS name, or a template (tests, port-forwards)."""
    if template:
        return template.format(name=names.name, namespace=names.namespace)
    return names.endpoint


def summary(obj: dict[str, Any]) -> str:
    return f"{obj['kind']} {obj['metadata']['name']}"
