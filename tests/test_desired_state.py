"""One rendering for the reconcile and for drift repair: the resource's spec and what was observed
(a missing data topic, a failed upgrade's last stable spec) to the objects, as a pure function; and
drift repair reads those observations back from the status the reconcile wrote."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

from scorestream import naming
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import desired, status, upgrade
from scorestream.operator.conditions import Reason

EXAMPLE = yaml.safe_load((Path(__file__).resolve().parent.parent / "examples" / "wine-pmml.yaml").read_text())
EXAMPLE["metadata"].update(uid="0f6a6c0e-6a5e-4c40-9b53-0d1c7c1a0002", generation=2)


def body(**spec):
    b = copy.deepcopy(EXAMPLE)
    b["spec"].update(spec)
    return b


def stable_spec(**spec):
    """Generation 1's spec: a trigger interval the resource has since changed."""
    return {**copy.deepcopy(EXAMPLE["spec"]), "spark": {**EXAMPLE["spec"]["spark"], "triggerInterval": "1s"}, **spec}


def changed(**spec):
    return body(spark={**EXAMPLE["spec"]["spark"], "triggerInterval": "5s"}, **spec)


def driver(objs):
    sts = next(o for o in objs if o["kind"] == "StatefulSet")["spec"]
    return sts["replicas"], sts["template"]["metadata"]["annotations"][naming.CONFIG_HASH_ANNOTATION]


def trigger_interval(objs):
    cm = next(o for o in objs if o["kind"] == "ConfigMap")
    return json.loads(cm["data"]["job.json"])["spark"]["triggerInterval"]


def test_a_suspended_resource_runs_no_driver_even_under_a_failed_upgrades_stable_spec():
    assert driver(desired.desired_state(body(suspend=True), desired.Observations()))[0] == 0
    objs = desired.desired_state(changed(suspend=True), desired.Observations(stable_spec=stable_spec()))
    assert driver(objs)[0] == 0 and trigger_interval(objs) == "1s"


def test_a_stable_spec_recorded_while_suspended_does_not_suspend_the_resource():
    objs = desired.desired_state(changed(), desired.Observations(stable_spec=stable_spec(suspend=True)))
    assert driver(objs)[0] == 1


def test_a_failed_upgrade_renders_the_last_stable_spec():
    objs = desired.desired_state(changed(), desired.Observations(stable_spec=stable_spec()))
    assert trigger_interval(objs) == "1s"
    assert driver(objs) == driver(desired.desired_objects(body(**stable_spec())))
    assert driver(objs) != driver(desired.desired_state(changed(), desired.Observations()))
    # Owned by the resource, whatever spec they come from.
    assert {o["metadata"]["ownerReferences"][0]["uid"] for o in objs} == {EXAMPLE["metadata"]["uid"]}


def test_a_missing_data_topic_keeps_the_driver_at_zero():
    missing = desired.desired_state(body(), desired.Observations(data_topic_missing=True))
    there = desired.desired_state(body(), desired.Observations())
    assert driver(missing)[0] == 0 and driver(there)[0] == 1
    assert [o for o in missing if o["kind"] != "StatefulSet"] == [o for o in there if o["kind"] != "StatefulSet"]


def test_without_observations_it_renders_as_render_does():
    assert desired.desired_state(body(), desired.Observations()) == desired.desired_objects(body())


def written(b, **observed):
    """`b` with the status a reconcile writes for what it observed."""
    spec = s.ModelServingSpec.model_validate(b["spec"])
    new = status.compute("wine", "ml", status.Observed(generation=b["metadata"]["generation"], spec=spec, **observed),
                         status.parse(b.get("status")))
    return {**b, "status": status.wire(new)}


def assess(spec, raw_spec, generation, previous, running, ready):
    """upgrade.assess on a status as the API server holds it, at a fixed time."""
    return upgrade.assess(upgrade.Submitted("wine", "ml", spec, raw_spec, generation), status.parse(previous),
                          upgrade.Running(running, ready), 1.9e9)


def test_drift_repair_reads_a_missing_data_topic_from_the_status():
    b = written(body(), data_topic_exists=False)
    seen = status.recorded(b)
    assert seen == desired.Observations(data_topic_missing=True)
    applied = desired.desired_state(b, seen)
    assert not any(desired.drifted(b, child, seen, deleted=False) for child in applied)
    # What a reconcile unaware of the topic would want is what this one chose not to run.
    assert desired.drifted(b, desired.desired_objects(b)[-1], seen, deleted=False)
    assert not status.recorded(written(body(), data_topic_exists=True)).data_topic_missing


def upgrading() -> dict:
    """Status of generation 2's upgrade under way, generation 1 stable."""
    return {"lastStableSpec": {"generation": 1, "spec": stable_spec()},
            "upgrade": {"generation": 2, "phase": "Upgrading", "startedAt": "2026-01-01T00:00:00Z", "message": ""}}


