"""What PMML4S itself answers for wine rows: the reference a served prediction must equal."""

from __future__ import annotations

import json
import math

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
