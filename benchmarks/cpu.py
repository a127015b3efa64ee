"""CPU time a peer's processes used, read from /proc: in all, and in the JVM's JIT compiler threads.

On 2 cores a short run's rate says as much about the JIT as about the peer: HotSpot's compiler
threads compile for tens of seconds after start and take the cores the work would use. CPU per
record, and the share of it that went to compiling, say why one peer's rate is what it is, and
move less between runs than the rates do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from scorestream.demo.rss import process_tree

TICK = os.sysconf("SC_CLK_TCK")
# HotSpot names its compiler threads "C1 CompilerThread0", "C2 CompilerThread0", ... (15 characters
# reach /proc's comm). Threads it retires take their counts with them: the JIT figure is a floor.
JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")


@dataclass(frozen=True)
class Cpu:
    total: float  # seconds: every process of the tree, with the children it has reaped
    jit: float  # seconds in live JIT compiler threads

    def __sub__(self, other: "Cpu") -> "Cpu":
        return Cpu(self.total - other.total, self.jit - other.jit)


def _stat_fields(path: Path) -> list[str]:
    text = path.read_text()
    return text[text.rindex(")") + 2:].split()  # after "pid (comm) ", which may hold spaces


def sample(root: int) -> Cpu:
    """The CPU used so far by ``root`` and its descendants (0 for processes already gone)."""
    total = jit = 0
    for pid in process_tree(root):
        proc = Path(f"/proc/{pid}")
        try:
            f = _stat_fields(proc / "stat")
            total += sum(int(x) for x in f[11:15])  # utime, stime, cutime, cstime
            for task in (proc / "task").iterdir():
                if (task / "comm").read_text().startswith(JIT_THREADS):
                    f = _stat_fields(task / "stat")
                    jit += int(f[11]) + int(f[12])
        except (OSError, ValueError, IndexError):
            continue
    return Cpu(total / TICK, jit / TICK)
