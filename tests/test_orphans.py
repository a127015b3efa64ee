"""A test run killed midway leaves its brokers, control planes and jobs running (reparented to
init); the next run stops them, and only them (tests/harness/orphans.py)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from harness import orphans


def _started_by(owner: int) -> subprocess.Popen:
    """A long-running process as a test process `owner` would have started it."""
    return subprocess.Popen(["sleep", "600"], env={**os.environ, orphans.OWNER_ENV: str(owner)},
                            start_new_session=True)


def _no_process() -> int:
    """A pid no process has or can get: the owner of an orphan. (The pid of an ended process
    could be reused at once: a loaded machine's JVMs start threads by the thousand, and each takes
    a pid from the same space.)"""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def test_a_killed_runs_processes_are_stopped_and_a_live_runs_are_not():
    orphan, ours = _started_by(_no_process()), _started_by(os.getpid())
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
