"""The README and the documentation site: built with no broken links, the reference current, the
README short and for a user, its manifest the example's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from scorestream.operator import reference

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
MKDOCS = Path(sys.executable).parent / "mkdocs"


def test_the_site_builds_strict_with_no_broken_links(tmp_path):
    # strict: any warning (a link to a missing page or anchor, a page left out of nav) fails the build.
    done = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1",
                                                                            "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "modelserving" / "index.html").exists()


def test_the_modelserving_reference_is_generated_from_the_current_crd():
    assert reference.PAGE.read_text() == reference.render(), \
        "docs/reference/modelserving.md is stale: python -m scorestream.operator.reference --write"


def test_readme_is_short_and_for_a_user():
    assert len(README.splitlines()) <= 200
    for pattern in (r"\bnotes? \d+", r"the report\b", r"\b20\d\d-\d\d-\d\d\b", r"issue #\d+", r"ARCHITECTURE\.md",
                    r"this session"):
        assert not re.search(pattern, README, re.I), pattern
    for needed in ("make demo", "make test", "kind: ModelServing", "helm install", "skopeo copy"):
        assert needed in README


def test_readme_links_point_at_files_that_exist():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if "://" not in target:
            assert (REPO / target).exists(), target


def test_docs_cite_no_notes_or_report():
    for page in [*(REPO / "docs").rglob("*.md"), REPO / "benchmarks" / "RESULTS.md", REPO / "CHANGELOG.md"]:
        text = page.read_text()
        for pattern in (r"\b[Nn]otes? \d+\b", r"\bthe report\b", r"ARCHITECTURE\.md"):
            assert not re.search(pattern, text), f"{page.relative_to(REPO)}: {pattern}"


def test_readme_manifest_is_the_example_without_an_image():
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", README, re.S) if "kind: ModelServing" in b)
    shown = yaml.safe_load(block)
    example = yaml.safe_load((REPO / "examples" / "wine-pmml.yaml").read_text())
    del example["spec"]["spark"]["image"]
    assert shown == example


def test_docs_name_no_chart_repository_that_does_not_exist():
    text = (REPO / "docs" / "upgrading-the-crd.md").read_text()
    assert "oci-or-repo" not in text
    assert "dist/scorestream-" in text
