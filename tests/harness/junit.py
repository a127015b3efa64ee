"""The JVM scorer's JUnit tests, run by Maven in its module: one run at a time on this machine,
since every run writes the module's target/ (classes, surefire's reports), and test files of
different pytest workers run them (tests/test_jvm_build.py, tests/test_broker.py)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import xml.etree.ElementTree as ET

from scorestream.runtime import jvm

REPORT_PREFIX = "TEST-dev.scorestream.jvm."


def run(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    """``mvn -o test ARGS`` on the module (make setup's build has cached every plugin and
    dependency) with ``env`` added, and surefire's reports' attributes by test class ("Records" for
    RecordsTest), read before another run may write them."""
    target = jvm.MODULE / "target"
    target.mkdir(exist_ok=True)
    with open(target / "junit.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        res = subprocess.run(["mvn", "-o", "-B", "-q", "-f", str(jvm.POM), "test", *args], capture_output=True,
                             text=True, env={**os.environ, **(env or {})})
        reports = {r.name.removeprefix(REPORT_PREFIX).removesuffix("Test.xml"): ET.parse(r).getroot().attrib
                   for r in (target / "surefire-reports").glob(f"{REPORT_PREFIX}*.xml")}
    return res, reports
