"""Which process a scratch folder belongs to, so that a run killed midway leaves nothing the next
one cannot remove (the tests' harness/orphans.py sweeps what it finds)."""

from __future__ import annotations

import os
from pathlib import Path

# Set by a test process at its start and inherited by all it starts: that process's pid.
OWNER_ENV = "SCORESTREAM_TEST_OWNER"
# In a folder a process made (a control plane's, a broker's, a node's): its owner's pid.
OWNER_FILE = "owner.pid"


def mark_folder(folder: Path) -> None:
    """`folder` belongs to this process (or to the test process that started it): once that process
    is gone, the next test session removes the folder."""
    (folder / OWNER_FILE).write_text(os.environ.get(OWNER_ENV) or str(os.getpid()))
