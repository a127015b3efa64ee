"""The design's walls, read from the source (every import, also those inside functions): the
kernel (`scorestream/`) imports neither plane; the runtime never imports the operator; the operator
never imports Spark, TensorFlow or the runtime. Only `tools/` may import both planes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# folder -> the import prefixes it must never use
WALLS = {
    "scorestream": ("scorestream.operator", "scorestream.runtime", "scorestream.tools", "pyspark", "tensorflow", "kopf"),
    "runtime": ("scorestream.operator", "scorestream.tools", "kopf", "kubernetes"),
    "operator": ("scorestream.runtime", "scorestream.tools", "pyspark", "tensorflow", "py4j"),
}


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def crossings(folder: str) -> list[str]:
    banned = WALLS[folder]
    return sorted(f"{path.relative_to(REPO)}: {name}"
                  for path in (REPO / folder).rglob("*.py")
                  for name in imports(path)
                  if any(name == b or name.startswith(b + ".") for b in banned))


@pytest.mark.parametrize("folder", sorted(WALLS))
def test_a_part_imports_nothing_across_its_wall(folder):
    assert crossings(folder) == []


def test_the_walls_see_imports_inside_functions(tmp_path):
    # The check reads every import in a file, not only the module's top: the runtime's lazy imports
    # of TensorFlow, say, would hide a crossing from a check of the top alone.
    sample = tmp_path / "m.py"
    sample.write_text("def f():\n    from scorestream.operator import desired\n")
    assert "scorestream.operator.desired" in imports(sample)


def test_the_plugin_reads_the_resource_through_the_api_package_alone():
    # kubectl-scorestream is installed where no operator runs: the ModelServing's types and the
    # control annotations' values come from scorestream.api.v1alpha1, shared with the operator.
    plugin = imports(REPO / "tools" / "kubectl_plugin.py")
    assert any(n.startswith("scorestream.api.v1alpha1") for n in plugin)
    assert sorted(n for n in plugin if n.startswith("scorestream.operator")) == []


# Where the CLI imports operator code: the operator, crd and render commands. The others (the job,
# verify, the demo) import none, and render's check of a manifest reads it through the API package.
CLI_OPERATOR_COMMANDS = {"_dispatch": {"scorestream.operator.crd", "scorestream.operator.handlers",
                                       "scorestream.operator.settings"},
                         "_render": {"scorestream.operator.desired", "scorestream.operator.images",
                                     "scorestream.operator.podtemplate"}}


def test_the_cli_imports_the_operator_only_in_the_commands_that_run_it():
    tree = ast.parse((REPO / "tools" / "cli.py").read_text())
    found: dict[str, set[str]] = {}
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("scorestream.operator"):
                found.setdefault(fn.name, set()).update(
                    node.module if node.module != "scorestream.operator" else f"{node.module}.{a.name}" for a in node.names)
    top = {n for n in imports_at_top(tree) if n.startswith("scorestream.operator")}
    assert (top, found) == (set(), CLI_OPERATOR_COMMANDS)


def imports_at_top(tree: ast.Module) -> set[str]:
    return {node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module} \
        | {a.name for node in tree.body if isinstance(node, ast.Import) for a in node.names}


def _models_within(model: type, seen: set[type]) -> set[type]:
    """The pydantic models a model's fields hold, at any depth."""
    import typing

    from pydantic import BaseModel

    def walk(tp) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp not in seen:
                seen.add(tp)
                for field in tp.model_fields.values():
                    walk(field.annotation)
        for arg in typing.get_args(tp):
            walk(arg)

    walk(model)
    return seen


def test_the_resource_s_types_are_the_api_package_s_own():
    # The job's configuration types (scorestream.config) change with the job: were a spec type one
    # of them, or made from one, the CRD would change with them unseen. desired.job_config maps
    # the spec to the job's configuration field by field.
    # A base that declares no field (Strict, the shared rules of TriggerRules) adds none to the CRD.
    from scorestream.api.v1alpha1 import modelserving as s

    found = _models_within(s.ModelServingSpec, set()) | _models_within(s.ModelServingStatus, set())
    assert s.KafkaSpec in found and s.S3Store in found
    borrowed = sorted(f"{m.__name__} ({b.__module__}.{b.__name__})" for m in found for b in m.__mro__
                      if b.__module__ == "scorestream.config" and b.__dict__.get("__annotations__"))
    assert borrowed == []
