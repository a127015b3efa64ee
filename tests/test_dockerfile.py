"""The Dockerfile, checked without a Docker engine: hadolint, and that it installs exactly what
`make setup` installs (same constraints file, pip, Python and JDK versions, the right extras)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

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
    assert sorted(extras) == ["operator", "runtime"], extras
    installed = re.findall(r"COPY --from=requirements /deps/(\w+)\.txt", DOCKERFILE)
    assert sorted(installed) == ["operator", "runtime", "runtime"], installed
    installs = re.findall(r"pip install [^\n\\]*", DOCKERFILE)
    for line in installs:  # nothing unpinned, nothing unhashed sneaks in
        assert ('"pip==${PIP_VERSION}"' in line or "--require-hashes -r /deps/hashed.txt" in line
                or "--no-deps /src" in line or "--no-deps -e /src" in line), line
    assert DOCKERFILE.count("requirements.py --hashed /deps/requirements.lock /deps/requirements.txt > /deps/hashed.txt") \
        == DOCKERFILE.count("--require-hashes -r /deps/hashed.txt") == 3  # the operator, the scorer, the runtime
    # make setup: the same pins, without the hashes (pip refuses an editable install when checking them)
    assert "sed -E 's/ --hash=[^ ]+//g' requirements.lock > $(VENV)/constraints.txt" in MAKEFILE
    assert "-c $(VENV)/constraints.txt -e '.[dev]'" in MAKEFILE
    dev = " ".join(PYPROJECT["project"]["optional-dependencies"]["dev"])
    assert all(e in dev for e in set(extras)), "make setup installs every extra the images install"
    pip = re.search(r"pip==(\S+)", MAKEFILE).group(1)
    assert arg("PIP_VERSION") == pip
    assert f"openjdk-{arg('JDK_PACKAGE').split('-')[1]}-jdk-headless" in MAKEFILE
    assert arg("JRE_PACKAGE").split("-")[1] == arg("JDK_PACKAGE").split("-")[1]
    assert arg("PYTHON_VERSION") == f"{sys.version_info.major}.{sys.version_info.minor}", \
        "the images run the Python the tests run"


def test_the_lock_pins_every_declared_dependency_at_its_declared_version():
    lock = dict(line.split(" ")[0].split("==", 1) for line in (REPO / "requirements.lock").read_text().splitlines()
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
    copied = {src.split("/")[0] for line in re.findall(r"^COPY (?!--)[^\n]+", DOCKERFILE, re.M)
              for src in line.split()[1:-1]}
    assert all(f"!{c}" in ignore or f"!{c}/" in ignore for c in copied), copied


def test_the_pmml_flavour_leaves_tensorflow_out_and_the_runtime_adds_it():
    """TensorFlow is scored in the JVM (ADR 33): the TensorFlow image adds TensorFlow's Java jars to
    the PMML image, no Python TensorFlow; the PMML image says it has none (runtime/jvm.py)."""
    from scorestream.runtime import jvm

    pmml_stage = DOCKERFILE.split("AS runtime-pmml", 1)[1].split("\n# --- ", 1)[0]
    tf_stage = DOCKERFILE.split("FROM runtime-pmml AS runtime", 1)[1]
    assert "/deps/runtime.txt" in pmml_stage and "/jars-tf" not in pmml_stage
    assert f"{jvm.TENSORFLOW_ENV}=absent" in pmml_stage and f"{jvm.TENSORFLOW_ENV}=present" in tf_stage
    assert "COPY --from=scorer --chown=185:0 /jars-tf/ /opt/scorestream/jars/" in tf_stage
    assert "pip install" not in tf_stage and "USER" not in tf_stage  # the PMML image's user stays
    assert "resolve tensorflow" in DOCKERFILE.split("AS scorer", 1)[1].split("\n# --- ", 1)[0]
    assert not any("tensorflow" in d for d in PYPROJECT["project"]["optional-dependencies"]["runtime"])


def _hashed(lock: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """What the operator image's stage runs: its requirements, resolved under the lock, hashed."""
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(subprocess.run([sys.executable, str(REPO / "runtime" / "docker" / "requirements.py"),
                                            str(REPO / "pyproject.toml"), "operator"],
                                           check=True, capture_output=True, text=True).stdout)
    res = subprocess.run([sys.executable, str(REPO / "runtime" / "docker" / "requirements.py"), "--hashed", str(lock),
                          str(requirements)], capture_output=True, text=True)
    hashed = tmp_path / "hashed.txt"
    hashed.write_text(res.stdout)
    return res, hashed


@pytest.fixture(scope="module")
def resolved(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """The operator stage's resolution under two locks: the real one, and one that does not pin
    multidict. Each waits seconds on the index, so both run at once."""
    text = (REPO / "requirements.lock").read_text()
    locks = {"real": text,
             "unpinned": "\n".join(line for line in text.splitlines() if not line.startswith("multidict==")) + "\n"}
    folders = {}
    for name, content in locks.items():
        folders[name] = tmp_path_factory.mktemp(name)
        (folders[name] / "requirements.lock").write_text(content)
    with ThreadPoolExecutor(len(folders)) as pool:
        runs = {name: pool.submit(_hashed, folder / "requirements.lock", folder) for name, folder in folders.items()}
        return {name: run.result() for name, run in runs.items()}


@pytest.mark.index
def test_the_images_install_only_files_whose_hash_the_lock_records(resolved):
    """#30 LOW: every package is hashed in the lock, the operator image's stage logic (run here)
    hashes what it installs, and every install of every stage is pip's --require-hashes of that
    list: pip refuses a file whose hash differs, and the images `make test` builds first install
    from this lock, so its hashes are the index's."""
    lines = [line for line in (REPO / "requirements.lock").read_text().splitlines() if line and not line.startswith("#")]
    assert all(re.fullmatch(r"\S+==\S+ --hash=sha256:[0-9a-f]{64}", line) for line in lines), \
        [line for line in lines if "--hash=" not in line]
    res, hashed = resolved["real"]
    assert res.returncode == 0, res.stderr
    assert all(re.fullmatch(r"\S+==\S+ --hash=sha256:[0-9a-f]{64}", line) for line in hashed.read_text().splitlines()
               if line and not line.startswith("#"))
    assert any(line.startswith("kopf==") for line in hashed.read_text().splitlines())
    assert "pyspark" not in hashed.read_text() and "tensorflow" not in hashed.read_text()
    # Besides pip's own pinned version and the project's source (--no-deps), each install is of the list.
    installs = [i.strip() for i in re.findall(r"pip install ([^\n&\\]*)", DOCKERFILE)
                if not i.startswith(('"pip==', "--no-deps "))]
    assert len(installs) == 3 and set(installs) == {"--require-hashes -r /deps/hashed.txt"}, installs


@pytest.mark.index
def test_a_package_the_lock_does_not_pin_stops_the_image_build(resolved):
    res, _ = resolved["unpinned"]
    assert res.returncode != 0 and "requirements.lock does not cover what the image installs: multidict" in res.stderr
