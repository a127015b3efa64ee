"""Job upgrades, judged as a pure function: is the driver running this spec's configuration, did it
become ready in time, and if not, which spec to run instead (the last stable one).

Like the Flink Kubernetes Operator's `lastStableSpec`: the spec under which the job last ran ready
is kept in status. A change of the job's configuration (anything but the model and the executor
total, which change live) rolls the driver; if the new driver is not ready within
`spec.upgradeTimeout`, the operator runs the last stable spec again and says so. The operator
never writes `spec` (GitOps tools own it): it renders the last stable spec's objects until the
spec changes again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from scorestream.config import duration_seconds
from scorestream.operator import desired
from scorestream.operator import spec as s


@dataclass(frozen=True)
class Assessment:
    run_spec: dict[str, Any] | None  # a spec to render instead of the resource's own (rolled back)
    last_stable: dict[str, Any] | None  # status.lastStableSpec
    upgrade: dict[str, Any] | None  # status.upgrade
    event: tuple[str, str] | None  # (reason, message) to post, once


def _hash(name: str, namespace: str, spec: s.ModelServingSpec) -> str:
    return desired.spec_hash(name, namespace, spec)


def _ts(rfc3339: str) -> float:
    return datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def assess(name: str, namespace: str, spec: s.ModelServingSpec, raw_spec: dict[str, Any], generation: int,
           previous: dict[str, Any], driver_hash: str | None, ready: bool, now: float, now_text: str) -> Assessment:
    """`driver_hash`: the config hash of the running driver pod; `ready`: it serves."""
    stable = previous.get("lastStableSpec")
    upgrade = previous.get("upgrade")
    want = _hash(name, namespace, spec)
    running_wanted = ready and driver_hash == want
    if stable is None or running_wanted:
        # First start, or the driver serves this spec's configuration: this spec is stable now.
        if running_wanted:
            # Any recorded upgrade ends here, announced once (the next status has none). One
            # declared failed may still end so: its driver came ready after upgradeTimeout,
            # before the last stable spec replaced it, and the UpgradeFailed it reported clears.
            event = None
            if upgrade:
                late = upgrade.get("phase") == "Failed" and upgrade.get("generation") == generation
                event = ("Upgraded", f"the job runs generation {generation}'s configuration"
                         + (" (ready after upgradeTimeout, once reported failed)" if late else ""))
            return Assessment(None, {"generation": generation, "spec": raw_spec}, None, event)
        return Assessment(None, None, None, None)
    stable_spec = s.ModelServingSpec.model_validate(stable["spec"])
    if _hash(name, namespace, stable_spec) == want:
        # Nothing to upgrade (a model, replicas or description change): the same configuration.
        return Assessment(None, {"generation": generation, "spec": raw_spec} if ready else stable, None, None)
    if upgrade is None or upgrade.get("generation") != generation:
        upgrade = {"generation": generation, "phase": "Upgrading", "startedAt": now_text,
                   "message": f"rolling the driver to generation {generation}'s configuration"}
        return Assessment(None, stable, upgrade, None)
    if upgrade["phase"] == "Failed":
        return Assessment(stable["spec"], stable, upgrade, None)
    timeout = duration_seconds(spec.upgrade_timeout)
    if now - _ts(upgrade["startedAt"]) > timeout:
        failed = {**upgrade, "phase": "Failed",
                  "message": (f"generation {generation} was not ready within upgradeTimeout {spec.upgrade_timeout}: "
                              f"running the last stable spec (generation {stable['generation']}) until the spec changes")}
        return Assessment(stable["spec"], stable, failed, ("UpgradeRolledBack", failed["message"]))
    return Assessment(None, stable, upgrade, None)
