"""Peak resident memory of a process tree, sampled from /proc (Linux): driver, JVM, Python workers."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants alive now."""
    out, todo, seen = [], [root], set()
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            out.append(pid)
            todo += _children(pid)
    return out


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _kind(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "java" in cmd.split(" ", 1)[0]:
        return "jvm"
    if "pyspark.daemon" in cmd or "pyspark/daemon" in cmd or "pyspark.worker" in cmd:
        return "python-worker"
    if "scorestream.runtime" in cmd:
        return "driver-python"
    return "python-worker" if "python" in cmd else "other"


class ProcessTreeMemory:
    """Samples every 0.5 s; peaks per kind of process (the largest single process of each kind)."""

    def __init__(self, root: int, interval: float = 0.5):
        self.root = root
        self.interval = interval
        self.peaks: dict[str, float] = {}
        self.total_peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-sampler")

    def start(self) -> "ProcessTreeMemory":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        total = 0.0
        for pid in process_tree(self.root):
            rss = _rss_mb(pid)
            if rss is not None:
                kind = _kind(pid)
                self.peaks[kind] = max(self.peaks.get(kind, 0.0), rss)
                total += rss
        self.total_peak = max(self.total_peak, total)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)

    def peaks_mb(self) -> dict[str, float]:
        return {**{k: round(v) for k, v in sorted(self.peaks.items())}, "whole-tree": round(self.total_peak)}


if os.name != "posix":  # pragma: no cover
    raise ImportError("rss sampling reads /proc")
