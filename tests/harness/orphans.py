"""What a killed test run leaves running, found and stopped by the next run.

Each test process (each xdist worker) puts its pid in its environment at the session's start, so
every process it starts (brokers, control planes, jobs, their JVMs and Python workers, the real
node's daemons) carries it. A process that carries the pid of a test process that is gone is an
orphan of a run killed midway, reparented to init: the next session kills it. A live run's
processes carry a live pid and are left alone; a reused pid only leaves an orphan for later.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

from scorestream.tools.local.owner import OWNER_ENV, OWNER_FILE
from scorestream.tools.local.owner import mark_folder as mark_folder  # the harness's name for it too

# The folders under the temporary directory that carry it, and go with a killed run.
SWEPT_FOLDERS = ("scorestream-kube-", "scorestream-kafka-", "scorestream-kraft-")


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


def no_such_pid() -> int:
    """A pid no process has or can get: a gone owner, for the tests of the sweeps. (An ended
    process's pid may be reused at once: a loaded machine's JVMs start threads by the thousand,
    and each takes a pid from the same space.)"""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


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


def folder_owner_alive(folder: Path) -> bool:
    try:
        return alive(int((folder / OWNER_FILE).read_text()))
    except (OSError, ValueError):
        return False


def sweep_folders(root: Path | None = None) -> list[str]:
    """Remove the marked folders whose test process is gone (call it after `sweep`, which stops
    the processes that used them). Unmarked folders are not this harness's to judge."""
    removed = []
    for folder in (root or Path(tempfile.gettempdir())).iterdir():
        if folder.name.startswith(SWEPT_FOLDERS) and (folder / OWNER_FILE).exists() and not folder_owner_alive(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed
