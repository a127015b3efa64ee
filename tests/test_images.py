"""The built images, as a cluster runs them: each archive `make images` writes is opened with
buildah and run with runc (no Docker engine needed), as its own user and as a random UID in group 0
(OpenShift's restricted SCC), and checked for what the chart and Spark rely on."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import uuid
import zipfile

import pytest

import images  # hack/images.py

pytestmark = [pytest.mark.node,
              pytest.mark.skipif(shutil.which("buildah") is None or os.geteuid() != 0,
                                 reason="needs root and buildah (`make test` installs it) to run the built images")]

RANDOM_UID = random.randint(100_000, 2_000_000_000)


@pytest.fixture(scope="module")
def built():
    """Every image's archive (built by `make setup`; built here where it is not)."""
    return images.build(list(images.IMAGES))


class Container:
    def __init__(self, engine: images.Buildah, archive):
        self.engine = engine
        self.name = images.test_container_name(os.getpid(), uuid.uuid4().hex[:8])
        engine("from", "--pull=never", "--name", self.name, f"oci-archive:{archive}")
        self.config = json.loads(engine("inspect", "--type", "container", self.name))["OCIv1"]["config"]

    def run(self, *cmd: str, user: str | None = None, volume: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(["buildah", "--root", str(self.engine.root), "--runroot", str(self.engine.runroot),
                               "--storage-driver", "overlay", "run", "--network=none",
                               *([f"--user={user}"] if user else []), *([f"--volume={volume}"] if volume else []),
                               self.name, "--", *cmd],
                              capture_output=True, text=True, timeout=300)

    def remove(self) -> None:
        subprocess.run(["buildah", "--root", str(self.engine.root), "--runroot", str(self.engine.runroot), "rm",
                        self.name], capture_output=True)


@pytest.fixture(scope="module")
def containers(built):
    engine = images.Buildah()
    made = {target: Container(engine, archive) for target, archive in built.items()}
    yield made
    for c in made.values():
        c.remove()


UNREADABLE = "find {} ! -readable -print -quit; find {} -type d ! -executable -print -quit"


@pytest.mark.parametrize("target", ["runtime-pmml", "runtime"])
def test_the_runtime_runs_as_spark_in_group_0_and_every_user_reads_its_files(containers, target):
    c = containers[target]
    assert c.config["User"] == "185:0"
    assert c.config["Entrypoint"] == ["tini", "--", "/opt/scorestream/entrypoint.sh"]
    assert set(c.config["ExposedPorts"]) == {"8080/tcp", "9090/tcp", "7078/tcp", "7079/tcp"}
    assert c.config["Labels"]["org.opencontainers.image.version"] == images.VERSION
    for user in ("185:0", f"{RANDOM_UID}:0"):
        # the scorer, the Kafka connector's jars and Python's packages: what a driver and an
        # executor load (a 0700 jar directory stopped every job on a real cluster)
        res = c.run("sh", "-c", UNREADABLE.format("/opt/scorestream", "/opt/scorestream")
                    + "; " + UNREADABLE.format("/usr/local/lib/python3*/", "/usr/local/lib/python3*/"), user=user)
        assert res.returncode == 0 and res.stdout == "", f"{target} as {user}: unreadable {res.stdout}{res.stderr}"
        jars = c.run("sh", "-c", "ls /opt/scorestream/jars/*/*.jar /opt/scorestream/jvm/*.jar | wc -l", user=user)
        assert int(jars.stdout.strip() or 0) >= 5, jars
    # the entrypoint passes other commands through, as the random UID (a passwd entry is added
    # for it: Spark's and Hadoop's user lookup fails without one)
    res = c.run("/opt/scorestream/entrypoint.sh", "sh", "-c", "id -un; python -m scorestream.runtime --help",
                user=f"{RANDOM_UID}:0")
    assert res.returncode == 0, res.stderr
    assert "--config" in res.stdout


def test_only_the_tensorflow_flavour_carries_tensorflow(containers):
    """TensorFlow is scored in the JVM (ADR 33): the TensorFlow image carries its Java jars, neither
    image Python TensorFlow."""
    probe = "import importlib.util as u; print(u.find_spec('tensorflow') is not None, u.find_spec('pyspark') is not None)"
    for target in ("runtime", "runtime-pmml"):
        assert containers[target].run("python", "-c", probe).stdout.split() == ["False", "True"], target
    jars = "ls /opt/scorestream/jars/*/tensorflow-core-api-*.jar /opt/scorestream/jars/*/tensorflow-core-native-*-linux-x86_64.jar"
    assert len(containers["runtime"].run("sh", "-c", jars).stdout.split()) == 2
    assert containers["runtime-pmml"].run("sh", "-c", jars).stdout.split() == []


def test_the_tensorflow_flavour_scores_a_savedmodel_as_the_host_does(containers, tmp_path):
    """`scorestream verify` in the image (its JVM, TensorFlow's Java jars) on a SavedModel and a
    sample expecting what Python TensorFlow computes on the host."""
    import numpy as np
    import tensorflow as tf

    from scorestream.tools.demo import feed, models

    rows = feed.wine_rows()[:20]
    (tmp_path / "model.zip").write_bytes(models.keras_savedmodel_zip(rows, epochs=2))
    zipfile.ZipFile(tmp_path / "model.zip").extractall(tmp_path / "saved")
    signature = tf.saved_model.load(str(tmp_path / "saved")).signatures["serving_default"]
    (name, _), = signature.structured_input_signature[1].items()
    out = signature(**{name: np.asarray([r[:11] for r in rows], np.float32)})
    want = np.asarray(out[sorted(out)[0]]).argmax(1)
    (tmp_path / "sample.jsonl").write_text("".join(
        json.dumps(dict(json.loads(feed.wine_json(r)), expected=int(k))) + "\n" for r, k in zip(rows, want)))
    # The image's user is an arbitrary uid in group 0 (OpenShift's): the mounted folder is readable to all.
    for path in (tmp_path, tmp_path / "model.zip", tmp_path / "sample.jsonl"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    res = containers["runtime"].run("scorestream", "verify", "/m/model.zip", "--sample", "/m/sample.jsonl",
                                    "--expected-field", "expected", "--tolerance", "0",
                                    "--inputs", ",".join(feed.WINE_COLUMNS), "--timeout", "120",
                                    user=f"{RANDOM_UID}:0", volume=f"{tmp_path}:/m:ro")
    assert res.returncode == 0 and res.stdout.startswith("PASS"), res.stdout + res.stderr[-2000:]


def test_the_operator_image_runs_the_cli_without_spark_or_tensorflow(containers):
    c = containers["operator"]
    assert c.config["User"] == "1000:0" and c.config["Entrypoint"] == ["scorestream"]
    assert set(c.config["ExposedPorts"]) == {"8080/tcp", "9090/tcp"}
    for user in ("1000:0", f"{RANDOM_UID}:0"):
        res = c.run("scorestream", "--help", user=user)
        assert res.returncode == 0 and "operator" in res.stdout, res.stderr
    res = c.run("python", "-c", "import importlib.util as u; print(u.find_spec('pyspark'), u.find_spec('tensorflow'))")
    assert res.stdout.split() == ["None", "None"]


def test_archives_are_cached_by_their_inputs(built):
    """A second build of unchanged inputs builds nothing: the same archives come back."""
    again = images.build(list(images.IMAGES))
    assert again == built and all(p.is_file() for p in again.values())
    assert all(images.VERSION in p.name for p in again.values())


def test_a_container_left_by_a_killed_run_does_not_stop_the_next_build(built, containers):
    """A run killed midway leaves its working containers, and an image a container uses cannot be
    pruned: `make images` failed on the next run. The prune now removes the containers of test
    processes that are gone, and only those."""
    engine = images.Buildah()
    ended = subprocess.Popen(["true"])  # a pid whose process has ended
    ended.wait()
    left = images.test_container_name(ended.pid, "left")
    engine("from", "--pull=never", "--name", left, f"oci-archive:{built['operator']}")
    engine.prune()
    names = engine("containers", "--format", "{{.ContainerName}}").split()
    assert left not in names
    assert all(c.name in names for c in containers.values()), "a live run's containers were removed"


def test_an_image_of_a_version_keeps_its_newest_archive_only(tmp_path, monkeypatch):
    """A release's images too (`hack/images.py release`): a gigabyte each, an older one is removed."""
    monkeypatch.setenv("SCORESTREAM_CACHE", str(tmp_path))
    image = images.IMAGES["runtime"]
    images.cache().mkdir()
    kept = [f"{image.name}-0.1.0-new.oci.tar", f"{image.name}-0.1.0-new.oci.tar.unpacked",
            f"{image.name}-0.2.0-other.oci.tar", f"{images.IMAGES['runtime-pmml'].name}-0.1.0-old.oci.tar"]
    for name in [*kept, f"{image.name}-0.1.0-old.oci.tar", f"{image.name}-0.1.0-old.oci.tar.unpacked"]:
        (images.cache() / name).write_text("")
    images.keep_only(images.cache() / kept[0], image, "0.1.0")
    assert sorted(p.name for p in images.cache().iterdir()) == sorted(kept)
