"""The kubectl plugin (`kubectl scorestream`) as a self-contained archive, and its krew manifest.

    python hack/plugin.py [--out dist] [--base-url URL]   # make plugin; make dist runs it too

Why a tarball of a vendored site folder and a launcher, not a zipapp: the plugin imports compiled
modules (pydantic-core, PyYAML's, aiohttp's through the Kubernetes client) that Python cannot
import from inside a zip. shiv and pex get round that by unpacking into the user's home on first
run (~/.shiv, ~/.pex): a second copy, written by a kubectl plugin, outside krew's bookkeeping.
krew unpacks the archive it installs anyway, so the unpacked form is what ships: nothing is
written at run time, and `kubectl krew uninstall` removes all of it.

The archive's files, at its root (krew's default `files`: everything):
  kubectl-scorestream      krew's `bin`: a POSIX sh launcher that finds a python3 of the version
                           the compiled modules were built for and runs kubectl_scorestream.py
  kubectl_scorestream.py   puts lib/ first on sys.path and calls scorestream.tools.kubectl_plugin.main
  lib/                     scorestream and the plugin's dependencies (pip install --target,
                           pinned by requirements.lock)
Python runs isolated (-I -S): no PYTHON* variables, no user or system site-packages, so what
else is installed on the machine does not change what the plugin imports.

Only the platform it is built on (linux/amd64 here): compiled wheels are per platform.
The manifest's `uri` is where the archive will be published (--base-url); until then it is
installed from the file: `kubectl krew install --manifest=scorestream.yaml --archive=<archive>`.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
NAME = "scorestream"
# What kubectl_plugin imports beyond scorestream's own modules (their dependencies come with them).
REQUIREMENTS = ["pydantic", "PyYAML", "protobuf", "kubernetes"]
DEFAULT_BASE_URL = "https://downloads.example.invalid/scorestream"  # replaced by the release's --base-url

LAUNCHER = """#!/bin/sh
# The scorestream kubectl plugin, run from the folder krew unpacked it into (krew links to this file).
here=$(dirname "$(readlink -f "$0")")
want={python}
for py in "python$want" python3; do
  if command -v "$py" >/dev/null 2>&1 && \\
     [ "$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$want" ]; then
    exec "$py" -I -S "$here/kubectl_scorestream.py" "$@"
  fi
done
echo "error: kubectl-scorestream needs Python $want (python$want or python3 on PATH): its compiled modules are built for it" >&2
exit 1
"""

ENTRY = """import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "lib"))
from scorestream.tools.kubectl_plugin import main  # noqa: E402

sys.exit(main())
"""


def version() -> str:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def platform_labels() -> dict[str, str]:
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return {"os": sys.platform, "arch": arch}


def _pip(*args: str) -> None:
    res = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"pip install {' '.join(args)} failed:\n{res.stderr[-3000:]}")


def _locked(requirements: Path) -> list[str]:
    """The lock's lines, hashes included, of everything `requirements` resolves to under the lock's
    pins (runtime/docker/requirements.py, which the images' builds use): an error when the
    lock does not pin one of them, or pins it without a hash."""
    sys.path.insert(0, str(REPO / "runtime" / "docker"))
    try:
        import requirements as lock_tool
    finally:
        sys.path.pop(0)
    return lock_tool.hashed(str(REPO / "requirements.lock"), str(requirements))


def _tar_filter(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    if "__pycache__" in info.name or info.name.endswith(".pyc"):
        return None  # compiled where it runs, by the Python that runs it
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0  # the same sources give the same archive
    return info


def build(out: Path, base_url: str = DEFAULT_BASE_URL) -> tuple[Path, Path]:
    """The archive and its krew manifest, in `out`."""
    v = version()
    labels = platform_labels()
    python = "%d.%d" % sys.version_info[:2]
    with tempfile.TemporaryDirectory(prefix="scorestream-plugin-") as tmp:
        root = Path(tmp) / "root"
        lib = root / "lib"
        lib.mkdir(parents=True)
        # The dependencies as the images install theirs: every package the resolution needs, at the
        # lock's pin, each file checked against the lock's hashes (--require-hashes). The archive
        # ships what it installs, so a file swapped on the index would reach every user's machine.
        wanted = Path(tmp) / "requirements.txt"
        wanted.write_text("\n".join(REQUIREMENTS) + "\n")
        hashed = Path(tmp) / "hashed.txt"
        hashed.write_text("\n".join(_locked(wanted)) + "\n")
        _pip("--target", str(lib), "--no-compile", "--only-binary=:all:", "--require-hashes", "--no-deps",
             "-r", str(hashed))
        # The project's own source, from this checkout (pip cannot hash a directory).
        _pip("--target", str(lib), "--no-compile", "--no-deps", str(REPO))
        shutil.rmtree(lib / "bin", ignore_errors=True)  # console scripts pointing at this build's Python
        (root / "kubectl-scorestream").write_text(LAUNCHER.format(python=python))
        (root / "kubectl-scorestream").chmod(0o755)
        (root / "kubectl_scorestream.py").write_text(ENTRY)
        shutil.copyfile(REPO / "LICENSE", root / "LICENSE") if (REPO / "LICENSE").exists() else None
        out.mkdir(parents=True, exist_ok=True)
        archive = out / f"kubectl-{NAME}-v{v}-{labels['os']}-{labels['arch']}.tar.gz"
        buf = io.BytesIO()
        # gzip's default level: 9 takes twice the time (8 s against 3.5 s here, the slowest step of
        # the build, which the tests run) for an archive 1.6% smaller.
        with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as t:
            for path in sorted(root.rglob("*")):
                t.add(path, arcname=str(path.relative_to(root)), recursive=False, filter=_tar_filter)
        archive.write_bytes(buf.getvalue())
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    manifest = {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": NAME},
        "spec": {
            "version": f"v{v}",
            "shortDescription": "Status, rollouts and scaling of scorestream's ModelServings",
            "description": "kubectl scorestream: list ModelServings, show a resource's status and its job's figures,\n"
                           "suspend, resume, restart, promote or roll back a model. Needs Python "
                           f"{python} on PATH\n(the archive vendors its compiled dependencies for it).\n",
            "caveats": f"Needs python{python} (or a python3 of that version) on PATH.\n",
            "platforms": [{
                "selector": {"matchLabels": labels},
                "uri": f"{base_url.rstrip('/')}/v{v}/{archive.name}",
                "sha256": digest,
                "bin": "kubectl-scorestream",
            }],
        },
    }
    path = out / f"{NAME}.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return archive, path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python hack/plugin.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "dist", help="where to write them (dist/)")
    ap.add_argument("--base-url", default=os.environ.get("PLUGIN_BASE_URL", DEFAULT_BASE_URL),
                    help="where the release's archives are published: the manifest's uri is <URL>/v<version>/<archive>")
    args = ap.parse_args(argv)
    for f in build(args.out, args.base_url):
        print(f"{f.stat().st_size / 1024 / 1024:6.1f} MiB  {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
