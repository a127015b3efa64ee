"""Declarative rollouts end to end: the operator (against the tests' real API server) publishes spec.model,
the real job (Spark local, a local process standing in for the driver pod) swaps models without a
restart, and the operator confirms what the job serves through its HTTP endpoint."""

from __future__ import annotations

import asyncio
import collections
import json
import statistics
import time
import urllib.parse
from pathlib import Path

import pytest

from scorestream.tools.demo import feed
from scorestream.operator.publish import ROLLOUT_HEADER

from harness.operator import MS, Operated, apply, condition, events, obj, resource, until
from harness.streaming import Stream

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def model_dirs(artifacts):
    """The job may read model files only under its model directories: here, the artifacts' folder."""
    return {"modelDirs": sorted({str(Path(urllib.parse.urlsplit(a["uri"]).path).parent) for a in artifacts.values()})}


def model(artifacts, name, version):
    return {"name": f"wine-{name}", "version": str(version), **artifacts[name]}


def serving_now(api):
    return ((obj(api, MS, "wine") or {}).get("status") or {}).get("model", {}).get("current") or {}


async def rolled_out(api, name, version, timeout=120.0):
    def done():
        cond = condition(api, "wine", "ModelReady")
        cur = serving_now(api)
        return cond.get("status") == "True" and (cur.get("name"), cur.get("version")) == (name, str(version))
    await until(done, timeout=timeout, what=f"ModelReady for {name} {version}")


async def scored(job, name, version):
    await until(lambda: job.get("/stats")["dataTypes"]["wine"].get("invocations", 0) > 0, timeout=120,
                what=f"records scored by {name} {version}")


async def tree_serving(api, run, s, broker, artifacts, tmp_path, spark: dict, fields=True, **spec):
    """The resource applied with the tree (and ``spark`` settings, the rest of ``spec``), its job
    started, the tree rolled out and scoring a stream of ~1,000 records/s: (body, job, stream)."""
    body = resource(s.resource_topics, broker, model=model(artifacts, "tree", 1))
    body["spec"]["input"] = {"format": "json", **({"fields": list(feed.WINE_COLUMNS)} if fields else {})}
    body["spec"]["spark"].update(spark)
    body["spec"].update(spec)
    await apply(api, body)
    # The operator published spec.model before the job ever ran: the job restores it.
    job = await run.start_job(tmp_path, artifacts=model_dirs(artifacts))
    await rolled_out(api, "wine-tree", 1)  # the first model: nothing to compare with, immediate
    stream = Stream(s, total=10**9, chunk=100, pause=0.1)  # until stopped
    stream.start()
    await scored(job, "tree", 1)
    return body, job, stream


@pytest.mark.timeout(900)
async def test_immediate_rollouts_are_published_confirmed_and_rolled_back(api, broker, serving, artifacts, tmp_path):
    s = serving(partitions=2)
    # Observing as rarely as in production relative to the trigger; rollouts are confirmed by
    # their own poll (0.25 s here, 1 s by default).
    async with Operated(api, observeInterval=5, rolloutPoll=0.25) as run:
        body, job, stream = await tree_serving(api, run, s, broker, artifacts, tmp_path, {"triggerInterval": "500ms"})
        # Rollouts from PMML to PMML: a TensorFlow rollout is the shadow test's, the job's swaps
        # between the formats test_hot_swap's. History's bound is test_rollout_status's.
        plan = [("linear", 2), ("tree", 3), ("linear", 4)]
        durations = []
        for name, version in plan:
            body["spec"]["model"] = model(artifacts, name, version)
            t0 = time.monotonic()
            await apply(api, body)
            await rolled_out(api, f"wine-{name}", version)
            durations.append(time.monotonic() - t0)
            await scored(job, name, version)  # not part of the figure: each version scores some records

        # A model that cannot be fetched: rolled back, the current one keeps serving, not retried.
        body["spec"]["model"] = {**model(artifacts, "tree", 99), "uri": "file:///nonexistent/tree.pmml"}
        await apply(api, body)
        cond = await until(lambda: condition(api, "wine", "ModelReady").get("reason") == "RolledBack"
                           and condition(api, "wine", "ModelReady"), timeout=60, what="RolledBack")
        last = f"wine-{plan[-1][0]} {plan[-1][1]}"
        assert "nonexistent" in cond["message"] and f"still serving {last}" in cond["message"]
        assert serving_now(api)["version"] == str(plan[-1][1])
        history = obj(api, MS, "wine")["status"]["model"]["history"]
        assert history[-1]["version"] == "99" and history[-1]["outcome"] == "RolledBack"
        assert [h["outcome"] for h in history[:-1]].count("Serving") == 1 and len(history) == 2 + len(plan)
        published = obj(api, MS, "wine")["status"]["model"]["published"]

        sent = await asyncio.to_thread(stream.stop)
        assert stream.error is None
        await asyncio.to_thread(job.wait_records, sent)
        assert obj(api, MS, "wine")["status"]["model"]["published"] == published  # never re-published

        out = [json.loads(m.value()) for m in await asyncio.to_thread(s.read, "out", sent)]
        dlq = await asyncio.to_thread(s.read, "dlq", None, idle=2.0)
        assert not dlq, [dict(m.headers() or []) for m in dlq[:3]]
        assert len(out) == sent and len({o["key"] for o in out}) == sent, "every record scored once, none lost"
        planned = {("wine-tree", "1")} | {(f"wine-{n}", str(v)) for n, v in plan}
        used = {(o["model"]["name"], o["model"]["version"]) for o in out}
        assert used <= planned, f"scored by versions outside the plan: {used - planned}"
        assert used == planned, f"versions that scored nothing: {planned - used}"
        models_msgs = await asyncio.to_thread(s.read, "models", None, idle=2.0)
        assert len(models_msgs) == 1 + len(plan) + 1, "one message per rollout, none twice"

        print(f"\nspec.model change -> ModelReady=True over {len(durations)} rollouts (trigger 500 ms, poll 250 ms): "
              f"median {statistics.median(durations):.2f} s, max {max(durations):.2f} s")
        assert job.stop() == 0


