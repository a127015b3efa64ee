"""The README's demo command works end to end and leaves no process behind."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def _orphans(pattern: str) -> set[str]:
    """Processes matching ``pattern`` whose parent is gone (adopted by pid 1): what a demo that
    exited would leave behind. Brokers and jobs of tests running beside this one have parents."""
    res = subprocess.run(["pgrep", "-P", "1", "-f", pattern], capture_output=True, text=True)
    return set(res.stdout.split())


def test_demo_runs_swaps_models_and_cleans_up(tmp_path):
    before = _orphans("kafka.Kafka") | _orphans("scorestream.runtime")
    res = subprocess.run(
        [sys.executable, "-m", "scorestream.tools.cli", "demo", "--records", "6000", "--rate", "1500", "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    out = res.stdout
    assert res.returncode == 0, out[-3000:] + res.stderr[-3000:]
    assert "published wine-linear:2 (pmml)" in out and "published wine-keras:3 (tensorflow)" in out
    totals = re.search(r"records in (\d+), out (\d+), dead-lettered (\d+) \(malformed injected: (\d+)\)", out)
    assert totals, out[-2000:]
    records_in, records_out, dead, malformed = map(int, totals.groups())
    assert records_out == 6000 and dead == malformed > 0 and records_in == records_out + dead
    assert "job exit code 0" in out and "memory (peak RSS)" in out
    after = _orphans("kafka.Kafka") | _orphans("scorestream.runtime")
    assert after <= before, "the demo left a broker or a job running"
