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
    sample.write_text("def f():\n    from scorestream.operator import spec\n")
    assert "scorestream.operator.spec" in imports(sample)
