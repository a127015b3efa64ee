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
from typing import Any

from scorestream.api.v1alpha1 import modelserving as s
from scorestream.config import duration_seconds
from scorestream.operator import clock, desired

RawSpec = dict[str, Any]  # a spec as the resource holds it (what is rendered and recorded)


@dataclass(frozen=True)
class Assessment:
    run_spec: RawSpec | None  # a spec to render instead of the resource's own (rolled back)
    last_stable: s.StableSpec | None  # status.lastStableSpec
    upgrade: s.UpgradeStatus | None  # status.upgrade
    event: tuple[str, str] | None  # (reason, message) to post, once


def _hash(name: str, namespace: str, spec: s.ModelServingSpec) -> str:
    return desired.spec_hash(name, namespace, spec)


def runs_instead(status: s.ModelServingStatus, generation: int) -> RawSpec | None:
    """The spec a failed upgrade of this generation runs instead of the resource's: the last stable one."""
    up, stable = status.upgrade, status.last_stable_spec
    if up is None or stable is None or up.phase != "Failed" or up.generation != generation:
        return None
    return stable.spec


@dataclass(frozen=True)
class Submitted:
    """The spec a resource holds now, typed and as written (what a stable spec records)."""

    name: str
    namespace: str
    spec: s.ModelServingSpec
    raw: RawSpec
    generation: int


@dataclass(frozen=True)
class Running:
    """The driver pod as observed: the configuration it runs, and whether the job serves."""

    config_hash: str | None
    serving: bool


def assess(submitted: Submitted, previous: s.ModelServingStatus, running: Running, now: float) -> Assessment:
    name, namespace, spec, generation = submitted.name, submitted.namespace, submitted.spec, submitted.generation
    ready, driver_hash = running.serving, running.config_hash
    stable, upgrade = previous.last_stable_spec, previous.upgrade
    want = _hash(name, namespace, spec)
    this = s.StableSpec(generation=generation, spec=submitted.raw)
    if stable is None or (ready and driver_hash == want):
        # First start, or the driver serves this spec's configuration: this spec is stable now.
        if not (ready and driver_hash == want):
            return Assessment(None, None, None, None)
        # Any recorded upgrade ends here, announced once (the next status has none). One declared
        # failed may still end so: its driver came ready after upgradeTimeout, before the last
        # stable spec replaced it, and the UpgradeFailed it reported clears.
        event = None
        if upgrade:
            late = upgrade.phase == "Failed" and upgrade.generation == generation
            event = ("Upgraded", f"the job runs generation {generation}'s configuration"
                     + (" (ready after upgradeTimeout, once reported failed)" if late else ""))
        return Assessment(None, this, None, event)
    if _hash(name, namespace, s.ModelServingSpec.model_validate(stable.spec)) == want:
        # Nothing to upgrade (a model, replicas or description change): the same configuration.
        return Assessment(None, this if ready else stable, None, None)
    if upgrade is None or upgrade.generation != generation:
        upgrade = s.UpgradeStatus(generation=generation, phase="Upgrading", startedAt=clock.text(now),
                                  message=f"rolling the driver to generation {generation}'s configuration")
        return Assessment(None, stable, upgrade, None)
    if upgrade.phase == "Failed":
        return Assessment(stable.spec, stable, upgrade, None)
    if time_left(spec.upgrade_timeout, upgrade, now) < 0:
        failed = upgrade.model_copy(update={"phase": "Failed", "message": (
            f"generation {generation} was not ready within upgradeTimeout {spec.upgrade_timeout}: "
            f"running the last stable spec (generation {stable.generation}) until the spec changes")})
        return Assessment(stable.spec, stable, failed, ("UpgradeRolledBack", failed.message))
    return Assessment(None, stable, upgrade, None)


def time_left(upgrade_timeout: str, upgrade: s.UpgradeStatus | None, now: float) -> float | None:
    """Seconds until the upgrade in flight is past its upgradeTimeout (assess then fails it), or
    None where none is in flight."""
    if upgrade is None or upgrade.phase != "Upgrading":
        return None
    return clock.seconds(upgrade.started_at) + duration_seconds(upgrade_timeout) - now
