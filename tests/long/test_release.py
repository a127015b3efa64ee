"""`make dist` as a release writes it (`make test-release`; outside `make test`: it builds syft
and scans gigabytes of images): every file in SHA256SUMS and `sha256sum -c` passing, a CycloneDX
SBOM of each image that lists what the image is known to hold, the chart and the plugin's krew
manifest of this version. Printed: the files with their sizes and each SBOM's component count."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile

import pytest
import yaml

import images  # hack/images.py
import release  # hack/release.py

pytestmark = [pytest.mark.node,
              pytest.mark.skipif(shutil.which("buildah") is None or os.geteuid() != 0,
                                 reason="needs root and buildah (`make node-packages`) to build the images")]

# What each image must be seen to hold: Python packages the SBOM finds in its site-packages, and
# the TensorFlow flavour's Java jars (ADR 33: TensorFlow is scored in the scorer's JVM).
HELD = {"operator": {"kopf", "kubernetes", "pydantic", "scorestream"},
        "runtime-pmml": {"pyspark", "pypmml", "confluent-kafka", "scorestream"},
        "runtime": {"pyspark", "scorestream", "tensorflow-core-api", "tensorflow-core-native"}}
LISTED = ("pkg:pypi/", "pkg:maven/")


@pytest.mark.timeout(3600)  # the images are built where their inputs changed: half an hour on 2 cores
def test_dist_holds_every_file_of_a_release_with_its_checksum_and_sbom(tmp_path):
    out = tmp_path / "dist"
    files = release.dist(out)
    v = images.VERSION
    names = {f.name for f in out.iterdir()}
    assert names == {f.name for f in files} | {"SHA256SUMS"}
    assert names >= {f"scorestream-{v}.tgz", "scorestream.yaml", f"kubectl-scorestream-v{v}-linux-amd64.tar.gz",
                     *(f"{i.name}-{v}.oci.tar" for i in images.IMAGES.values()),
                     *(f"{i.name}-{v}.cdx.json" for i in images.IMAGES.values())}
    summed = {line.split("  ", 1)[1] for line in (out / "SHA256SUMS").read_text().splitlines()}
    assert summed == names - {"SHA256SUMS"}, "SHA256SUMS covers every file and nothing else"
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=out, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    print(f"\nsha256sum -c SHA256SUMS: {check.stdout.count(': OK')} files OK")

    for target, image in images.IMAGES.items():
        bom = json.loads((out / f"{image.name}-{v}.cdx.json").read_text())
        assert bom["bomFormat"] == "CycloneDX" and bom["metadata"]["component"]["name"] == image.name
        assert bom["metadata"]["component"]["version"] == v
        held = {c["name"].lower() for c in bom["components"] if c.get("purl", "").startswith(LISTED)}
        assert HELD[target] <= held, f"{image.name}'s SBOM lacks {HELD[target] - held}"
        debs = [c for c in bom["components"] if c.get("purl", "").startswith("pkg:deb/")]
        assert debs, f"{image.name}'s SBOM lists no Debian package"
        print(f"{image.name}: {len(bom['components'])} components ({len(debs)} Debian packages, {len(held)} Python or Java)")

    with tarfile.open(out / f"scorestream-{v}.tgz") as chart:
        meta = yaml.safe_load(chart.extractfile("scorestream/Chart.yaml"))
    assert meta["version"] == meta["appVersion"] == v
    manifest = yaml.safe_load((out / "scorestream.yaml").read_text())
    assert manifest["spec"]["version"] == f"v{v}"
    assert manifest["spec"]["platforms"][0]["sha256"] == images.sha256(out / f"kubectl-scorestream-v{v}-linux-amd64.tar.gz")
