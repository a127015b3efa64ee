"""Job upgrades as the driver's StatefulSet performs them (SIGTERM, the batch completes, a new
driver with the new configuration starts): last-state resumes from the checkpoint, stateless from
the data group's committed offsets with a fresh checkpoint. Records keep arriving meanwhile."""

from __future__ import annotations

import os
import time

import pytest

from scorestream.tools.demo import feed, models

from harness.streaming import Stream

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def upgrade(s, mode, failing: dict | None = None):
    """Stop a job mid-stream and start the next configuration. With `failing`, the next one never
    gets ready, and the last stable configuration starts again, as the operator rolls back."""
    s.publish(models.descriptor("tree", "1", "pmml", models.tree_pmml(feed.wine_rows())))
    first = {"upgradeMode": mode}
    second = {"upgradeMode": mode, "spark": {"triggerInterval": "1s"}}  # the change being rolled out
    if mode == "stateless":
        first["checkpointLocation"] = str(s.workdir / "ckpt" / "stateless-aaaa")
        second["checkpointLocation"] = str(s.workdir / "ckpt" / "stateless-bbbb")
    job = s.start(**first).wait_ready()
    stream = Stream(s, total=10**9, chunk=100, pause=0.1)
    stream.start()
    job.wait_records(1500)
    t0 = time.monotonic()
    assert job.stop() == 0  # SIGTERM: the batch in flight completes, its offsets are committed
    if failing:
        bad = s.start(**first, **failing)
        with pytest.raises(RuntimeError, match="job exited"):
            bad.wait_ready(timeout=120)
        second = first
    job = s.start(**second).wait_ready()
    gap = time.monotonic() - t0
    before = job.get("/stats")["totals"]["recordsIn"]
    job.wait_records(before + 1000)
    sent = stream.stop()
    assert stream.error is None
    job.wait_records(1, timeout=60)
    deadline = time.monotonic() + 120
    out = []
    while time.monotonic() < deadline:
        out = s.outputs()
        if len({o["key"] for o in out}) >= sent:
            break
        time.sleep(1)
    keys = [o["key"] for o in out]
    missing = sent - len(set(keys))
    duplicates = len(keys) - len(set(keys))
    print(f"\n{'failed upgrade rolled back' if failing else 'upgrade'} {mode}: {sent} records across the upgrade, {missing} missing, {duplicates} written twice; "
          f"driver down {gap:.1f} s")
    assert missing == 0 and not s.read("dlq", idle=1.0)
    assert job.stop() == 0
    return duplicates


@pytest.mark.timeout(600)
def test_stateless_upgrade_starts_from_the_committed_offsets_with_a_fresh_checkpoint(serving):
    s = serving(partitions=2)
    assert upgrade(s, "stateless") == 0
    # The first configuration's checkpoint is gone; the second's is there.
    assert sorted(os.listdir(s.workdir / "ckpt")) == ["stateless-bbbb"]


# Last-state: the configuration rolled back to resumes from the checkpoint, as any last-state
# upgrade does (the stop, the checkpoint and the start are the same; only the configuration differs).
@pytest.mark.timeout(600)
def test_a_failed_upgrade_rolled_back_to_the_last_stable_configuration_loses_nothing(serving):
    failing = {"input": {"format": "protobuf", "protobuf": {"messageType": "scorestream.NoSuchMessage"}}}
    assert upgrade(serving(partitions=2), "last-state", failing) == 0
