"""The scorer's jar as a Make target: `make setup`, `make demo` and the test tiers build it again
when the pom or a main Java source changes, and only then; the image's build stage builds it the
same way from the sources alone. Make's dry run (`make -n`, `-W` to take a file as changed) says
what would run; nothing is built here."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from scorestream.runtime import jvm

REPO = Path(__file__).resolve().parents[1]
SOURCE = next((jvm.MODULE / "src" / "main" / "java").rglob("*.java"))
TEST_SOURCE = next((jvm.MODULE / "src" / "test" / "java").rglob("*.java"))


@pytest.fixture
def built(tmp_path):
    """Make's variables for stamps of our own, in the state after a `make setup`: the packages
    installed, then the jar built (newer than every input); the checkout's own stamps untouched."""
    later = time.time() + 3600  # newer than any source, whatever a checkout's times are
    stamps = {"DEMO_STAMP": tmp_path / "setup-demo", "STAMP": tmp_path / "setup", "SCORER_JAR": tmp_path / "jar"}
    for i, path in enumerate(stamps.values()):
        path.touch()
        os.utime(path, (later + i, later + i))
    os.utime(stamps["SCORER_JAR"], (later + 10, later + 10))
    return [f"{k}={v}" for k, v in stamps.items()]


def dry_run(variables: list[str], target: str, *changed: Path) -> str:
    what_if = [f"-W{p.relative_to(REPO)}" for p in changed]
    res = subprocess.run(["make", "-n", "--no-print-directory", *what_if, *variables, target], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.mark.parametrize("target", ["setup", "setup-demo", "demo", "test-quick"])
def test_a_changed_java_source_builds_the_jar_again(built, target):
    assert jvm.BUILD_COMMAND in dry_run(built, target, SOURCE)
    assert jvm.BUILD_COMMAND in dry_run(built, target, jvm.POM)


def test_nothing_changed_builds_nothing(built):
    assert jvm.BUILD_COMMAND not in dry_run(built, "setup")
    # The JUnit tests are not what the jar is made of: the test tiers run them (test_jvm_build.py).
    assert jvm.BUILD_COMMAND not in dry_run(built, "setup", TEST_SOURCE)


def test_a_source_added_or_removed_builds_again(built):
    """Its folder's time moves: a source gone changes the jar's digest as much as an edit does."""
    assert jvm.BUILD_COMMAND in dry_run(built, "setup", SOURCE.parent)


def test_new_packages_build_again(built, tmp_path):
    """PMML4S comes in pypmml's wheel: an install after the build builds again."""
    os.utime(tmp_path / "setup-demo", (time.time() + 7200,) * 2)
    assert jvm.BUILD_COMMAND in dry_run(built, "setup")


def test_the_image_builds_the_jar_from_the_sources_alone():
    """The scorer stage runs the command make does, on a build context without Maven's target/
    (no jar or build mark of the developer's machine can stand in for a build)."""
    dockerfile = (REPO / "Dockerfile").read_text()
    scorer = dockerfile.split("AS scorer", 1)[1].split("\nFROM ", 1)[0]
    assert re.search(rf"^\s+{re.escape(jvm.BUILD_COMMAND)}\b", scorer, re.M)
    assert "runtime/jvm/target/" in (REPO / ".dockerignore").read_text().splitlines()
    makefile = (REPO / "Makefile").read_text()
    assert re.search(rf"^\t\$\(BIN\)/{re.escape(jvm.BUILD_COMMAND)}$", makefile, re.M)
