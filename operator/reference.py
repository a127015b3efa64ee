"""The ModelServing reference page (docs/reference/modelserving.md), generated from the CRD.

The CRD is generated from the spec types, so the page says what the API server enforces: every
field's path, type, default, bounds and description, and the CEL rules with their messages.
`python -m scorestream.operator.reference --write` rewrites the page; a test fails when it is stale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from scorestream.api.v1alpha1 import modelserving as s
from scorestream.generated import print_or_write
from scorestream.operator import crd

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "modelserving.md"


def _type(node: dict[str, Any]) -> str:
    t = node.get("type", "object" if "properties" in node else "any")
    if t == "array":
        t = f"array of {_type(node.get('items') or {})}"
    elif t == "object" and "additionalProperties" in node and "properties" not in node:
        t = f"map of {_type(node['additionalProperties'] or {})}"
    if node.get("x-kubernetes-int-or-string"):
        t = "integer or string"
    return t


def _constraints(node: dict[str, Any]) -> str:
    parts = []
    if "enum" in node:
        parts.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    for key, word in (("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"), ("maxLength", "length ≤"),
                      ("minItems", "items ≥"), ("maxItems", "items ≤")):
        if key in node:
            exclusive = node.get(f"exclusive{key[0].upper()}{key[1:]}")
            parts.append(f"{word.replace('≥', '>').replace('≤', '<') if exclusive else word} {node[key]}")
    if "pattern" in node:
        parts.append(f"pattern `{node['pattern']}`")
    return "; ".join(parts)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _walk(node: dict[str, Any], path: str, rows: list[list[str]], rules: list[tuple[str, str]],
          required: bool) -> None:
    for rule in node.get("x-kubernetes-validations", []):
        rules.append((path, rule.get("message") or rule["rule"]))
    if path:
        default = node.get("default")
        rows.append([f"`{path}`", _type(node) + (" (required)" if required else ""),
                     "" if default is None or default == {} else f"`{json.dumps(default)}`",
                     _cell(node.get("description", "") + (f" ({limits})" if (limits := _constraints(node)) else ""))])
    props = node.get("properties") or (node.get("items") or {}).get("properties")
    if not props:
        return
    inner = node if "properties" in node else node["items"]
    needed = set(inner.get("required", []))
    suffix = "[]" if "properties" not in node else ""
    for name, child in props.items():
        _walk(child, f"{path}{suffix}.{name}" if path else name, rows, rules, name in needed)


def render() -> str:
    doc = yaml.safe_load(crd.render())
    version = next(v for v in doc["spec"]["versions"] if v["name"] == s.VERSION)
    schema = version["schema"]["openAPIV3Schema"]
    out = [f"# ModelServing reference ({s.API_VERSION})", "",
           "Generated from the CRD by `python -m scorestream.operator.reference --write`; do not edit.", "",
           f"`kind: {s.KIND}`, short name `{', '.join(doc['spec']['names'].get('shortNames', []))}`, "
           f"scope {doc['spec']['scope']}. Columns of `kubectl get ms`: "
           + ", ".join(f"{c['name']} (`{c['jsonPath']}`)" for c in version.get("additionalPrinterColumns", [])) + "."]
    for part in ("spec", "status"):
        rows: list[list[str]] = []
        rules: list[tuple[str, str]] = []
        _walk(schema["properties"][part], part, rows, rules, False)
        out += ["", f"## {part}", "", "| field | type | default | description |", "|---|---|---|---|"]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        if rules:
            out += ["", f"Rules the API server checks on `{part}`:", ""]
            out += [f"- `{p}`: {_cell(m)}" for p, m in rules]
    top_rules = [r.get("message") or r["rule"] for r in schema.get("x-kubernetes-validations", [])]
    if top_rules:
        out += ["", "## metadata", ""] + [f"- {_cell(m)}" for m in top_rules]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    return print_or_write("python -m scorestream.operator.reference", __doc__.split("\n\n")[0], PAGE, render, argv)


if __name__ == "__main__":
    sys.exit(main())