def trial(api):
    return obj(api, MS, "wine")["status"]["model"].get("rollout") or {}


@pytest.mark.timeout(600)
async def test_a_canary_is_promoted_by_its_figures_and_a_failing_one_rolled_back(api, broker, serving, artifacts,
                                                                                tmp_path):
    s = serving(partitions=2)
    async with Operated(api, observeInterval=5, rolloutPoll=0.25) as run:
        body, job, stream = await tree_serving(
            api, run, s, broker, artifacts, tmp_path, {"triggerInterval": "500ms"}, fields=False,
            rollout={"strategy": "Canary", "canary": {
                "percent": 20, "minRecords": 500, "promoteAfter": "3s", "maxErrorRate": 0.01, "maxLatencyRatio": 100}})
        body["spec"]["model"] = model(artifacts, "linear", 2)
        t0 = time.monotonic()
        await apply(api, body)
        await until(lambda: condition(api, "wine", "ModelReady").get("reason") == "CanaryAnalysis", timeout=60,
                    what="CanaryAnalysis")
        await rolled_out(api, "wine-linear", 2, timeout=180)
        promoted_after = time.monotonic() - t0
        done = trial(api)
        assert done["phase"] == "Promoted" and done["percent"] == 20
        assert done["candidate"]["records"] >= 500 and done["candidate"]["errors"] == 0, done
        assert done["current"]["name"] == "wine-tree"
        await until(lambda: events(api, "CandidatePromoted"), what="a CandidatePromoted event")  # posted asynchronously

        body["spec"]["model"] = model(artifacts, "broken", 3)
        t0 = time.monotonic()
        await apply(api, body)
        cond = await until(lambda: condition(api, "wine", "ModelReady").get("reason") == "RolledBack"
                           and condition(api, "wine", "ModelReady"), timeout=120, what="RolledBack")
        rolled_back_after = time.monotonic() - t0
        assert "records failed" in cond["message"] and "still serving wine-linear 2" in cond["message"]
        assert trial(api)["phase"] == "RolledBack"
        await until(lambda: events(api, "CandidateRolledBack"), what="a CandidateRolledBack event")
        await until(lambda: not job.get("/models")["candidates"], timeout=30, what="the candidate withdrawn")
        assert serving_now(api)["version"] == "2"
        await asyncio.sleep(2)  # records after the withdrawal: all scored by the serving model

        sent = await asyncio.to_thread(stream.stop)
        assert stream.error is None
        await asyncio.to_thread(job.wait_records, sent)
        out = [json.loads(m.value()) for m in await asyncio.to_thread(s.read, "out", None, idle=2.0)]
        dlq = await asyncio.to_thread(s.read, "dlq", None, idle=2.0)
        keys = [o["key"] for o in out] + [m.key().decode() for m in dlq]
        assert len(keys) == sent and len(set(keys)) == sent, "every record once, in the output or dead-lettered"
        used = {(o["model"]["name"], o["model"]["version"]) for o in out}
        assert used == {("wine-tree", "1"), ("wine-linear", "2")}
        assert dlq and all(dict(m.headers())["scorestream.model"] == b"wine-broken:3" for m in dlq)
        assert b"alcohol_pct" in dict(dlq[0].headers())["scorestream.reason"]
        share = len(dlq) / sent
        messages = await asyncio.to_thread(s.read, "models", None, idle=2.0)
        roles = [(m.key().decode(), m.value() is None) for m in messages]
        # Addressed to this resource alone: its namespace and name, then dataType and role.
        main, cand = f"{api.ns}/wine/wine", f"{api.ns}/wine/wine/candidate"
        assert roles == [(main, False), (cand, False), (main, False), (cand, True), (cand, False), (cand, True)], roles
        print(f"\ncanary (20%, minRecords 500, promoteAfter 3 s, trigger 500 ms): spec.model change -> promoted "
              f"and serving in {promoted_after:.1f} s; failing canary rolled back in {rolled_back_after:.1f} s "
              f"after {len(dlq)} dead-lettered records ({share:.2%} of the stream)")
        assert job.stop() == 0


