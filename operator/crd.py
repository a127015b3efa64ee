"""The ModelServing CustomResourceDefinition, generated from the spec and status models.

`scorestream crd` prints it (for users who apply CRDs themselves); `python -m
scorestream.operator.crd --write` writes `crds/modelserving.yaml` and the chart's copy, its
checked-in output, and a test fails when they differ. Pydantic's JSON Schema is turned into a structural OpenAPI v3 schema: refs
inlined, `Optional` as `nullable`, no `additionalProperties: false` (the API server prunes, and
kubectl's default strict field validation rejects unknown fields), CEL rules kept.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from scorestream import naming
from scorestream.api.v1alpha1 import modelserving as s

CRD_PATH = Path(__file__).resolve().parent.parent / "crds" / "modelserving.yaml"
# helm installs the CRDs of its chart's crds/ folder: the same file.
CHART_CRD_PATH = CRD_PATH.parent.parent / "charts" / "scorestream" / "crds" / "modelserving.yaml"

PRINTER_COLUMNS = [
    {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status",
     "description": "The Ready condition: the driver runs and the job scores records"},
    {"name": "Model", "type": "string", "jsonPath": ".status.model.current.name",
     "description": "The model the job serves"},
    {"name": "Version", "type": "string", "jsonPath": ".status.model.current.version",
     "description": "The served model's version"},
    {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas",
     "description": "Executors running"},
    {"name": "Lag", "type": "integer", "jsonPath": ".status.lag",
     "description": "Records of the data topic not yet processed"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Reason", "type": "string", "jsonPath": ".status.reason",
     "description": "Why it is not ready: the Degraded reason, else the Ready reason"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = _structural(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        # Keep the field's own description over the referenced type's.
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return {**target, **_structural(rest, defs)}
    out: dict[str, Any] = {}
    any_of = node.get("anyOf")
    if any_of and any(a.get("type") == "null" for a in any_of):
        others = [a for a in any_of if a.get("type") != "null"]
        assert len(others) == 1, f"unsupported union {any_of}"
        merged = {**_structural(others[0], defs), "nullable": True}
        node = {**{k: v for k, v in node.items() if k != "anyOf"}, **merged}
    for key, value in node.items():
        # additionalProperties: false is the API server's default for a structural schema;
        # `true` (a free-form map) is said with x-kubernetes-preserve-unknown-fields instead.
        if key in ("title", "$defs") or (key == "additionalProperties" and isinstance(value, bool)):
            continue
        if key == "default" and value is None:
            continue
        if key == "description":
            out[key] = re.sub(r"\s+", " ", value).strip()
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(value, (int, float)) \
                and not isinstance(value, bool):
            # JSON Schema 2020 form -> OpenAPI 3.0 form.
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out[key] = {k: _structural(v, defs) for k, v in value.items()}
        else:
            out[key] = _structural(value, defs)
    # A nested object whose fields all have defaults gets `{}` as default, so the API server
    # fills in its fields even when the user leaves the whole object out.
    for name, prop in out.get("properties", {}).items():
        if prop.get("type") == "object" and "properties" in prop and "default" not in prop \
                and not prop.get("required") and not prop.get("nullable") and name not in out.get("required", []):
            prop["default"] = {}
    return out


def _without_rules(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _without_rules(v) for k, v in schema.items() if k != "x-kubernetes-validations"}
    if isinstance(schema, list):
        return [_without_rules(v) for v in schema]
    return schema


def schema_of(model: type) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(raw, raw.get("$defs", {}))


def generate() -> dict[str, Any]:
    spec_schema = schema_of(s.ModelServingSpec)
    # The status is the operator's to write, validated by pydantic: the spec's CEL rules that reach
    # it through copies of spec types (status.model.history[].model) would only spend the API
    # server's cost budget, ten history entries at a time.
    status_schema = _without_rules(schema_of(s.ModelServingStatus))
    status_schema.pop("default", None)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{s.PLURAL}.{naming.GROUP}",
            "labels": {"app.kubernetes.io/name": "scorestream", "app.kubernetes.io/part-of": "scorestream"},
        },
        "spec": {
            "group": naming.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": s.KIND, "listKind": f"{s.KIND}List", "plural": s.PLURAL, "singular": s.SINGULAR,
                "shortNames": s.SHORT_NAMES,
                # Not "all": `kubectl delete all --all` would delete every serving job with the pods.
                "categories": ["scorestream"],
            },
            "versions": [{
                "name": s.VERSION,
                "served": True,
                "storage": True,
                "additionalPrinterColumns": PRINTER_COLUMNS,
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A ModelServing runs one Spark Structured Streaming job that scores a Kafka"
                                   " topic's records with a PMML or TensorFlow model and writes predictions to"
                                   " another topic; models are replaced from a models topic without a restart.",
                    "required": ["spec"],
                    "x-kubernetes-validations": [s.NAME_RULE],
                    "properties": {
                        "apiVersion": {"type": "string", "description": "The API version: scorestream.dev/v1alpha1."},
                        "kind": {"type": "string", "description": "ModelServing."},
                        "metadata": {"type": "object"},
                        "spec": {**spec_schema, "description": "The desired state of one serving job."},
                        "status": {**status_schema, "description": "What the operator and the job observe."},
                    },
                }},
            }],
        },
    }


def render() -> str:
    header = "# Generated by `scorestream crd` from scorestream/api/v1alpha1/modelserving.py. Do not edit.\n"
    return header + yaml.safe_dump(generate(), sort_keys=False, width=100)


def main(argv: list[str] | None = None) -> int:
    """A developer's command: the checked-in copies rewritten after a change of the spec types."""
    ap = argparse.ArgumentParser(prog="python -m scorestream.operator.crd",
                                 description="Print the ModelServing CRD, or write its checked-in copies.")
    ap.add_argument("--write", action="store_true", help=f"write {CRD_PATH.name} into crds/ and the chart's crds/")
    if not ap.parse_args(argv).write:
        sys.stdout.write(render())
        return 0
    for path in (CRD_PATH, CHART_CRD_PATH):
        path.write_text(render())
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
