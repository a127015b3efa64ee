"""A stand-in for the job's HTTP endpoint, with state the test sets. It answers through the same
models the runtime serves and the operator reads (scorestream.api.job_http), so a field renamed
on one side fails here too."""

from __future__ import annotations

import contextlib
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
        self.ready, self.executors, self.lag = True, 2, 0
        self.serving = {"wine": model_info("wine", "wine-tree", "1", 1.7e9)}
        self.rejected: list[h.Rejection] = []
        self.target, self.live, self.asked = 2, True, []

    async def readyz(self, _):
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


@pytest_asyncio.fixture
async def job():
    fake = FakeJob()
    app = web.Application()
    app.router.add_get("/readyz", fake.readyz)
    app.router.add_get("/stats", fake.stats)
    app.router.add_get("/models", fake.models)
    app.router.add_post("/executors", fake.scale)
    async with served(app) as fake.url:
        yield fake
