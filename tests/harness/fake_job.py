"""A stand-in for the job's HTTP endpoint, with state the test sets. It answers through the same
models the runtime serves and the operator reads (scorestream.api.job_http), so a field renamed
on one side fails here too."""

from __future__ import annotations

import base64
import contextlib
import hmac
import inspect
import secrets
from collections.abc import AsyncIterator

import pytest_asyncio
from aiohttp import web
from pydantic import BaseModel, ValidationError

from scorestream.api import job_http as h


def _json(answer: BaseModel, status: int = 200) -> web.Response:
    return web.json_response(answer.model_dump(mode="json"), status=status)


def model_info(data_type: str, name: str, version: str, since: float) -> h.ModelInfo:
    return h.ModelInfo(name=name, version=version, description="", dataType=data_type, format="pmml",
                       inputs=["alcohol"], file=f"{name}-{version}.pmml", digest="0" * 64, since=since)


def serving_figures(m: h.ModelInfo) -> h.ServingFigures:
    """A model that has scored nothing yet."""
    return h.ServingFigures(name=m.name, version=m.version, description=m.description, since=m.since,
                            invocations=0, errors=0, format=m.format, previous=[],
                            duration=h.Duration(totalMs=0.0, minMs=None, maxMs=None, meanMs=None))


class FakeJob:
    """The job's /readyz, /stats, /models and POST /executors."""

    def __init__(self):
        # The job requires the control token on POST /executors, as the runtime does: by default
        # the one in the resource's Secret that the operator made (`token_source`, set by the
        # fixture where a test has the API server), else `token`.
        self.token: str | None = secrets.token_urlsafe(16)
        self.token_source = None
        self.refused = 0
        self.ready, self.executors, self.lag = True, 2, 0
        self.serving = {"wine": model_info("wine", "wine-tree", "1", 1.7e9)}
        self.rejected: list[h.Rejection] = []
        self.target, self.live, self.asked = 2, True, []
        self.polled = 0  # readiness asked

    async def readyz(self, _):
        self.polled += 1
        return _json(h.Readiness(ready=self.ready, reason="serving" if self.ready else "restoring models"),
                     200 if self.ready else 503)

    async def models(self, _):
        return _json(h.Models(serving=self.serving, candidates={}, rejected=self.rejected))

    async def stats(self, _):
        totals = h.Totals(recordsIn=0, recordsOut=0, recordsDeadLettered=0, batches=0, lag=self.lag,
                          executors=self.executors, executorTarget=self.target, liveScaling=self.live,
                          queryId=None, inputRate=None, processingRatePerExecutor=None, batchSeconds=None,
                          executorsUsedLastBatch=None, modelSwitches=0, lastBatchAt=None)
        return _json(h.Stats(dataTypes={dt: serving_figures(m) for dt, m in self.serving.items()}, totals=totals))

    async def scale(self, request):
        want = self.token_source() if self.token_source else self.token
        if inspect.isawaitable(want):  # read off the event loop (the benchmark's thousand doubles)
            want = await want
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if want is None or scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), want.encode()):
            self.refused += 1
            return _json(h.Failure(error="a bearer token is required"), 401)
        try:
            total = h.ScaleRequest.model_validate_json(await request.read()).total
        except ValidationError as e:
            return _json(h.Failure(error=h.explain(e)), 400)
        self.asked.append(total)
        self.target = total
        return _json(h.ScaleAnswer(live=True, running=self.executors, target=total, applied=None, requestedAt=None,
                                   error=None, accepted=True), 202)


@contextlib.asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[str]:
    """`app` on a free local port: its URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    finally:
        await runner.cleanup()


def secret_token(api, resource: str = "wine") -> str | None:
    """The control token in the Secret the operator made for `resource` in the test's namespace."""
    from harness.operator import obj

    secret = obj(api, "v1/secrets", f"{resource}-control")
    return base64.b64decode(secret["data"]["token"]).decode() if secret else None


def application(fake: FakeJob) -> web.Application:
    """The job's endpoint, answered by `fake`."""
    app = web.Application()
    app.router.add_get("/readyz", fake.readyz)
    app.router.add_get("/stats", fake.stats)
    app.router.add_get("/models", fake.models)
    app.router.add_post("/executors", fake.scale)
    return app


@pytest_asyncio.fixture
async def job(request):
    fake = FakeJob()
    if "api" in request.fixturenames:  # against the API server: the operator's own Secret
        api = request.getfixturevalue("api")
        fake.token_source = lambda: secret_token(api)
    async with served(application(fake)) as fake.url:
        yield fake
