"""The manual rollout controls as pure decisions: the promote/abort/rollback-to annotations and the
status they leave (acted on once), and spec.restartNonce rolling the driver's pod template."""

from __future__ import annotations

import copy
from dataclasses import replace

from scorestream import naming
from scorestream.api.v1alpha1 import controls
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import desired, publish, rollout, status

from test_canary_plan import EXAMPLE, SERVING, analyzing, cand, compute, manual, plan, spec

NOW = "2027-01-15T08:05:00Z"


def observed(sp, plan, previous=None, serving=SERVING, controls=None, **job):
    return status.Observed(generation=1, spec=sp, controls=controls or status.parse(previous).controls,
                           published=((previous or {}).get("model") or {}).get("published"), plan=plan,
                           job=status.JobReport(reachable=True, ready=True, serving={"wine": serving}, **job))


def test_promote_publishes_the_candidate_as_serving_once():
    sp = spec()
    prev = analyzing(sp)
    asked = manual(sp, prev, rollout.Requests(promote="r1"), NOW)
    main = publish.descriptor(sp)
    assert asked.step.publish == main and asked.step.withdraw and asked.step.verdict == "promote"
    assert asked.handled.promote == "r1" and asked.handled.acted and asked.event[0] == "CandidatePromotedByRequest"
    # The status records it: the same request is not acted on again.
    again = manual(sp, {**prev, "controls": wire(asked.handled)}, rollout.Requests(promote="r1"), NOW)
    assert again.step is None and again.event is None
    assert again.handled == asked.handled  # what the request did stays in status.controls.message


def test_a_shadow_is_promoted_by_request_too():
    sp = spec(strategy="Shadow")
    asked = manual(sp, analyzing(sp), rollout.Requests(promote="r1"), NOW)
    assert asked.step.verdict == "promote" and asked.step.publish.candidate is None


def test_abort_withdraws_the_candidate_and_the_trial_is_rolled_back():
    sp = spec()
    prev = analyzing(sp)
    asked = manual(sp, prev, rollout.Requests(abort="a1"), NOW)
    assert asked.step.publish is None and asked.step.withdraw and asked.step.verdict == "rollback"
    o = observed(sp, asked.step, prev, controls=asked.handled, candidates={"wine": cand(50)})
    st = compute("wine", "ml", o, prev, now=NOW)
    assert st["model"]["rollout"]["phase"] == "RolledBack" and "aborted by request" in st["model"]["rollout"]["message"]
    ready = next(c for c in st["conditions"] if c["type"] == "ModelReady")
    assert ready["reason"] == "RolledBack" and "aborted by request" in ready["message"]
    assert st["controls"]["abort"] == "a1"
    # Not retried by the rules' plan either: a rolled-back trial waits for a new spec.model.
    assert plan(sp, st, SERVING, None, None, 0).token is None


def test_a_request_with_nothing_to_act_on_is_answered_not_retried():
    sp = spec()
    asked = manual(sp, {"model": {}}, rollout.Requests(promote="r1", abort="a1"), NOW)
    assert asked.step is None and asked.event[2] and "no candidate is on trial" in asked.event[1]
    assert asked.handled.abort == "a1"  # abort first; promote at the next reconcile
    nxt = manual(sp, {"controls": wire(asked.handled)}, rollout.Requests(promote="r1", abort="a1"), NOW)
    assert wire(nxt.handled) == {"abort": "a1", "promote": "r1", "message": nxt.handled.message, "acted": False}


