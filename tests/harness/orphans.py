"""What a killed test run leaves running, found and stopped by the next run.

Each test process (each xdist worker) puts its pid in its environment at the session's start, so
every process it starts (brokers, control planes, jobs, their JVMs and Python workers, the real
node's daemons) carries it. A process that carries the pid of a test process that is gone is an
orphan of a run killed midway, reparented to init: the next session kills it. A live run's
processes carry a live pid and are left alone; a reused pid only leaves an orphan for later.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

OWNER_ENV = "SCORESTREAM_TEST_OWNER"


def mark_this_process() -> None:
    """From now on, what this process starts carries its pid."""
    os.environ[OWNER_ENV] = str(os.getpid())


def owner_of(pid: int) -> int | None:
    """The test process whose environment `pid` was started with, if any."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = f"{OWNER_ENV}=".encode()
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            value = entry[len(prefix):].decode(errors="replace")
            return int(value) if value.isdigit() else None
    return None


def alive(pid: int) -> bool:
    """Whether process `pid` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def sweep() -> list[str]:
    """Kill every process whose test process is gone; return what was killed (pid and command)."""
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        owner = owner_of(pid)
        if owner is None or alive(owner):
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
        killed.append(f"{pid} {command[:120]}")
    return killed
