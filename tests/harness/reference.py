"""What PMML4S itself answers for wine rows: the reference a served prediction must equal."""

from __future__ import annotations

import json
import math

import pytest

from scorestream.tools.demo import feed


def pmml4s_outputs(pmml: bytes, rows) -> list[dict]:
    """PMML4S's outputs through pypmml, one dict per row, all rows in one call.

    A call per row is a Py4J round trip each, which on a loaded machine took minutes. The JSON is
    written and read here, not by pandas, whose to_json rounds to 10 digits; Java writes doubles
    exactly and a missing value as null, which is NaN here as it is in a per-row answer.
    """
    from pypmml import Model

    table = {"columns": list(feed.WINE_COLUMNS), "data": [[float(v) for v in r[:11]] for r in rows]}
    answer = json.loads(Model.fromString(pmml.decode()).predict(json.dumps(table)))
    return [{k: math.nan if v is None else v for k, v in zip(answer["columns"], row)} for row in answer["data"]]


def assert_pmml_equal(outputs: list[dict], expected: list[dict], label: str) -> None:
    """Served outputs (in the rows' order) equal PMML4S's to the last bit or so: each numeric output,
    a missing one as null, and the predicted label or value."""
    assert len(outputs) == len(expected)
    for i, (got, want) in enumerate(zip(outputs, expected)):
        numeric = {k: v for k, v in want.items() if isinstance(v, float)}
        assert set(got["outputs"]) == set(numeric), f"{label} row {i}: outputs {got['outputs']} vs {want}"
        for k, v in numeric.items():
            if math.isnan(v):
                assert got["outputs"][k] is None, f"{label} row {i}: {k}"
            else:
                assert got["outputs"][k] == pytest.approx(v, rel=1e-12, abs=1e-12), f"{label} row {i}: {k}"
        predicted = [v for k, v in want.items() if k.startswith("predicted_")]
        if predicted:
            p = predicted[0]
            assert (got["prediction"] == pytest.approx(float(p))) if isinstance(p, float) else got["label"] == p
