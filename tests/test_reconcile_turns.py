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
from scorestream.operator.settings import OperatorConfig


class Server:
    """Resources by name, their status written by JSON merge patch, each call a scheduling point."""

    def __init__(self, *names, status=None):
        self.objects = {n: resource(n, status) for n in names}
        self.writes = []

    async def get(self, api_version, kind, namespace, name):
        await asyncio.sleep(0)
        obj = self.objects.get(name)
        return None if obj is None else {**obj, "status": dict(obj.get("status") or {})}

    async def patch_status(self, api_version, kind, namespace, name, patch):
        await asyncio.sleep(0)
        self.writes.append((name, patch))
        merged = {**(self.objects[name].get("status") or {}), **patch}
        self.objects[name]["status"] = {k: v for k, v in merged.items() if v is not None}
        return self.objects[name]


@pytest.fixture
def runs(monkeypatch):
    """reconciler._reconcile replaced by a slow step that records when it ran and what it read,
    and returns a status counting the reconciles it has seen."""
    record = []

    async def slow(ctx, body, logger, trigger):
        uid = body["metadata"]["uid"]
        seen = (body.get("status") or {}).get("seen", 0)
        record.append(("start", uid, trigger, body.get("status")))
        await asyncio.sleep(0.05)
        record.append(("end", uid, trigger, None))
        return {"phase": "Running", "by": trigger, "seen": seen + 1}

    monkeypatch.setattr(reconciler, "_reconcile", slow)
    return record


def resource(uid, status=None):
    body = {"metadata": {"name": uid, "namespace": "ml", "uid": uid}, "spec": {}}
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
    assert [(status or {}).get("seen") for what, *_, status in runs if what == "start"] == [None, 1, 2]
    assert server.objects["a"]["status"] == {"phase": "Running", "by": "timer", "seen": 3}


async def test_an_unchanged_status_is_not_written(monkeypatch):
    server = Server("a", status={"phase": "Running"})

    async def same(ctx, body, logger, trigger):
        return dict(body["status"])

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
        return {"type": ctype, "status": st, "reason": reason, "message": message}

    before = {"conditions": [cond("Ready", "False", "DriverStarting"), cond("Progressing", "True", "Rollout"),
                             cond("Degraded", "False", "AsExpected")]}
    settled = {"conditions": [cond("Ready", "True", "Serving"), cond("Progressing", "False", "Stable"),
                              cond("Degraded", "False", "AsExpected")]}
    assert status.transitions(before, settled) == [status.Transition(False, "Serving", "Ready=True"),
                                                   status.Transition(False, "Stable", "Progressing=False")]
    failing = {"conditions": [cond("Ready", "False", "DriverFailing", "CrashLoopBackOff"),
                              cond("Progressing", "False", "DriverFailing", "CrashLoopBackOff"),
                              cond("Degraded", "True", "DriverFailing", "CrashLoopBackOff")]}
    assert all(t.warning for t in status.transitions(settled, failing))
    assert status.transitions(failing, failing) == []
