"""The Dockerfile, checked without a Docker engine: hadolint, and that it installs exactly what
`make setup` installs (same constraints file, pip, Python and JDK versions, the right extras)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = (REPO / "Dockerfile").read_text()
MAKEFILE = (REPO / "Makefile").read_text()
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def arg(name: str) -> str:
    m = re.search(rf"^ARG {name}=(\S*)$", DOCKERFILE, re.M)
    assert m, f"ARG {name} not found"
    return m.group(1).strip('"')


def test_hadolint_is_clean():
    hadolint = Path(sys.executable).parent / "hadolint"
    res = subprocess.run([str(hadolint), "--no-color", str(REPO / "Dockerfile")], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_ignored_rule_says_why():
    lines = DOCKERFILE.splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore" in line:
            # DL3008 (apt versions): Debian's security updates replace pinned versions within days;
            # the image pins its base by release, the Java major by package name.
            assert re.search(r"ignore=DL3008\b", line), line


def test_the_images_install_the_pinned_versions_of_make_setup():
    # Each image installs its extras' dependencies under the lock, then the project without deps.
    extras = re.findall(r"requirements\.py /deps/pyproject\.toml ([\w ]+?)(?: --extras-only)? >", DOCKERFILE)
    assert sorted(extras) == ["operator", "runtime", "tensorflow"], extras
    installed = re.findall(r"COPY --from=requirements /deps/(\w+)\.txt", DOCKERFILE)
    assert sorted(installed) == ["operator", "runtime", "runtime", "tensorflow"], installed
    installs = re.findall(r"pip install [^\n\\]*", DOCKERFILE)
    for line in installs:  # nothing unpinned sneaks in
        assert ('"pip==${PIP_VERSION}"' in line or "-c /deps/requirements.lock -r /deps/requirements.txt" in line
                or "--no-deps /src" in line or "--no-deps -e /src" in line), line
    assert "-c requirements.lock" in MAKEFILE
    dev = " ".join(PYPROJECT["project"]["optional-dependencies"]["dev"])
    assert all(e in dev for e in set(extras)), "make setup installs every extra the images install"
    pip = re.search(r"pip==(\S+)", MAKEFILE).group(1)
    assert arg("PIP_VERSION") == pip
    assert f"openjdk-{arg('JDK_PACKAGE').split('-')[1]}-jdk-headless" in MAKEFILE
    assert arg("JRE_PACKAGE").split("-")[1] == arg("JDK_PACKAGE").split("-")[1]
    assert arg("PYTHON_VERSION") == f"{sys.version_info.major}.{sys.version_info.minor}", \
        "the images run the Python the tests run"


def test_the_lock_pins_every_declared_dependency_at_its_declared_version():
    lock = dict(line.split("==", 1) for line in (REPO / "requirements.lock").read_text().splitlines()
                if line and not line.startswith("#"))
    def norm(name):  # PEP 503
        return re.sub(r"[-_.]+", "-", name).lower()

    lock = {norm(k): v for k, v in lock.items()}
    declared = list(PYPROJECT["project"]["dependencies"])
    for name, deps in PYPROJECT["project"]["optional-dependencies"].items():
        declared += [d for d in deps if not d.startswith("scorestream[")]
    for dep in declared:
        name, version = dep.split("==")
        name = norm(re.sub(r"\[.*\]", "", name).strip())
        assert lock.get(name) == version.strip(), f"{name}: pyproject {version}, requirements.lock {lock.get(name)}"


def test_the_operator_image_carries_no_spark_and_no_tensorflow():
    base = " ".join(PYPROJECT["project"]["dependencies"] + PYPROJECT["project"]["optional-dependencies"]["operator"])
    assert "pyspark" not in base and "tensorflow" not in base
    operator_stage = DOCKERFILE.split("AS operator", 1)[1].split("\nFROM ", 1)[0]
    assert "/deps/operator.txt" in operator_stage and "USER 1000" in operator_stage


def test_the_runtime_image_runs_as_non_root_with_spark_s_executor_entrypoint():
    runtime_stage = DOCKERFILE.split("AS runtime", 1)[1]
    assert "USER 185" in runtime_stage and "entrypoint.sh" in runtime_stage
    entrypoint = (REPO / "runtime" / "docker" / "entrypoint.sh").read_text()
    assert "KubernetesExecutorBackend" in entrypoint and "SPARK_DRIVER_URL" in entrypoint


def test_every_stage_builds_on_the_base_argument_and_the_context_holds_only_sources():
    froms = re.findall(r"^FROM (\S+)", DOCKERFILE, re.M)
    assert all(f in ("${BASE_IMAGE}", "runtime-pmml") for f in froms), froms
    assert arg("BASE_IMAGE") == "python:${PYTHON_VERSION}-slim-bookworm"
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    # everything out by default: a developer's build output or virtualenv never reaches an image
    assert ignore[ignore.index("*")] == "*" and "runtime/jvm/build/" in ignore
    copied = {line.split()[1] for line in re.findall(r"^COPY (?!--)[^\n]+", DOCKERFILE, re.M)} - {"--from=source"}
    assert all(f"!{c.rstrip('/')}" in ignore or f"!{c.rstrip('/')}/" in ignore for c in copied if not c.startswith("--")), copied


def test_the_pmml_flavour_leaves_tensorflow_out_and_the_runtime_adds_it():
    pmml_stage = DOCKERFILE.split("AS runtime-pmml", 1)[1].split("\n# --- ", 1)[0]
    tf_stage = DOCKERFILE.split("FROM runtime-pmml AS runtime", 1)[1]
    assert "/deps/runtime.txt" in pmml_stage and "tensorflow" not in pmml_stage.lower()
    assert "/deps/tensorflow.txt" in tf_stage and "USER 185:0" in tf_stage
    assert PYPROJECT["project"]["optional-dependencies"]["tensorflow"] == ["tensorflow-cpu==2.21.0"]
    assert not any("tensorflow" in d for d in PYPROJECT["project"]["optional-dependencies"]["runtime"])
