"""Status writes against the real API server: each carries the resourceVersion its reconcile read,
so a write computed from a status that changed since is refused (409) and decided again from the
newer one, whoever wrote that (a second operator during a leader hand-over, a handler's turn).

The reconciles run in this process, as two operators would (each its own client with the chart's
ServiceAccount token, its own watch cache, filled here by a read where a watch would fill it); the
interleaving that loses a write is caused by holding one writer's request until the other's has
landed. The API server's answers are real.
"""

from __future__ import annotations

import asyncio
import copy
import logging

import pytest_asyncio

from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import publish, reconciler, rollout, status
from scorestream.operator.cache import Key
from scorestream.operator.kube import Conflict, Kube

from harness.fake_job import model_info
from harness.operator import EXAMPLE, MS, apply, obj, operator_config

LOG = logging.getLogger("test_status_writes")
T0 = 1.7e9


class Writer:
    """One operator's reconciler: its own API client, its own cache; every status write it sent,
    with the API server's answer (a Conflict, or None where it was written)."""

    def __init__(self, api, job):
        self.api = api
        installation = api.installation
        token = api.cluster.token(installation.namespace, installation.service_account)
        config = operator_config(api, endpointTemplate=job.url, manageTopics=False)
        self.ctx = reconciler.Context(kube=Kube.for_server(api.cluster.server, token, verify_ssl=False), config=config)
        self.answers: list[Conflict | None] = []
        self.before_write = None  # an awaitable's factory run before the next status write goes out
        sent = self.ctx.kube.patch_status

        async def patch_status(*args, **kwargs):
            hold, self.before_write = self.before_write, None
            if hold is not None:
                await hold()
            try:
                written = await sent(*args, **kwargs)
            except Conflict as e:
                self.answers.append(e)
                raise
            self.answers.append(None)
            return written

        self.ctx.kube.patch_status = patch_status

    async def reconcile(self, body):
        """One turn as the controller takes it: the resource as a watch event would bring it, then
        reconciles until one is not refused (a refused write reads the resource again, and the
        controller queues the key again after the debounce)."""
        key = Key(self.api.ns, body["metadata"]["name"])
        self.ctx.cache.put(obj(self.api, MS, key.name))
        for _ in range(4):
            sent = len(self.answers)
            await reconciler.reconcile(self.ctx, key)
            if not any(isinstance(answer, Conflict) for answer in self.answers[sent:]):
                return status.parse(self.ctx.cache.resource(key).get("status"))
        raise AssertionError("still refused after 4 turns")

    async def close(self):
        await self.ctx.close()


@pytest_asyncio.fixture
async def writers(api, job):
    made = [Writer(api, job), Writer(api, job)]
    yield made
    for w in made:
        await w.close()


def serving() -> dict:
    """The example in the test's namespace, its Kafka client settings in the spec (no Secret to read)."""
    body = copy.deepcopy(EXAMPLE)
    body["metadata"] = {"name": "wine"}
    body["spec"]["kafka"].pop("secretRef", None)
    return body


def canary(version: str = "2") -> dict:
    body = serving()
    body["spec"]["model"].update(name="wine-linear", version=version)
    body["spec"]["rollout"] = {"strategy": "Canary", "canary": {"percent": 20, "minRecords": 100, "promoteAfter": "1s"}}
    return body


def write_status(api, status: dict) -> dict:
    return api.patch(MS, "wine", {"status": status}, subresource="status")


async def test_two_operators_race_on_one_status_and_the_stale_write_is_refused(api, job, writers):
    a, b = writers
    body = await apply(api, serving())
    first = await b.reconcile(body)
    assert first is not None and first.model.current.name == "wine-tree"

    # A reads, decides on the job's report of lag 7; before its write goes out, B reads the job
    # saying 11 and writes that.
    async def b_first():
        job.lag = 11
        await b.reconcile(body)

    job.lag = 7
    a.before_write = b_first
    new = await a.reconcile(body)
    assert [type(x) for x in b.answers[-1:]] == [type(None)], "B's write landed"
    assert isinstance(a.answers[0], Conflict) and a.answers[0].status == 409, a.answers
    # A read again and decided again from B's status (the job says 11 now): nothing it wrote since was refused.
    assert new.lag == 11 and all(x is None for x in a.answers[1:]), a.answers
    assert obj(api, MS, "wine")["status"]["lag"] == 11
    refused = [e for e in api.cluster.audit(api.installation.subject)
               if e.get("objectRef", {}).get("subresource") == "status" and e.get("verb") == "patch"
               and e.get("objectRef", {}).get("namespace") == api.ns and e.get("stage") == "ResponseComplete"]
    assert 409 in [e["responseStatus"]["code"] for e in refused]


async def test_a_rollouts_figures_survive_a_timer_and_a_handler_firing_together(api, job, writers):
    """What CI once saw: status.model.rollout Promoted with 0 candidate records. A timer's turn
    decided from the trial as it was before the promoting turn recorded its figures and its
    Promoting step; written, it would put the trial back to what it had read."""
    a, b = writers
    body = await apply(api, canary())
    sp = s.ModelServingSpec.model_validate(body["spec"])
    cand_id = publish.rollout_id(rollout.candidate_descriptor(sp))
    main_id = publish.rollout_id(publish.descriptor(sp))
    trial = {"strategy": "Canary", "phase": "Analyzing", "startedAt": "2023-11-14T22:13:20Z", "percent": 20.0,
             "candidate": {"name": "wine-linear", "version": "2", "records": 0, "errors": 0}, "message": "published"}
    write_status(api, {"model": {"published": cand_id, "rollout": trial,
                                 "current": {"name": "wine-tree", "version": "1", "since": "2023-11-14T22:13:20Z"}}})
    # The job took the promoted model over: it serves version 2, and has no candidate any more.
    job.serving = {"wine": model_info("wine", "wine-linear", "2", T0 + 60)}

    async def promoting_turn_lands():
        """The handler's turn that judged the figures and promoted: what it recorded."""
        write_status(api, {"model": {"published": main_id, "rollout": {
            **trial, "phase": "Promoting", "message": "promoted: 400 records, 0.00% failed",
            "candidate": {"name": "wine-linear", "version": "2", "records": 400, "errors": 0, "meanMs": 0.02}}}})

    a.before_write = promoting_turn_lands
    new = await a.reconcile(body)
    assert isinstance(a.answers[0], Conflict), "the timer's write from the older trial was refused"
    assert a.answers[1:] == [None], "... and the status decided again was written"
    done = obj(api, MS, "wine")["status"]["model"]["rollout"]
    assert done["phase"] == "Promoted" and done["candidate"]["records"] == 400, done
    assert new.model.rollout.candidate.records == 400 and new.model.published == main_id

    # Two more turns at once: whichever writes second was decided from what the first wrote.
    results = await asyncio.gather(a.reconcile(body), a.reconcile(body))
    assert all(r.model.rollout.phase == "Promoted" and r.model.rollout.candidate.records == 400 for r in results)
    assert [x for x in a.answers[2:] if x is not None] == []