def publications(s) -> collections.Counter:
    """How many messages on the models topic carry each rollout id."""
    return collections.Counter(dict(m.headers() or []).get(ROLLOUT_HEADER, b"").decode()
                               for m in s.read("models", None, idle=2.0))


@pytest.mark.timeout(600)
async def test_a_shadow_reports_agreement_a_corrupt_artifact_is_refused_and_a_restarted_operator_publishes_once(
        api, broker, serving, artifacts, tmp_path):
    s = serving(partitions=2)
    async with Operated(api, observeInterval=5, rolloutPoll=0.25) as run:
        body, job, stream = await tree_serving(
            api, run, s, broker, artifacts, tmp_path, {"triggerInterval": "500ms"},
            rollout={"strategy": "Shadow", "shadow": {"minRecords": 500, "maxLatencyRatio": 100}})

        # Shadow: the candidate scores every record unseen; its agreement is in status.
        body["spec"]["model"] = model(artifacts, "shallow", 2)
        await apply(api, body)
        await until(lambda: (trial(api).get("candidate") or {}).get("records", 0) >= 500
                    and trial(api).get("agreement") is not None, timeout=120, what="the shadow's agreement")
        shadow = trial(api)
        assert shadow["strategy"] == "Shadow" and shadow["phase"] == "Analyzing", shadow
        assert condition(api, "wine", "ModelReady")["reason"] == "ShadowAnalysis"
        assert serving_now(api)["name"] == "wine-tree", "a shadow is never promoted by the operator"
        assert 0.3 < shadow["agreement"] < 1.0, shadow  # two trees of one data set: often, not always alike
        # The user promotes it: the same model, strategy Immediate.
        body["spec"]["rollout"]["strategy"] = "Immediate"
        await apply(api, body)
        await rolled_out(api, "wine-shallow", 2)
        await until(lambda: not job.get("/models")["candidates"], timeout=30, what="the shadow's key cleared")

        # A corrupt artifact: refused by the job, the serving model stays, not published again.
        body["spec"]["model"] = model(artifacts, "corrupt", 3)
        await apply(api, body)
        cond = await until(lambda: condition(api, "wine", "ModelReady").get("reason") == "RolledBack"
                           and condition(api, "wine", "ModelReady"), timeout=60, what="RolledBack")
        assert "still serving wine-shallow 2" in cond["message"], cond
        corrupt_rid = obj(api, MS, "wine")["status"]["model"]["published"]

        # The operator dies after publishing a rollout and before the job confirms it (TensorFlow
        # takes seconds to load): the next operator completes the rollout without publishing again.
        body["spec"]["model"] = model(artifacts, "keras", 4)
        await apply(api, body)
        await until(lambda: obj(api, MS, "wine")["status"]["model"]["published"] != corrupt_rid, timeout=30,
                    what="the TensorFlow rollout published")
        mid_rollout = condition(api, "wine", "ModelReady").get("status") != "True"
        rid = obj(api, MS, "wine")["status"]["model"]["published"]
        await run.restart_operator()
        await rolled_out(api, "wine-keras", 4)
        await scored(job, "keras", 4)

        sent = await asyncio.to_thread(stream.stop)
        assert stream.error is None
        await asyncio.to_thread(job.wait_records, sent)
        out = [json.loads(m.value()) for m in await asyncio.to_thread(s.read, "out", sent)]
        assert len(out) == sent and len({o["key"] for o in out}) == sent, "every record scored once, none lost"
        used = {(o["model"]["name"], o["model"]["version"]) for o in out}
        assert used == {("wine-tree", "1"), ("wine-shallow", "2"), ("wine-keras", "4")}, used
        assert not await asyncio.to_thread(s.read, "dlq", None, idle=1.0)
        published = await asyncio.to_thread(publications, s)
        assert published[rid] == 1, "the rollout was published twice"
        assert published[corrupt_rid] == 1
        print(f"\nshadow of wine-shallow 2 next to wine-tree 1: agreement {shadow['agreement']:.1%}, mean abs diff "
              f"{shadow['meanAbsDiff']:.3f} over {shadow['candidate']['records']} records; corrupt artifact rolled "
              f"back; operator killed {'before' if mid_rollout else 'after'} the job confirmed the TensorFlow "
              f"rollout, which completed with one publication")
        assert job.stop() == 0
