"""What the operator reads from a job is bounded in size and time (issue #30, HIGH 1).

Whatever binds a job's port is a tenant's (a sidecar of the driver's pod template can take it
first), and the operator is shared by every tenant: an answer too large, too slow or compressed
is that resource's status condition (JobAnswerInvalid, or unreachable), and the operator's memory
stays flat. The observer runs in a process of its own, so its peak RSS is its own; the job is a
real HTTP server on loopback that streams its answer without holding it.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import sys
import time

import pytest
from aiohttp import web

from scorestream.api import job_http as h
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import observer, status

from harness.fake_job import FakeJob, served
from test_job_http import EXAMPLE

HUGE = 600 * 1024 * 1024  # the review's answer

OBSERVE = """
import asyncio, json, sys, time
from scorestream.operator import observer

def peak_kib():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1])

before = peak_kib()
t0 = time.monotonic()
report = asyncio.run(observer.job_report(sys.argv[1]))
print(json.dumps({"before": before, "after": peak_kib(), "seconds": time.monotonic() - t0,
                  "reachable": report.reachable, "error": report.error, "ready": report.ready}))
"""


async def observe(url: str) -> dict:
    """The operator's observation of `url`, in a process of its own: the report and its peak RSS."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", OBSERVE, url, stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0
    return json.loads(out)


async def _stream(request: web.Request, total: int, announce: bool, pause: float = 0.0,
                  headers: dict[str, str] | None = None, piece: int = 1024 * 1024) -> web.StreamResponse:
    """`total` bytes of a JSON-looking answer, written as they go (never held)."""
    r = web.StreamResponse(headers={"Content-Type": "application/json", **(headers or {})})
    if announce:
        r.content_length = total
    await r.prepare(request)
    chunk = b'{"ready": true, "reason": "' + b"x" * piece
    sent = 0
    try:
        while sent < total:
            piece = chunk[: min(len(chunk), total - sent)]
            await r.write(piece)
            sent += len(piece)
            if pause:
                await asyncio.sleep(pause)
    except (ConnectionResetError, asyncio.CancelledError):
        pass  # the operator stopped reading: what the test wants
    return r


@pytest.fixture
async def hostile():
    """A job's port held by something else: each path answers as the test's name says."""
    fake = FakeJob()
    bomb = gzip.compress(json.dumps({"ready": True, "reason": "x" * (64 * 1024 * 1024)}).encode(), 9)

    async def gzipped(_):
        return web.Response(body=bomb, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})

    app = web.Application()
    app.router.add_get("/fine/readyz", fake.readyz)
    app.router.add_get("/fine/stats", fake.stats)
    app.router.add_get("/fine/models", fake.models)
    def route(path, **how):
        async def handle(request):
            return await _stream(request, **how)
        app.router.add_get(path, handle)

    route("/announced/readyz", total=HUGE, announce=True)
    route("/chunked/readyz", total=HUGE, announce=False)
    route("/lying/readyz", total=HUGE, announce=False, headers={"Content-Length": "100"})
    # A drip: 1 KiB every 0.5 s stays under the byte limit and would go on for minutes.
    route("/drip/readyz", total=200 * 1024, announce=False, pause=0.5, piece=1024)
    app.router.add_get("/gzip/readyz", gzipped)
    async with served(app) as url:
        yield url


async def test_a_normal_answer_is_read(hostile):
    seen = await observe(f"{hostile}/fine")
    assert seen["reachable"] and seen["ready"] and seen["error"] is None


@pytest.mark.parametrize("how", ["chunked", "announced"])
async def test_an_oversized_answer_is_the_resources_condition_and_the_operators_memory_stays_flat(hostile, how):
    baseline = await observe(f"{hostile}/fine")
    seen = await observe(f"{hostile}/{how}")
    print(f"{how}: peak RSS {seen['after'] // 1024} MiB (a normal answer: {baseline['after'] // 1024} MiB), "
          f"{seen['seconds']:.2f} s")
    assert not seen["reachable"] and seen["error"] == {
        "chunked": f"GET /readyz answered more than {h.MAX_ANSWER_BYTES} bytes",
        "announced": f"GET /readyz announced {HUGE} bytes; at most {h.MAX_ANSWER_BYTES} are read"}[how]
    # Flat: what one capped answer costs, not 600 MiB (the review saw 54 -> 1,254 MiB).
    assert seen["after"] - baseline["after"] < 16 * 1024
    assert seen["seconds"] < 3.5


async def test_a_content_length_that_lies_is_cut_where_it_said(hostile):
    seen = await observe(f"{hostile}/lying")
    assert not seen["reachable"] and seen["after"] < 200 * 1024


async def test_a_compressed_answer_is_not_unpacked(hostile):
    seen = await observe(f"{hostile}/gzip")
    assert seen["error"] == "GET /readyz answered with a Content-Encoding; the contract has none"
    assert seen["after"] < 200 * 1024


async def test_a_dripping_answer_ends_at_the_total_time(hostile):
    t0 = time.monotonic()
    report = await observer.job_report(f"{hostile}/drip", timeout=1.0)
    assert not report.reachable and report.error is None  # unreachable: it did not answer in time
    assert time.monotonic() - t0 < 1.5


def test_the_status_says_so():
    spec = s.ModelServingSpec.model_validate(EXAMPLE["spec"])
    error = f"GET /readyz answered more than {h.MAX_ANSWER_BYTES} bytes"
    observed = status.Observed(generation=1, spec=spec, driver=status.DriverState(exists=True, ready=True),
                               job=status.JobReport(error=error))
    degraded = next(c for c in status.compute("wine", "ml", observed, None).conditions if c.type == "Degraded")
    assert (degraded.status, degraded.reason, degraded.message) == ("True", "JobAnswerInvalid", error)


def test_what_the_job_says_is_bounded_before_it_reaches_the_status():
    """Within the byte cap, a job can still say much: rejections are kept to the last 50, each
    reason to 1,000 characters, before conditions and the model history quote them."""
    fake = FakeJob()
    fake.rejected = [h.Rejection(model=f"m:{i}", dataType="wine", reason="r" * 10_000, at=1.7e9) for i in range(200)]
    report = observer.job_report_from(h.Readiness(ready=True, reason="serving"), h.Stats.model_validate_json(
        asyncio.run(fake.stats(None)).body), h.Models(serving={}, candidates={}, rejected=fake.rejected))
    assert len(report.rejected) == 50 and report.rejected[-1].model == "m:199"
    assert {len(r.reason) for r in report.rejected} == {1000}
