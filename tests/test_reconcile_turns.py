"""Reconciles of one resource run one after the other, whichever handler calls; of different
resources, at once. Each reads the resource afresh and writes its status before the next starts,
so none computes from a status older than the one written before it. And the Events a status
change posts.

The API server here is a stand-in (`Server`): the faults under test are orderings of concurrent
handlers, which a real server cannot be made to produce on demand. The real-server tests
(test_operator, test_rollout) run the same code against kube-apiserver."""

from __future__ import annotations

import asyncio
import logging

import pytest

from scorestream.operator import reconciler, status
from scorestream.operator import spec as s
from scorestream.operator.conditions import Reason
from scorestream.operator.kube import Conflict
from scorestream.operator.settings import OperatorConfig


class Server:
    """Resources by name, their status written by JSON merge patch with the resourceVersion the
    writer read (409 where it changed since), each call a scheduling point."""

    def __init__(self, *names, status=None):
        self.objects = {n: resource(n, status) for n in names}
        self.writes = []

    async def get(self, api_version, kind, namespace, name):
        await asyncio.sleep(0)
        obj = self.objects.get(name)
        return None if obj is None else {**obj, "metadata": dict(obj["metadata"]), "status": dict(obj.get("status") or {})}

    async def patch_status(self, api_version, kind, namespace, name, patch, resource_version=None):
        await asyncio.sleep(0)
        obj = self.objects[name]
        if resource_version is not None and resource_version != obj["metadata"]["resourceVersion"]:
            raise Conflict(409, "the object has been modified")
        self.writes.append((name, patch))
        merged = {**(obj.get("status") or {}), **patch}
        obj["status"] = {k: v for k, v in merged.items() if v is not None}
        self.touch(name)
        return obj

    def touch(self, name):
        meta = self.objects[name]["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)


def counted(previous, trigger):
    """A status saying which trigger wrote it and how many reconciles it has seen (in observedGeneration)."""
    return s.ModelServingStatus(phase="Running", selector=trigger, observedGeneration=previous.observed_generation + 1)


@pytest.fixture
def runs(monkeypatch):
    """reconciler._reconcile replaced by a slow step that records when it ran and what it read,
    and returns a status counting the reconciles it has seen."""
    record = []

    async def slow(ctx, body, previous, logger, trigger, child=None):
        uid = body["metadata"]["uid"]
        record.append(("start", uid, trigger, body.get("status")))
        await asyncio.sleep(0.05)
        record.append(("end", uid, trigger, None))
        return counted(previous, trigger)

    monkeypatch.setattr(reconciler, "_reconcile", slow)
    return record


def resource(uid, status=None):
    body = {"metadata": {"name": uid, "namespace": "ml", "uid": uid, "resourceVersion": "1"}, "spec": {}}
    return body if status is None else {**body, "status": status}


def overlapped(record):
    """Whether a reconcile started while another of the same resource was running."""
    running = {}
    for what, uid, *_ in record:
        running[uid] = running.get(uid, 0) + (1 if what == "start" else -1)
        if running[uid] > 1:
            return True
    return False


def context(server):
    return reconciler.Context(kube=server, config=OperatorConfig(allNamespaces=True))


async def test_reconciles_of_one_resource_never_overlap(runs):
    ctx = context(Server("a"))
    await asyncio.gather(*(reconciler.reconcile(ctx, resource("a"), logging.getLogger(), trigger)
                           for trigger in ("update", "timer", "child", "timer")))
    assert len(runs) == 8 and not overlapped(runs)


async def test_reconciles_of_different_resources_run_at_once(runs):
    ctx = context(Server("a", "b"))
    await asyncio.gather(*(reconciler.reconcile(ctx, resource(uid), logging.getLogger(), "timer") for uid in "ab"))
    assert [(what, uid) for what, uid, *_ in runs[:2]] == [("start", "a"), ("start", "b")]


async def test_each_reconcile_starts_from_the_status_the_one_before_wrote(runs):
    """The bodies kopf hands over are all from before the first reconcile; the third queued
    would otherwise compute from that and write over the second's steps."""
    server = Server("a", status={"phase": "Pending"})
    ctx = context(server)
    stale = resource("a", {"phase": "Pending"})
    await asyncio.gather(*(reconciler.reconcile(ctx, stale, logging.getLogger(), trigger)
                           for trigger in ("update", "timer", "timer")))
    assert [(status or {}).get("observedGeneration") for what, *_, status in runs if what == "start"] == [None, 1, 2]
    assert {k: server.objects["a"]["status"][k] for k in ("phase", "selector", "observedGeneration")} == \
        {"phase": "Running", "selector": "timer", "observedGeneration": 3}


async def test_a_status_write_refused_as_stale_is_decided_again_from_the_newer_status(monkeypatch):
    """Another writer (a second operator during a leader hand-over) writes between this
    reconcile's read and its write: the write is refused (409), and the reconcile reads again and
    computes from the newer status instead of writing over it."""
    server = Server("a", status={"phase": "Pending"})
    seen = []

    async def raced(ctx, body, previous, logger, trigger, child=None):
        seen.append(previous.observed_generation)
        if len(seen) == 1:  # the other writer's status lands while this one decides
            server.objects["a"]["status"] = {"phase": "Running", "observedGeneration": 5}
            server.touch("a")
        return counted(previous, trigger)

    monkeypatch.setattr(reconciler, "_reconcile", raced)
    new = await reconciler.reconcile(context(server), resource("a"), logging.getLogger(), "timer")
    assert seen == [0, 5] and new.observed_generation == 6
    assert server.objects["a"]["status"]["observedGeneration"] == 6 and len(server.writes) == 1


async def test_an_unchanged_status_is_not_written(monkeypatch):
    server = Server("a", status={"phase": "Running"})

    async def same(ctx, body, previous, logger, trigger, child=None):
        return previous

    monkeypatch.setattr(reconciler, "_reconcile", same)
    await reconciler.reconcile(context(server), resource("a"), logging.getLogger(), "timer")
    assert server.writes == []


async def test_a_field_the_new_status_drops_is_removed():
    assert status.merge_patch({"upgrade": {"phase": "Upgrading"}, "phase": "Running"}, {"phase": "Running"}) \
        == {**{k: None for k in status.STATUS_FIELDS if k != "phase"}, "phase": "Running"}


async def test_a_childs_repair_writes_no_status(runs):
    server = Server("a", status={"phase": "Pending"})
    ctx = context(server)
    await reconciler.reconcile(ctx, resource("a"), logging.getLogger(), "child")
    assert server.writes == [] and server.objects["a"]["status"] == {"phase": "Pending"}


async def test_a_resource_gone_or_made_again_is_not_reconciled(runs):
    server = Server("a")
    ctx = context(server)
    assert await reconciler.reconcile(ctx, resource("b"), logging.getLogger(), "timer") is None
    server.objects["a"]["metadata"]["uid"] = "a2"  # deleted, and another of its name made
    assert await reconciler.reconcile(ctx, resource("a"), logging.getLogger(), "timer") is None
    assert runs == [] and server.writes == []


def test_events_are_posted_for_changed_conditions_warnings_only_for_failures():
    def cond(ctype, st, reason, message=""):
        return s.Condition(type=ctype, status=st, reason=reason, message=message, lastTransitionTime="2026-01-01T00:00:00Z")

    before = [cond("Ready", "False", Reason.DRIVER_STARTING), cond("Progressing", "True", Reason.ROLLING_OUT),
              cond("Degraded", "False", Reason.HEALTHY)]
    settled = [cond("Ready", "True", Reason.SERVING), cond("Progressing", "False", Reason.STABLE),
               cond("Degraded", "False", Reason.HEALTHY)]
    assert status.transitions(before, settled) == [status.Transition(False, "Serving", "Ready=True"),
                                                   status.Transition(False, "Stable", "Progressing=False")]
    failing = [cond("Ready", "False", Reason.DRIVER_FAILING, "CrashLoopBackOff"),
               cond("Progressing", "False", Reason.DRIVER_FAILING, "CrashLoopBackOff"),
               cond("Degraded", "True", Reason.DRIVER_FAILING, "CrashLoopBackOff")]
    assert all(t.warning for t in status.transitions(settled, failing))
    assert status.transitions(failing, failing) == []
