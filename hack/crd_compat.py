"""What a CRD change breaks for the resources and clients of the CRD before it.

    python hack/crd_compat.py OLD.yaml NEW.yaml   # the changes that break, one a line

docs/upgrading-the-crd.md states the rules this applies. A change breaks when a resource or a
manifest valid under the old CRD may be refused, or read differently, under the new one:
- a field of the spec removed, or its type changed (a manifest that sets it is pruned or refused);
- validation tightened: a field required, a new pattern, format or CEL rule, an enum value
  removed, a bound narrowed or added, nullability taken away, unknown fields no longer kept;
- a default removed or changed (a resource that leaves the field out gets another value);
- a served version, a name (kind, plural, short name) or a subresource gone, or the scope changed.
In the status only what its readers see counts: a field removed or its type changed. Adding an
optional field, relaxing validation, a new default for a new field and new printer columns are
compatible.
"""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

# Bounds a larger value of tightens (minimum) or a smaller one does (maximum).
LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
# Keywords whose mere change may refuse a value the old one admitted (no subset test is attempted).
CONSTRAINTS = ("pattern", "format", "oneOf", "anyOf", "allOf", "not", "x-kubernetes-list-type",
               "x-kubernetes-list-map-keys", "x-kubernetes-int-or-string", "x-kubernetes-embedded-resource")
QUOTED = re.compile(r"'([^']*)'")


@dataclass(frozen=True, order=True)
class Change:
    path: str  # the field, as a manifest names it: spec.kafka.modelsTopic, spec.rollout.rules[].metric
    kind: str  # "removed field", "tightened validation", "removed default", ...
    detail: str

    def __str__(self) -> str:
        return f"{self.path}: {self.kind} ({self.detail})"