def wire(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def served(version: str, sp: s.ModelServingSpec, outcome: str) -> dict:
    return {"name": sp.model.name, "version": version, "outcome": outcome, "at": NOW,
            "model": wire(rollout.kept_model(sp.model))}


def test_rollback_republishes_a_kept_version_and_holds_until_spec_model_changes():
    v1, v2 = spec(strategy="Immediate", version="1"), spec(strategy="Immediate", version="2")
    prev = {"model": {"published": publish.rollout_id(publish.descriptor(v2)),
                      "history": [served("1", v1, "Replaced"), served("2", v2, "Serving")]}}
    value = controls.rollback_value("1", "req-1")
    asked = manual(v2, prev, rollout.Requests(rollback_to=value), NOW)
    assert (asked.step.publish.name, asked.step.publish.version) == ("wine-linear", "1")
    assert asked.pinned.version == "1" and asked.handled.rollback_to == value
    o = replace(observed(v2, asked.step, prev, serving={"name": "wine-linear", "version": "2", "since": 1.7e9}),
                published=asked.step.rollout_id, published_now=True, controls=asked.handled, pinned_now=asked.pinned)
    st = compute("wine", "ml", o, prev, now=NOW)
    assert st["model"]["pinned"]["version"] == "1"
    # v2 serves until the job installs v1; then it is RolledBack, with the reason.
    assert [(h["version"], h["outcome"]) for h in st["model"]["history"]][-2:] == [("2", "Serving"), ("1", "Published")]
    o = observed(v2, None, st, serving={"name": "wine-linear", "version": "1", "since": 1.7e9 + 60})
    st = compute("wine", "ml", o, st, now=NOW)
    outcomes = {h["version"]: (h["outcome"], h.get("reason")) for h in st["model"]["history"]}
    assert outcomes == {"1": ("Serving", None), "2": ("RolledBack", "rolled back to wine-linear 1 by request")}
    assert next(c for c in st["conditions"] if c["type"] == "ModelReady")["reason"] == "RolledBackByRequest"
    # The next reconciles do not publish spec.model again ...
    assert plan(v2, st, {"name": "wine-linear", "version": "1"}, None, None, 0).token is None
    # ... until spec.model changes: then it rolls out, and the pin is gone.
    v3 = spec(strategy="Immediate", version="3")
    assert plan(v3, st, {"name": "wine-linear", "version": "1"}, None, None, 0).publish.version == "3"
    o3 = observed(v3, None, st)
    assert "pinned" not in compute("wine", "ml", o3, st, now=NOW)["model"]


def test_rollback_to_an_unknown_or_unkept_version_says_why():
    sp = spec(strategy="Immediate")
    prev = {"model": {"history": [{"name": "wine-tree", "version": "1", "outcome": "Replaced", "at": NOW}]}}
    missing = manual(sp, prev, rollout.Requests(rollback_to="7@x"), NOW)
    assert missing.step is None and "no such version" in missing.event[1] and "it has: 1" in missing.event[1]
    unkept = manual(sp, prev, rollout.Requests(rollback_to="1@x"), NOW)
    assert unkept.step is None and "was not kept" in unkept.event[1]


def test_a_version_with_an_at_sign_is_found_whole():
    history = [s.ModelHistoryEntry(name="m", version="1@beta", outcome="Serving", at=NOW)]
    assert controls.rollback_version("1@beta", history) == "1@beta"
    assert controls.rollback_version("1@beta@req", history) == "1@beta"


def test_restart_nonce_rolls_the_driver_pod_template():
    def template_hash(nonce):
        body = {"apiVersion": s.API_VERSION, "kind": s.KIND, "spec": copy.deepcopy(EXAMPLE["spec"]),
                "metadata": {"name": "wine", "namespace": "ml", "uid": "u"}}
        if nonce is not None:
            body["spec"]["restartNonce"] = nonce
        sts = next(o for o in desired.desired_state(body, desired.Observations()) if o["kind"] == "StatefulSet")
        return sts["spec"]["template"]["metadata"]["annotations"][naming.CONFIG_HASH_ANNOTATION]

    assert len({template_hash(None), template_hash(1), template_hash(2)}) == 3
    # Unset, the hash is what it was before the field existed: no restart on the operator's upgrade.
    plain = s.ModelServingSpec.model_validate(EXAMPLE["spec"])
    assert template_hash(None) == desired.config_hash(desired.job_config("wine", "ml", plain))
