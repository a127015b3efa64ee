"""moto's S3 server for tests/test_object_stores.py, in a virtualenv of its own.

moto needs boto3 and botocore, and botocore pins python-dateutil below 3 while the operator's
Kubernetes client (kubernetes 37) needs 3 or later: the two cannot share the project's environment.
The server is a process of its own anyway, so it gets its own environment, pinned by moto.lock
beside this file, built once per pin set into the tests' cache (`make setup` runs this file).

    python tests/servers/moto_env.py      # prints the moto_server path
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK = HERE / "moto.lock"
CACHE = Path(os.environ.get("SCORESTREAM_CACHE", Path.home() / ".cache" / "scorestream")) / "moto"


def ensure() -> Path:
    """The moto_server of an environment installed from moto.lock (made when missing)."""
    digest = hashlib.sha256(LOCK.read_bytes() + sys.version.encode()).hexdigest()[:12]
    venv = CACHE / f"venv-{digest}"
    server = venv / "bin" / "moto_server"
    done = venv / ".installed"
    if done.is_file() and server.is_file():
        return server
    subprocess.run(["rm", "-rf", str(venv)], check=True)  # a half-made one from an interrupted run
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # Not from the repository's root, where `operator/` would shadow the standard library's module.
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    subprocess.run([*pip, "install", "-q", "--no-deps", "-r", str(LOCK)], check=True, cwd=venv)
    subprocess.run([*pip, "check"], check=True, capture_output=True, cwd=venv)
    done.touch()
    return server


if __name__ == "__main__":
    print(ensure())
