"""The kubectl plugin as users get it through krew: `make plugin`'s archive and manifest
(hack/plugin.py), installed by the real krew binary into an empty KREW_ROOT (from the file, with
no network at all: krew runs in a network namespace of its own where root can make one), then
`kubectl-scorestream version` and `list` run from there against the tests' real API server, with
a PATH of nothing but a Python of the version the archive was built for and the system's tools:
none of this virtualenv's packages can be reached."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness import krew
from harness.operator import EXAMPLE, MS

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "hack"))
import plugin  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return plugin.build(tmp_path_factory.mktemp("dist"))


@pytest.mark.index  # the archive's lib/ is installed from the package index
def test_the_manifest_is_krew_s_and_names_the_archive_by_its_digest(built):
    archive, manifest_path = built
    manifest = yaml.safe_load(manifest_path.read_text())
    assert (manifest["apiVersion"], manifest["kind"]) == ("krew.googlecontainertools.github.com/v1alpha2", "Plugin")
    (platform,) = manifest["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["bin"] == "kubectl-scorestream" and platform["uri"].endswith(archive.name)
    assert platform["selector"]["matchLabels"] == {"os": "linux", "arch": "amd64"}


def test_krew_installs_it_into_an_empty_root_and_it_runs_against_the_api_server(built, api, tmp_path):
    archive, manifest = built
    root = tmp_path / "krew-root"
    root.mkdir()
    # Only a Python of the archive's version, and the system's sh, readlink and dirname.
    pybin, tools = tmp_path / "python-only", tmp_path / "tools"
    for d in (pybin, tools):
        d.mkdir()
    (pybin / f"python{sys.version_info[0]}.{sys.version_info[1]}").symlink_to(os.path.realpath(sys.executable))
    for tool in ("sh", "readlink", "dirname"):
        (tools / tool).symlink_to(shutil.which(tool))
    env = {"PATH": f"{pybin}:{tools}", "HOME": str(tmp_path), "KREW_ROOT": str(root), "KREW_NO_UPGRADE_CHECK": "1"}
    no_network = [shutil.which("unshare"), "--net"] if os.geteuid() == 0 and shutil.which("unshare") else []
    done = subprocess.run([*no_network, str(krew.ensure()), "install", f"--manifest={manifest}",
                           f"--archive={archive}"], env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert "Installed plugin: scorestream" in done.stderr + done.stdout
    installed = root / "bin" / "kubectl-scorestream"
    assert installed.is_symlink() and installed.resolve().is_relative_to(root / "store" / "scorestream")

    version = subprocess.run([str(installed), "version"], env=env, capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("kubectl-scorestream 0."), version

    body = {**EXAMPLE, "metadata": {"name": "wine", "namespace": api.ns}}
    api.create(MS, body)
    listed = subprocess.run([str(installed), "list", "-n", api.ns, "--kubeconfig", str(api.cluster.admin_config)],
                            env=env, capture_output=True, text=True, timeout=60)
    print(f"\n{listed.stdout}")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["wine"]

    # A machine without that Python: one line that says what is missing, not a traceback.
    env["PATH"] = str(tools)
    bare = subprocess.run([str(installed), "version"], env=env, capture_output=True, text=True, timeout=60)
    assert bare.returncode == 1 and bare.stderr.startswith("error: kubectl-scorestream needs Python")
