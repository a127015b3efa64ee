"""CPU time a peer's processes used, read from /proc: in all, and by what its threads do.

On 2 cores a short run's rate says as much about the JIT as about the peer: HotSpot's compiler
threads compile for tens of seconds after start and take the cores the work would use. CPU per
record, and where it went (compiling, the records themselves, a micro-batch's driver, Kafka's
client I/O threads, the garbage collector), say why one peer's rate is what it is, and move less
between runs than the rates do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from scorestream.tools.local.rss import process_tree

TICK = os.sysconf("SC_CLK_TCK")
# Threads by the names HotSpot, Spark and Kafka's clients give them (15 characters reach /proc's
# comm). Threads that ended took their counts with them, so each kind is a floor; what no live
# thread of a kind holds (the records' threads, Kafka Streams' stream threads, Python workers,
# children reaped) is "records".
KINDS = {
    "JIT": ("C1 CompilerThre", "C2 CompilerThre"),
    "GC": ("GC Thread", "G1 ", "VM Thread", "VM Periodic Tas"),
    "Kafka I/O": ("kafka-producer-", "kafka-coordinat", "kafka-admin-cli"),
    # A micro-batch's driver: the query's own thread (offsets, planning, the batch's write), the
    # scheduler's, py4j's (Thread-N) and the Python driver process itself.
    "driver": ("stream executio", "dag-scheduler-e", "spark-listener-", "dispatcher-even", "Thread-"),
}
RECORDS = "records"


@dataclass(frozen=True)
class Cpu:
    total: float  # seconds: every process of the tree, with the children it has reaped
    kinds: dict[str, float] = field(default_factory=dict)  # seconds in live threads of each of KINDS

    @property
    def jit(self) -> float:
        return self.kinds.get("JIT", 0.0)

    def by_kind(self) -> dict[str, float]:
        """Seconds of each kind, ``records`` being the rest of ``total``."""
        return {RECORDS: self.total - sum(self.kinds.values()), **self.kinds}

    def __sub__(self, other: "Cpu") -> "Cpu":
        return Cpu(self.total - other.total,
                   {k: v - other.kinds.get(k, 0.0) for k, v in self.kinds.items()})


def _stat_fields(path: Path) -> list[str]:
    text = path.read_text()
    return text[text.rindex(")") + 2:].split()  # after "pid (comm) ", which may hold spaces


def kind_of(thread: str) -> str | None:
    return next((k for k, prefixes in KINDS.items() if thread.startswith(prefixes)), None)


def sample(root: int) -> Cpu:
    """The CPU used so far by ``root`` and its descendants (0 for processes already gone)."""
    total = 0
    kinds = dict.fromkeys(KINDS, 0)
    for pid in process_tree(root):
        proc = Path(f"/proc/{pid}")
        try:
            f = _stat_fields(proc / "stat")
            ticks = sum(int(x) for x in f[11:15])  # utime, stime, cutime, cstime
            total += ticks
            if pid == root and (proc / "comm").read_text().startswith("python"):
                kinds["driver"] += ticks  # the job's Python driver (a Python worker is records' work)
                continue
            for task in (proc / "task").iterdir():
                kind = kind_of((task / "comm").read_text())
                if kind is not None:
                    f = _stat_fields(task / "stat")
                    kinds[kind] += int(f[11]) + int(f[12])
        except (OSError, ValueError, IndexError):
            continue
    return Cpu(total / TICK, {k: v / TICK for k, v in kinds.items()})
