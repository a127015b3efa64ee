"""A test run killed midway leaves its brokers, control planes and jobs running (reparented to
init); the next run stops them, and only them (tests/harness/orphans.py)."""

from __future__ import annotations

import os
import subprocess
import time

from harness import orphans


def _started_by(owner: int) -> subprocess.Popen:
    """A long-running process as a test process `owner` would have started it."""
    return subprocess.Popen(["sleep", "600"], env={**os.environ, orphans.OWNER_ENV: str(owner)},
                            start_new_session=True)


def test_a_killed_runs_processes_are_stopped_and_a_live_runs_are_not():
    orphan, ours = _started_by(orphans.no_such_pid()), _started_by(os.getpid())
    try:
        killed = orphans.sweep()
        assert any(k.startswith(f"{orphan.pid} sleep 600") for k in killed), killed
        assert orphan.wait(10) == -9
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
