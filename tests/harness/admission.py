"""What the API server checks when a ModelServing is written, done offline for the tests.

The generated CRD's OpenAPI schema (openapi-schema-validator) and every CEL rule in it
(cel-python), transition rules with the old object as `oldSelf`, as the API server does on update:
fast enough for hypothesis to try hundreds of resources, and a check that pydantic agrees with the
CRD. The real API server replays the same cases (tests/test_user_paths.py), so the two cannot
drift apart unnoticed.
"""

from __future__ import annotations

from typing import Any

import celpy
from openapi_schema_validator import OAS30Validator

from scorestream.operator import crd

_SCHEMA = crd.generate()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
_CEL = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}


def _program(rule: str):
    if rule not in _PROGRAMS:
        _PROGRAMS[rule] = _CEL.program(_CEL.compile(rule))
    return _PROGRAMS[rule]


def _cel_errors(schema: dict, node: Any, old: Any, where: str) -> list[str]:
    errors = []
    for v in schema.get("x-kubernetes-validations", []):
        transition = "oldSelf" in v["rule"]
        if transition and old is None:
            continue  # transition rules apply on update only
        activation = {"self": celpy.json_to_cel(node)}
        if transition:
            activation["oldSelf"] = celpy.json_to_cel(old)
        result = _program(v["rule"]).evaluate(activation)
        if result is not True and not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            # The API server answers with messageExpression's value when the rule has one.
            message = str(_program(v["messageExpression"]).evaluate(activation)) if "messageExpression" in v \
                else v["message"]
            errors.append(f"{where or '<root>'}: Invalid value: {message}")
    if isinstance(node, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in node and node[key] is not None:
                old_sub = old.get(key) if isinstance(old, dict) else None
                errors += _cel_errors(sub, node[key], old_sub, f"{where}.{key}" if where else key)
    return errors


def _with_defaults(schema: dict, node: Any) -> Any:
    """Apply schema defaults as the API server does before validating."""
    if not isinstance(node, dict) or "properties" not in schema:
        return node
    out = dict(node)
    for key, sub in schema["properties"].items():
        if key not in out and "default" in sub:
            out[key] = sub["default"]
        if key in out:
            out[key] = _with_defaults(sub, out[key])
    return out


def admit(obj: dict, old: dict | None = None) -> list[str]:
    """Error messages the API server would answer with; empty: admitted."""
    obj = _with_defaults(_SCHEMA, obj)
    errors = []
    for e in OAS30Validator(_SCHEMA).iter_errors(obj):
        where = ".".join(str(p) for p in e.absolute_path)
        errors.append(f"{where or '<root>'}: {e.message}")
    if errors:
        return errors  # the API server stops at schema errors before CEL
    old = _with_defaults(_SCHEMA, old) if old is not None else None
    return _cel_errors(_SCHEMA, obj, old, "")
