"""Reconciles of one resource run one after the other, whichever handler calls; of different
resources, at once. A reconcile queued behind another starts from the status that one returned."""

from __future__ import annotations

import asyncio
import logging

import pytest

from scorestream.operator import reconciler
from scorestream.operator.settings import OperatorConfig


@pytest.fixture
def runs(monkeypatch):
    """reconciler._reconcile replaced by a slow step that records when it ran and what it read."""
    record = []

    async def slow(ctx, body, logger, trigger):
        uid = body["metadata"]["uid"]
        record.append(("start", uid, trigger, body.get("status")))
        await asyncio.sleep(0.05)
        record.append(("end", uid, trigger, None))
        return {"phase": "Running", "by": trigger}

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


def context():
    return reconciler.Context(kube=None, config=OperatorConfig(allNamespaces=True))


async def test_reconciles_of_one_resource_never_overlap(runs):
    ctx = context()
    await asyncio.gather(*(reconciler.reconcile(ctx, resource("a"), logging.getLogger(), trigger)
                           for trigger in ("update", "timer", "child", "timer")))
    assert len(runs) == 8 and not overlapped(runs)


async def test_reconciles_of_different_resources_run_at_once(runs):
    ctx = context()
    await asyncio.gather(*(reconciler.reconcile(ctx, resource(uid), logging.getLogger(), "timer") for uid in "ab"))
    assert [(what, uid) for what, uid, *_ in runs[:2]] == [("start", "a"), ("start", "b")]


async def test_a_queued_reconcile_starts_from_the_status_the_one_before_returned(runs):
    ctx = context()
    stale = {"phase": "Pending"}
    first, second = await asyncio.gather(reconciler.reconcile(ctx, resource("a", stale), logging.getLogger(), "update"),
                                         reconciler.reconcile(ctx, resource("a", stale), logging.getLogger(), "timer"))
    assert [status for what, *_, status in runs if what == "start"] == [stale, first]


async def test_a_queued_reconcile_whose_body_moved_on_reads_its_body(runs):
    ctx = context()
    newer = {"phase": "Degraded"}
    await asyncio.gather(reconciler.reconcile(ctx, resource("a", {"phase": "Pending"}), logging.getLogger(), "update"),
                         reconciler.reconcile(ctx, resource("a", newer), logging.getLogger(), "timer"))
    assert [status for what, *_, status in runs if what == "start"][1] == newer


async def test_a_childs_repair_hands_on_no_status(runs):
    """kopf patches no status for it: the next reconcile reads the body's."""
    ctx = context()
    stale = {"phase": "Pending"}
    await asyncio.gather(reconciler.reconcile(ctx, resource("a", stale), logging.getLogger(), "child"),
                         reconciler.reconcile(ctx, resource("a", stale), logging.getLogger(), "timer"))
    assert [status for what, *_, status in runs if what == "start"] == [stale, stale]
