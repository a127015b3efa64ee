"""The operator's shape in two figures: lines with `dict[str, Any]`, and functions over 60 lines.

    python benchmarks/code_shape.py [DIR ...]     (default: operator/)
"""

from __future__ import annotations

import ast
import pathlib
import sys

LONG = 60


def shape(root: pathlib.Path) -> tuple[int, list[tuple[str, int]]]:
    untyped, long = 0, []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        untyped += sum("dict[str, Any]" in line for line in text.splitlines())  # as grep -c
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONG:
                    long.append((f"{path.relative_to(root.parent)}:{node.name}", lines))
    return untyped, long


def main() -> None:
    for arg in sys.argv[1:] or ["operator"]:
        untyped, long = shape(pathlib.Path(arg))
        print(f"{arg}: dict[str, Any]: {untyped}; functions over {LONG} lines: {len(long)}")
        for where, lines in long:
            print(f"  {where} ({lines} lines)")


if __name__ == "__main__":
    main()
