"""A test run killed midway leaves its brokers, control planes and jobs running (reparented to
init); the next run stops them, and only them (tests/harness/orphans.py)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from harness import orphans
from harness.netns import OWNER_ALIAS, OwnHost, Unavailable, sweep_stale


def _started_by(owner: int) -> subprocess.Popen:
    """A long-running process as a test process `owner` would have started it."""
    return subprocess.Popen(["sleep", "600"], env={**os.environ, orphans.OWNER_ENV: str(owner)},
                            start_new_session=True)


def test_a_killed_runs_processes_are_stopped_and_a_live_runs_are_not():
    orphan, ours = _started_by(orphans.no_such_pid()), _started_by(os.getpid())
    try:
        killed = orphans.sweep()
        # Stopped by this sweep, or by another test process's at its session's start (xdist's
        # other worker sweeps too, and the orphan is every live run's to stop).
        assert orphan.wait(10) == -9, killed
        time.sleep(0.2)
        assert ours.poll() is None, "a live run's process was stopped"
        assert orphans.owner_of(ours.pid) == os.getpid()
    finally:
        for p in (orphan, ours):
            p.kill()
            p.wait()


def test_a_killed_runs_folders_are_removed_and_a_live_runs_and_unmarked_ones_are_not(tmp_path):
    gone, ours, unmarked = (tmp_path / f"scorestream-kube-{n}" for n in ("gone", "ours", "unmarked"))
    for folder in (gone, ours, unmarked):
        folder.mkdir()
    (gone / orphans.OWNER_FILE).write_text(str(orphans.no_such_pid()))
    orphans.mark_folder(ours)
    assert orphans.sweep_folders(tmp_path) == [str(gone)]
    assert not gone.exists() and ours.exists() and unmarked.exists()


def test_a_killed_runs_test_hosts_are_removed_and_a_live_runs_are_not():
    """Test hosts (harness/netns.py: a namespace and a veth pair) carry their test process's pid."""
    try:
        left, ours = OwnHost.make(), OwnHost.make()
    except Unavailable as e:
        pytest.skip(str(e))
    try:
        subprocess.run(["ip", "link", "set", f"{left.name}-a", "alias",
                        f"{OWNER_ALIAS}{orphans.no_such_pid()}"], check=True)
        assert left.name in sweep_stale()
        assert not os.path.exists(f"/run/netns/{left.name}") and not os.path.exists(f"/sys/class/net/{left.name}-a")
        assert os.path.exists(f"/sys/class/net/{ours.name}-a"), "a live run's test host was removed"
    finally:
        left.remove()
        ours.remove()