def test_drift_repair_reads_a_failed_upgrade_from_the_status():
    before = upgrading()
    b = {**changed(), "status": before}
    spec = s.ModelServingSpec.model_validate(b["spec"])
    verdict = assess(spec, b["spec"], 2, before, None, False)
    assert verdict.run_spec == stable_spec() and verdict.upgrade.phase == "Failed"
    b = written(b, data_topic_exists=True, last_stable=verdict.last_stable, upgrade=verdict.upgrade)
    seen = status.recorded(b)
    assert seen == desired.Observations(stable_spec=verdict.run_spec)
    applied = desired.desired_state(b, seen)
    assert not any(desired.drifted(b, child, seen, deleted=False) for child in applied)
    assert all(desired.drifted(b, child, seen, deleted=True) for child in applied)
    # The spec changes again: the failed upgrade is over, the resource's own spec renders.
    newer = {**b, "metadata": {**b["metadata"], "generation": 3}}
    assert status.recorded(newer) == desired.Observations()


def test_an_edited_child_is_drift():
    b = written(body(), data_topic_exists=True)
    role = next(o for o in desired.desired_state(b, status.recorded(b)) if o["kind"] == "Role")
    edited = {**role, "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}
    assert desired.drifted(b, edited, status.recorded(b), deleted=False)
    stranger = {**role, "metadata": {**role["metadata"], "name": "not-ours"}}
    assert not desired.drifted(b, stranger, status.recorded(b), deleted=True)


def test_a_refused_image_keeps_the_status_it_had_and_says_why():
    """A refused image: Degraded/Ready/Progressing with the reason; the model history and the last
    stable spec stay (the job may still run the last allowed configuration)."""
    def refuse(previous, now):
        refusal = status.Refusal(2, Reason.IMAGE_NOT_ALLOWED, "image 'x' not allowed")
        return status.wire(status.compute("wine", "ml", refusal, status.parse(previous), now=now))

    before = {"phase": "Running", "lastStableSpec": {"generation": 1, "spec": EXAMPLE["spec"]},
              "model": {"history": [{"name": "m", "version": "1", "outcome": "Serving", "at": "t"}]},
              "conditions": [{"type": "Ready", "status": "True", "reason": "Serving", "message": "",
                              "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1},
                             {"type": "ModelReady", "status": "True", "reason": "Serving", "message": "",
                              "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}
    refused = refuse(before, now="2026-01-02T00:00:00Z")
    s.ModelServingStatus.model_validate(refused)
    by_type = {c["type"]: c for c in refused["conditions"]}
    assert (by_type["Degraded"]["status"], by_type["Degraded"]["reason"]) == ("True", "ImageNotAllowed")
    assert by_type["Ready"]["status"] == "False" and by_type["Ready"]["lastTransitionTime"] == "2026-01-02T00:00:00Z"
    assert by_type["ModelReady"] == before["conditions"][1]
    assert refused["phase"] == "Failed" and refused["observedGeneration"] == 2
    assert refused["lastStableSpec"] == before["lastStableSpec"] and refused["model"] == before["model"]
    # Said again, it keeps its transition time: no new transition, no new Event.
    again = refuse(refused, now="2026-01-03T00:00:00Z")
    assert {c["type"]: c for c in again["conditions"]}["Degraded"]["lastTransitionTime"] == "2026-01-02T00:00:00Z"


def test_an_upgrade_ends_with_one_event_even_after_it_was_reported_failed():
    before = upgrading()
    b = changed()
    spec = s.ModelServingSpec.model_validate(b["spec"])
    running = desired.spec_hash("wine", "ml", spec)

    def assess_(previous):
        return assess(spec, b["spec"], 2, previous, running, True)

    done = assess_(before)
    assert done.upgrade is None and done.last_stable.generation == 2
    assert done.event == ("Upgraded", "the job runs generation 2's configuration")
    # Past upgradeTimeout it was reported failed; its driver came ready before the last stable
    # spec replaced it: the upgrade is over all the same, and says so.
    late = assess_({**before, "upgrade": {**before["upgrade"], "phase": "Failed"}})
    assert late.upgrade is None and late.last_stable.generation == 2 and late.run_spec is None
    assert late.event[0] == "Upgraded" and "once reported failed" in late.event[1]
    # Nothing recorded (a start, or the upgrade's end already written): no event.
    assert assess_({"lastStableSpec": {"generation": 2, "spec": b["spec"]}}).event is None


def test_an_upgrade_superseded_by_a_change_of_the_same_configuration_still_ends_with_its_event():
    b = changed()
    spec = s.ModelServingSpec.model_validate(b["spec"])
    running = desired.spec_hash("wine", "ml", spec)
    # Generation 2's upgrade was under way when generation 3 changed only what changes live
    # (the model, say): the driver running that configuration ends it.
    before = upgrading()
    v = assess(spec, b["spec"], 3, before, running, True)
    assert v.upgrade is None and v.last_stable.generation == 3
    assert v.event == ("Upgraded", "the job runs generation 3's configuration")
