"""Bad input and unreachable servers end in one or two lines naming the file and the field, and a
non-zero exit: never a traceback. Each case runs the installed command as a user would."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
EXAMPLE = yaml.safe_load((REPO / "examples" / "wine-pmml.yaml").read_text())


def _example(change) -> str:
    body = copy.deepcopy(EXAMPLE)
    change(body)
    return yaml.safe_dump(body)


def _set(path: str, value):
    def change(body):
        *parents, last = path.split(".")
        node = body
        for p in parents:
            node = node.setdefault(p, {})
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return change


DELETE = object()

# (name, file content or None for a missing file, extra arguments, exit code, first line of stderr)
RENDER_CASES = [
    ("YAML syntax error", "apiVersion: v1\nkind: [\n", [], 1, "error: {f}:3:1: not valid YAML: expected the node content"),
    ("a YAML list", "- a\n- b\n", [], 1, "error: {f}: a YAML list, not a manifest: expected a mapping with apiVersion"),
    ("a YAML string", "hello\n", [], 1, "error: {f}: a YAML str, not a manifest"),
    ("empty file", "", [], 1, "error: {f}: empty: no ModelServing in it"),
    ("only comments", "# nothing\n---\n", [], 1, "error: {f}: empty: no ModelServing in it"),
    ("missing file", None, [], 1, "error: {f}: no such file"),
    ("no metadata", _example(_set("metadata", DELETE)), [], 1, "error: {f}: metadata: missing"),
    ("no metadata.name", _example(_set("metadata.name", DELETE)), [], 1, "error: {f}: metadata.name: missing"),
    ("bad metadata.name", _example(_set("metadata.name", "Wine_1")), [], 1,
     "error: {f}: Wine_1: metadata.name: 'Wine_1': metadata.name must be a DNS-1035 label"),
    ("spec without spark.image", _example(_set("spec.spark.image", DELETE)), [], 1,
     "error: {f}: wine: spec.spark.image: not set: set it, or give the image the operator would use"),
    ("a cross-field rule", _example(_set("spec.autoscaling", {"minReplicas": 5, "maxReplicas": 2})), [], 1,
     "error: {f}: wine: spec.autoscaling: minReplicas must not exceed maxReplicas"),
    ("bad memory quantity", _example(_set("spec.spark.driver.memory", "2 GB")), [], 1,
     "error: {f}: wine: spec.spark.driver.memory: '2 GB' is not a Kubernetes quantity"),
    ("bad duration", _example(_set("spec.spark.triggerInterval", "soon")), [], 1,
     "error: {f}: wine: spec.spark.triggerInterval: must be a duration such as"),
    ("misspelt field", _example(_set("spec.kafak", {})), [], 1,
     "error: {f}: wine: spec.kafak: not a field of this object"),
    ("required field missing", _example(_set("spec.kafka.dataTopic", DELETE)), [], 1,
     "error: {f}: wine: spec.kafka.dataTopic: required, missing"),
    ("apiVersion the CRD does not serve", _example(_set("apiVersion", "scorestream.dev/v1")), [], 2,
     "error: {f}: wine: apiVersion 'scorestream.dev/v1' kind 'ModelServing': the CRD serves only"),
]


def _assert_refused(code: int, stdout: str, stderr: str, want_code: int, first: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert code == want_code, stderr
    assert stderr.splitlines()[0].startswith(first), stderr
    assert len(stderr.splitlines()) <= 2, stderr
    assert stdout == ""


@pytest.mark.parametrize("content,args,code,first", [c[1:] for c in RENDER_CASES], ids=[c[0] for c in RENDER_CASES])
def test_render_bad_input(tmp_path, capsys, content, args, code, first):
    # The command's own function (what the installed command calls): a second each saved on
    # importing the client libraries again; the installed command runs in the test below.
    from scorestream.tools.cli import main

    f = tmp_path / "ms.yaml"
    if content is not None:
        f.write_text(content)
    returned = main(["render", "-f", str(f), *args])
    out, err = capsys.readouterr()
    _assert_refused(returned, out, err, code, first.format(f=f))


def test_the_installed_command_refuses_bad_input_the_same_way(tmp_path):
    name, content, args, code, first = RENDER_CASES[0]
    f = tmp_path / "ms.yaml"
    f.write_text(content)
    done = subprocess.run([str(BIN / "scorestream"), "render", "-f", str(f), *args], capture_output=True, text=True,
                          timeout=120)
    _assert_refused(done.returncode, done.stdout, done.stderr, code, first.format(f=f))


def test_render_with_runtime_image_fills_the_image_in(tmp_path):
    f = tmp_path / "ms.yaml"
    f.write_text(_example(_set("spec.spark.image", DELETE)))
    done = subprocess.run([str(BIN / "scorestream"), "render", "-f", str(f), "--runtime-image", "registry.example/rt:1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    sts = next(o for o in yaml.safe_load_all(done.stdout) if o["kind"] == "StatefulSet")
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/rt:1"


def test_render_warns_for_each_template_field_it_overrides(tmp_path):
    f = tmp_path / "ms.yaml"
    f.write_text(_example(_set("spec.driver", {"podTemplate": {"spec": {
        "serviceAccountName": "mine",
        "containers": [{"name": "driver", "image": "other:1", "env": [{"name": "A", "value": "1"}]}],
        "volumes": [{"name": "config", "emptyDir": {}}]}}})))
    done = subprocess.run([str(BIN / "scorestream"), "render", "-f", str(f)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    warned = [line.split("warning: ")[1].split(" is set")[0] for line in done.stderr.splitlines()]
    assert warned == ["spec.driver.podTemplate.spec.serviceAccountName",
                      "spec.driver.podTemplate.spec.containers[0].image",
                      "spec.driver.podTemplate.spec.volumes[0] (config)"]


def test_operator_config_errors_name_the_file(tmp_path):
    f = tmp_path / "operator.yaml"
    f.write_text("- a list\n")
    done = subprocess.run([str(BIN / "scorestream"), "operator", "--config", str(f), "-n", "ml"],
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: {f}: expected one YAML mapping of OperatorConfig's fields")
    done = subprocess.run([str(BIN / "scorestream"), "operator", "--config", str(tmp_path / "nope.yaml"), "-n", "ml"],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr.splitlines()[0]) == (1, f"error: {tmp_path / 'nope.yaml'}: no such file"
                                                                 " (the operator's configuration)")


def test_kubectl_plugin_with_the_api_server_down(tmp_path):
    # Nothing listens on port 1 of loopback: the connection is refused, as with an API server down.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "ml"}}]}))
    for command in (["status", "wine"], ["list"], ["suspend", "wine"], ["models", "wine"]):
        done = subprocess.run([str(BIN / "kubectl-scorestream"), *command, "--kubeconfig", str(kubeconfig)],
                              capture_output=True, text=True, timeout=60)
        assert "Traceback" not in done.stderr, done.stderr
        assert done.returncode == 1, done.stderr
        assert done.stderr.strip().endswith("cannot reach the API server at https://127.0.0.1:1: connection refused"), \
            done.stderr
        assert len(done.stderr.splitlines()) == 1


def test_kubectl_plugin_with_a_missing_kubeconfig(tmp_path):
    done = subprocess.run([str(BIN / "kubectl-scorestream"), "status", "wine", "--kubeconfig", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60)
    assert "Traceback" not in done.stderr
    assert done.returncode == 1
    assert done.stderr.startswith("error: kubeconfig: ")


def test_versions():
    for command in (["scorestream", "--version"], ["kubectl-scorestream", "version"]):
        done = subprocess.run([str(BIN / command[0]), *command[1:]], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout.startswith(f"{command[0]} 0."), done


def test_developer_commands_are_not_the_users():
    """build-jvm and crd --write are a developer's (python -m scorestream.runtime.jvm,
    python -m scorestream.operator.crd --write); `scorestream crd` still prints the CRD."""
    helped = subprocess.run([str(BIN / "scorestream"), "--help"], capture_output=True, text=True, timeout=60).stdout
    assert "build-jvm" not in helped and "crd" in helped
    for args in (["build-jvm"], ["crd", "--write"]):
        done = subprocess.run([str(BIN / "scorestream"), *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done
    printed = subprocess.run([str(BIN / "scorestream"), "crd"], capture_output=True, text=True, timeout=60)
    from scorestream.operator import crd

    assert printed.returncode == 0 and printed.stdout == crd.render()
    written = subprocess.run([sys.executable, "-m", "scorestream.operator.crd"], capture_output=True, text=True,
                             timeout=60)
    assert written.returncode == 0 and written.stdout == crd.render()
