"""The real krew (sigs.k8s.io/krew, pinned), built from its Go module for the plugin's install test.

Built once next to the virtualenv by `make setup` (`go install`, through the machine's Go module
proxy); the test calls `ensure()`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

MODULE = "sigs.k8s.io/krew/cmd/krew"
VERSION = "v0.4.3"
DIR = Path(os.environ.get("SCORESTREAM_KREW_DIR", Path(__file__).resolve().parents[2] / ".venv" / f"krew-{VERSION}"))


class KrewUnavailable(RuntimeError):
    pass


def ensure() -> Path:
    target = DIR / "krew"
    if target.is_file():
        return target
    go = shutil.which("go")
    if go is None:
        raise KrewUnavailable("go not found: `make setup` installs it (Debian: golang-go), to build krew")
    DIR.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([go, "install", f"{MODULE}@{VERSION}"], capture_output=True, text=True,
                         env={**os.environ, "GOBIN": str(DIR), "CGO_ENABLED": "0"})
    if res.returncode != 0:
        raise KrewUnavailable(f"go install {MODULE}@{VERSION} failed:\n{res.stderr[-2000:]}")
    return target


if __name__ == "__main__":
    print(ensure())
    sys.exit(0)
