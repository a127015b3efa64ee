"""The chart's values reference page (docs/operations/values.md), generated from
charts/scorestream/values.schema.json, with each value's default from values.yaml.

The schema is what `helm install` enforces, so the page says what the chart takes: every value's
path, type, default, bounds and description. `python -m scorestream.tools.values_reference --write`
rewrites the page; a test fails when it is stale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from scorestream.generated import print_or_write

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "scorestream"
PAGE = REPO / "docs" / "operations" / "values.md"

_MISSING = object()


def _type(node: dict[str, Any]) -> str:
    t = node.get("type", "object" if "properties" in node else "any" if "enum" not in node else "enum")
    if isinstance(t, list):
        t = " or ".join(t)
    if t == "array":
        t = f"array of {_type(node.get('items') or {})}"
    elif t == "object" and isinstance(node.get("additionalProperties"), dict) and "properties" not in node:
        t = f"map of {_type(node['additionalProperties'])}"
    return t


def _constraints(node: dict[str, Any]) -> str:
    parts = []
    if "enum" in node:
        parts.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    for key, word in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("minLength", "length ≥"),
                      ("maxLength", "length ≤"), ("minProperties", "entries ≥")):
        if key in node:
            parts.append(f"{word} {node[key]}")
    if "pattern" in node:
        parts.append(f"pattern `{node['pattern']}`")
    if "not" in node and "const" in node["not"]:
        parts.append(f"not {node['not']['const']}")
    return "; ".join(parts)


def _default(value: Any) -> str:
    if value is _MISSING:
        return ""
    if value in ("", [], {}):
        return f"`{json.dumps(value)}`"
    text = json.dumps(value, separators=(", ", ": "))
    return f"`{text}`" if len(text) <= 60 else "see values.yaml"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _walk(node: dict[str, Any], path: str, defaults: Any, rows: list[list[str]], schema: dict[str, Any]) -> None:
    if "$ref" in node:  # "#/definitions/x", the schema's own
        target = schema
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    props = node.get("properties")
    if props and path and node.get("description"):  # a group: its values say the rest
        rows.append([f"`{path}`", "object", "", _cell(node.get("description", ""))])
    if props:
        for key, child in props.items():
            sub = defaults.get(key, _MISSING) if isinstance(defaults, dict) else _MISSING
            _walk(child, f"{path}.{key}" if path else key, sub, rows, schema)
        return
    items = node.get("items") or {}
    description = node.get("description", "")
    if "properties" in items and items.get("required"):
        description += (" " if description else "") + "Each item needs " + ", ".join(f"`{r}`" for r in items["required"]) + "."
    bounds = _constraints(node) or _constraints(items)
    rows.append([f"`{path}`", _type(node), _default(defaults),
                 _cell((description + (f" ({bounds})" if bounds else "")).strip())])


def render() -> str:
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    rows: list[list[str]] = []
    _walk(schema, "", defaults, rows, schema)
    out = ["# Chart values", "",
           "Generated from `charts/scorestream/values.schema.json` (and the defaults of `values.yaml`) by",
           "`python -m scorestream.tools.values_reference --write`; do not edit.", "",
           "`helm install` refuses a value the schema does not allow, with the value's path. `values.yaml`",
           "says more about each (`helm show values dist/scorestream-VERSION.tgz`); [installing](install.md)",
           "shows them in use.", "",
           "| value | type | default | description |", "|---|---|---|---|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    return print_or_write("python -m scorestream.tools.values_reference", __doc__.split("\n\n")[0], PAGE, render, argv)


if __name__ == "__main__":
    sys.exit(main())
