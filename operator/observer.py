"""Observe a ModelServing's world: its driver pod, its job's HTTP endpoint, its topics.

Reads only; what it means is decided by status.compute.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import aiohttp

from scorestream.config import read_properties_text
from scorestream.operator import topics
from scorestream.operator.desired import CONFIG_HASH_ANNOTATION, Names
from scorestream.operator.kube import Kube
from scorestream.operator.spec import ModelServingSpec
from scorestream.operator.status import DriverState, JobReport


async def driver_state(kube: Kube, names: Names) -> DriverState:
    pod = await kube.get("v1", "Pod", names.namespace, names.driver_pod)
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


async def job_report(endpoint: str, timeout: float = 3.0) -> JobReport:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(f"{endpoint}/readyz") as r:
                ready = await r.json()
            async with session.get(f"{endpoint}/stats") as r:
                stats = await r.json()
            async with session.get(f"{endpoint}/models") as r:
                models = await r.json() if r.status == 200 else {}  # older jobs: no rejections known
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        return JobReport()
    totals = stats.get("totals", {})
    serving, candidates = {}, {}
    for dt, info in stats.get("dataTypes", {}).items():
        serving[dt] = {"name": info["name"], "version": info["version"], "since": info.get("since"), **_figures(info)}
        c = info.get("candidate")
        if c:
            comparison = c.get("comparison") or {}
            candidates[dt] = {"name": c["name"], "version": c["version"], "since": c.get("since"),
                              "strategy": c.get("strategy"), "percent": c.get("percent"), **_figures(c),
                              "agreement": comparison.get("agreement"), "meanAbsDiff": comparison.get("meanAbsDiff")}
    return JobReport(reachable=True, ready=bool(ready.get("ready")), ready_reason=ready.get("reason") or "",
                     serving=serving, candidates=candidates, lag=totals.get("lag"),
                     executors=totals.get("executors"), rejected=list(models.get("rejected", [])),
                     executor_target=totals.get("executorTarget"), live_scaling=totals.get("liveScaling"),
                     input_rate=totals.get("inputRate"), per_executor_rate=totals.get("processingRatePerExecutor"))


async def scale_executors(endpoint: str, total: int, timeout: float = 30.0) -> dict[str, Any]:
    """Ask the job for `total` executors (it records the total and applies it in the background)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        async with session.post(f"{endpoint}/executors", json={"total": total}) as r:
            answer = await r.json()
            if r.status not in (202, 409):
                raise RuntimeError(f"the job refused {total} executors: HTTP {r.status} {answer}")
            return answer


def _figures(info: dict[str, Any]) -> dict[str, Any]:
    """A version's figures from the job's ModelServingInfo: records scored, failed, mean time."""
    return {"records": info.get("invocations", 0), "errors": info.get("errors", 0),
            "meanMs": (info.get("duration") or {}).get("meanMs")}


async def kafka_client_properties(kube: Kube, namespace: str, spec: ModelServingSpec) -> dict[str, str]:
    """The Kafka settings the operator's own admin client needs, secret ones from the Secret."""
    props = dict(spec.kafka.properties)
    ref = spec.kafka.secret_ref
    if ref:
        secret = await kube.get("v1", "Secret", namespace, ref.name)
        if secret is None or ref.key not in (secret.get("data") or {}):
            raise LookupError(f"Secret {namespace}/{ref.name} has no key {ref.key!r}")
        props.update(read_properties_text(base64.b64decode(secret["data"][ref.key]).decode()))
    return props


class TopicsChecks:
    """The last complete topic check per Kafka spec. An admin client costs a broker connection
    and a metadata round trip; with every resource observed every few seconds that load lands on
    the brokers for no news. A complete check (data topic there, nothing to create, no error) is
    reused for `ttl` seconds; anything else is checked again at once."""

    def __init__(self, ttl: float):
        self.ttl, self._done = ttl, {}

    async def check(self, spec: ModelServingSpec, props: dict[str, str]) -> topics.TopicsReport:
        key = (spec.kafka.model_dump_json(), tuple(sorted(props.items())))
        done = self._done.get(key)
        if done is not None and time.monotonic() - done[0] < self.ttl:
            return topics.TopicsReport(data_topic_exists=True, data_partitions=done[1])
        report = await asyncio.to_thread(topics.ensure_topics, spec.kafka, props)
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