def load(path: Path) -> dict:
    # libyaml's loader where PyYAML has it: the CRD is ~100 KB, seconds in pure Python
    return yaml.load(Path(path).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def breaking_changes(old: dict, new: dict) -> list[Change]:
    """Every change from the CRD `old` to `new` that breaks, in path order."""
    changes = _definition(old["spec"], new["spec"])
    new_versions = {v["name"]: v for v in new["spec"]["versions"]}
    for version in old["spec"]["versions"]:
        name = version["name"]
        mine = new_versions.get(name)
        if version.get("served") and not (mine and mine.get("served")):
            changes.append(Change(name, "version no longer served", f"{name} is gone or served: false"))
            continue
        if mine is None:
            continue
        changes += _subresources(name, version.get("subresources") or {}, mine.get("subresources") or {})
        old_schema = version["schema"]["openAPIV3Schema"]["properties"]
        new_schema = mine["schema"]["openAPIV3Schema"]["properties"]
        for root in ("spec", "status"):
            if root in old_schema:
                changes += _schema(root, old_schema[root], new_schema.get(root), spec=root == "spec")
    return sorted(changes)


def _definition(old: dict, new: dict) -> list[Change]:
    changes = []
    if old.get("scope") != new.get("scope"):
        changes.append(Change("scope", "scope changed", f"{old.get('scope')} -> {new.get('scope')}"))
    for key in ("kind", "plural", "singular", "listKind"):
        if old["names"].get(key) != new["names"].get(key):
            changes.append(Change(f"names.{key}", "name changed", f"{old['names'].get(key)} -> {new['names'].get(key)}"))
    for key in ("shortNames", "categories"):
        gone = set(old["names"].get(key) or []) - set(new["names"].get(key) or [])
        if gone:
            changes.append(Change(f"names.{key}", "name removed", ", ".join(sorted(gone))))
    return changes


def _subresources(version: str, old: dict, new: dict) -> list[Change]:
    changes = []
    for name, value in old.items():
        if name not in new:
            changes.append(Change(f"{version}.subresources.{name}", "subresource removed", name))
        elif value != new[name]:
            changes.append(Change(f"{version}.subresources.{name}", "subresource changed", f"{value} -> {new[name]}"))
    return changes


def _schema(path: str, old: dict, new: dict | None, spec: bool) -> list[Change]:
    if new is None:
        return [Change(path, "removed field", "no longer in the schema")]
    if old.get("type") != new.get("type"):
        return [Change(path, "type changed", f"{old.get('type')} -> {new.get('type')}")]
    changes = _validation(path, old, new) if spec else []
    old_props, new_props = old.get("properties") or {}, new.get("properties") or {}
    for name, sub in old_props.items():
        changes += _schema(f"{path}.{name}", sub, new_props.get(name), spec)
    if isinstance(old.get("items"), dict):
        changes += _schema(f"{path}[]", old["items"], new.get("items") if isinstance(new.get("items"), dict) else None, spec)
    if isinstance(old.get("additionalProperties"), dict):
        added = new.get("additionalProperties")
        changes += _schema(f"{path}.*", old["additionalProperties"], added if isinstance(added, dict) else None, spec)
    return changes


def _validation(path: str, old: dict, new: dict) -> list[Change]:
    tight = []
    if "default" in old and "default" not in new:
        return [Change(path, "removed default", f"was {old['default']!r}")] + _validation(path, _without(old, "default"), new)
    if "default" in old and old["default"] != new["default"]:
        tight.append(Change(path, "changed default", f"{old['default']!r} -> {new['default']!r}"))
    required = set(new.get("required") or []) - set(old.get("required") or [])
    tight += [Change(f"{path}.{name}", "tightened validation", "now required") for name in sorted(required)]
    if "enum" in new and (set(map(repr, old.get("enum") or [])) - set(map(repr, new["enum"])) or "enum" not in old):
        gone = sorted(set(map(repr, old.get("enum") or [])) - set(map(repr, new["enum"])))
        tight.append(Change(path, "tightened validation", f"enum {'loses ' + ', '.join(gone) if gone else 'added'}"))
    for key in LOWER_BOUNDS:
        if key in new and (key not in old or _bound(new[key]) > _bound(old[key])):
            tight.append(Change(path, "tightened validation", f"{key} {old.get(key)} -> {new[key]}"))
    for key in UPPER_BOUNDS:
        if key in new and (key not in old or _bound(new[key]) < _bound(old[key])):
            tight.append(Change(path, "tightened validation", f"{key} {old.get(key)} -> {new[key]}"))
    for key in CONSTRAINTS:
        if key in new and new[key] != old.get(key):
            tight.append(Change(path, "tightened validation", f"{key} {old.get(key)!r} -> {new[key]!r}"))
    if old.get("nullable") and not new.get("nullable"):
        tight.append(Change(path, "tightened validation", "no longer nullable"))
    if old.get("x-kubernetes-preserve-unknown-fields") and not new.get("x-kubernetes-preserve-unknown-fields"):
        tight.append(Change(path, "tightened validation", "unknown fields no longer kept"))
    old_rules = [r["rule"] for r in old.get("x-kubernetes-validations") or []]
    added_fields = set(new.get("properties") or {}) - set(old.get("properties") or {})
    for rule in new.get("x-kubernetes-validations") or []:
        if rule["rule"] not in old_rules and not _guarded_by(rule["rule"], added_fields):
            tight.append(Change(path, "tightened validation", _rule_change(old_rules, rule["rule"])))
    return tight


def _guarded_by(rule: str, added_fields: set[str]) -> bool:
    """A rule that holds wherever the fields the old CRD lacked are unset: one of its top-level
    disjuncts is `!has(self.F)` or `!(has(self.F) || has(self.G))` of such fields. No resource
    stored under the old CRD has them (the API server pruned them), so none is refused."""
    if "?" in rule:  # a conditional binds looser than `||`: the split below would not be the rule's
        return False
    for term in _top_level(rule, "||"):
        negated = re.fullmatch(r"!\s*\((.*)\)", term, re.S) or re.fullmatch(r"!\s*(has\(self\.\w+\))", term)
        if negated:
            fields = [re.fullmatch(r"has\(self\.(\w+)\)", t) for t in _top_level(negated.group(1), "||")]
            if all(f and f.group(1) in added_fields for f in fields):
                return True
    return False


def _top_level(expr: str, operator: str) -> list[str]:
    """`expr` split at `operator` outside parentheses, brackets and quotes."""
    parts, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(expr):
        c = expr[i]
        if quote:
            quote = "" if c == quote and expr[i - 1] != "\\" else quote
        elif c in "'\"":
            quote = c
        elif c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth == 0 and expr.startswith(operator, i):
            parts.append(expr[start:i].strip())
            start = i + len(operator)
            i = start
            continue
        i += 1
    return parts + [expr[start:].strip()]


def _rule_change(old_rules: list[str], rule: str) -> str:
    """The new rule, or what it adds to the old rule it replaces (the most alike): the quoted
    names it refuses that the old one did not."""
    closest = max(old_rules, key=lambda r: difflib.SequenceMatcher(None, r, rule).ratio(), default=None)
    if closest is not None and difflib.SequenceMatcher(None, closest, rule).ratio() > 0.6:
        added = sorted(set(QUOTED.findall(rule)) - set(QUOTED.findall(closest)))
        if added:
            return f"rule now also names {', '.join(added)}"
        return f"rule {closest!r} -> {rule!r}"
    return f"new rule {rule!r}"


def without_descriptions(crd: dict) -> dict:
    """The CRD less what only people read (descriptions): what a patch version may change."""
    if isinstance(crd, dict):
        return {k: without_descriptions(v) for k, v in crd.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(crd, list):
        return [without_descriptions(v) for v in crd]
    return crd


def _without(schema: dict, key: str) -> dict:
    return {k: v for k, v in schema.items() if k != key}


def _bound(value) -> float:
    # exclusiveMinimum/Maximum are booleans in OpenAPI v3.0 (the CRD's dialect): True counts above False.
    return float(value)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    for change in breaking_changes(load(Path(args[0])), load(Path(args[1]))):
        print(change)
    return 0


if __name__ == "__main__":
    sys.exit(main())
