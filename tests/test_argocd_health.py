"""The Argo CD health check (docs/argocd/health.lua), run by a real Lua 5.1 interpreter (Argo CD
embeds gopher-lua, which implements Lua 5.1) against ModelServings whose status the operator's
own status.compute produced for each situation: what Argo CD would show for each."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import status

from harness.helm import installed_tool
from scorestream.api.v1alpha1.modelserving import ModelServingSpec

REPO = Path(__file__).resolve().parents[1]
HEALTH = REPO / "docs" / "argocd" / "health.lua"
GITOPS = REPO / "docs" / "gitops.md"
PMML = yaml.safe_load((REPO / "examples" / "wine-pmml.yaml").read_text())
CANARY = yaml.safe_load((REPO / "examples" / "wine-canary.yaml").read_text())
NOW = "2026-11-23T16:00:00Z"
SERVING_TREE = {"wine": {"name": "wine-tree", "version": "1", "since": 1795449600.0}}
ARGO_STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}


@pytest.fixture(scope="session")
def lua() -> str:
    return installed_tool("lua5.1", "lua5.1")


def lua_literal(value) -> str:
    """A JSON-like value as a Lua table constructor, as Argo CD hands the object to the script
    (JSON null: an absent key)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):  # bytes outside printable ASCII as Lua's decimal escapes
        return '"' + "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\{b:03d}"
                             for b in value.encode()) + '"'
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    return "{" + ", ".join(f"[{lua_literal(k)}] = {lua_literal(v)}" for k, v in value.items() if v is not None) + "}"


def health(lua: str, obj: dict, tmp_path: Path) -> tuple[str, str]:
    script = tmp_path / "run.lua"
    script.write_text(f"obj = {lua_literal(obj)}\n"
                      f"local hs = assert(loadfile({json.dumps(str(HEALTH))}))()\n"
                      'io.write(hs.status, "\\n", hs.message or "", "\\n")\n')
    res = subprocess.run([lua, str(script)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    state, message = res.stdout.split("\n", 1)
    return state, message.rstrip("\n")


def resource(example: dict, generation: int = 2, status_: dict | None = None, **spec) -> dict:
    body = copy.deepcopy(example)
    body["metadata"]["generation"] = generation
    body["spec"].update(spec)
    if status_ is not None:
        body["status"] = status_
    return body


def computed(example: dict, generation: int = 2, previous: dict | None = None, **observed) -> dict:
    """A resource with the status the operator computes for what it observed."""
    body = resource(example, generation)
    spec_ = ModelServingSpec.model_validate(body["spec"])
    o = status.Observed(generation=generation, spec=spec_, **{"data_topic_exists": True, **observed})
    body["status"] = status.wire(status.compute("wine", "ml", o, status.parse(previous), now=NOW))
    return body


RUNNING = dict(driver=status.DriverState(exists=True, ready=True),
               job=status.JobReport(reachable=True, ready=True, serving=SERVING_TREE))

SITUATIONS = {
    "no status yet": (lambda: resource(PMML), "Progressing", "Waiting for the operator"),
    "serving the desired model": (lambda: computed(PMML, **RUNNING), "Healthy", "Serving: serving wine-tree 1"),
    "a new generation not yet acted on": (lambda: dict(computed(PMML, **RUNNING), metadata={"generation": 3}),
                                          "Progressing", "generation 3"),
    "driver pod being created": (lambda: computed(PMML), "Progressing", "DriverCreating"),
    "job restoring its models": (lambda: computed(PMML, driver=status.DriverState(exists=True), job=status.JobReport(
        reachable=True, ready_reason="restoring models")), "Progressing", "JobNotReady: restoring models"),
    "data topic missing": (lambda: computed(PMML, data_topic_exists=False), "Progressing", "DataTopicMissing"),
    "suspended": (lambda: computed(resource(PMML, suspend=True)), "Suspended", "Suspended"),
    "driver crash-looping": (lambda: computed(PMML, driver=status.DriverState(
        exists=True, restarts=5, waiting_reason="CrashLoopBackOff")), "Degraded", "CrashLoopBackOff"),
    "objects cannot be applied": (lambda: computed(PMML, apply_error="statefulsets is forbidden"),
                                  "Degraded", "ApplyFailed"),
    "topics unreachable": (lambda: computed(PMML, topics_error="no Secret kafka-client", **RUNNING),
                           "Degraded", "TopicsUnavailable"),
    "an upgrade that failed": (lambda: computed(PMML, upgrade=s.UpgradeStatus(
        generation=2, phase="Failed", startedAt=NOW, message="not ready in 10m"), **RUNNING),
        "Degraded", "UpgradeFailed"),
    "an upgrade rolling": (lambda: computed(PMML, upgrade=s.UpgradeStatus(
        generation=2, phase="Upgrading", startedAt=NOW, message="the driver rolls"), **RUNNING),
        "Progressing", "Upgrading"),
    "a new version rolling out": (lambda: computed(resource(PMML, model={**PMML["spec"]["model"], "version": "2"}),
                                                   **RUNNING), "Progressing", "RollingOut"),
    "a canary on trial": (lambda: computed(CANARY, previous={"model": {"rollout": {
        "strategy": "Canary", "phase": "Analyzing", "startedAt": NOW, "percent": 10.0,
        "candidate": {"name": "wine-linear", "version": "2"}, "message": "1200 of 5000 records"}}}, **RUNNING),
        "Progressing", "CanaryAnalysis"),
    "the desired version rolled back": (lambda: computed(resource(PMML, model={**PMML["spec"]["model"], "version": "2"}),
                                                         previous={"model": {"history": [
                                                             {"name": "wine-tree", "version": "2", "outcome": "RolledBack",
                                                              "at": NOW, "reason": "inputs do not match the records"}]}},
                                                         **RUNNING), "Degraded", "RolledBack"),
    "models topic unwritable": (lambda: computed(PMML, publish_error="broker down", **RUNNING), "Degraded", "PublishFailed"),
}


def _invalid_spec() -> dict:
    body = resource(PMML, replicas=-1)
    try:
        ModelServingSpec.model_validate(body["spec"])
    except ValidationError as e:
        body["status"] = status.wire(status.compute("wine", "ml", status.invalid_spec(body["metadata"]["generation"], e),
                                                    None, now=NOW))
        return body
    raise AssertionError("replicas -1 should be invalid")


SITUATIONS["an invalid spec"] = (_invalid_spec, "Degraded", "InvalidSpec")


@pytest.mark.parametrize("situation", SITUATIONS)
def test_health_of_each_situation(lua, tmp_path, situation):
    make, want, fragment = SITUATIONS[situation]
    obj = make()
    state, message = health(lua, obj, tmp_path)
    print(f"\n{situation}: {state} — {message}")
    assert state in ARGO_STATUSES
    assert (state, fragment in message) == (want, True), message


def test_gitops_doc_shows_the_tested_script_in_the_argocd_cm_snippet():
    text = GITOPS.read_text()
    block = re.search(r"resource\.customizations\.health\.scorestream\.dev_ModelServing: \|\n((?:    .*\n|\n)+)", text)
    assert block, "docs/gitops.md has no argocd-cm snippet"
    shown = "\n".join(line[4:] for line in block.group(1).rstrip("\n").split("\n")) + "\n"
    assert shown == HEALTH.read_text(), "the snippet in docs/gitops.md differs from docs/argocd/health.lua"
