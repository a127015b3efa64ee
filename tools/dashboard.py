"""The Grafana dashboard over the metric catalogue (scorestream.monitoring), and its command: the
dashboard JSON in the chart is generated from ``DASHBOARD`` (``python -m scorestream.tools.dashboard
--write``; a test fails on drift)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from scorestream import monitoring as m

# Grafana's own variables, which a query may use; tests substitute them before parsing.
SEL = 'namespace=~"$namespace", name=~"$name"'
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: Literal["timeseries", "state-timeline"] = "timeseries"
    description: str = ""


def _by(*labels: str) -> str:
    return ", ".join(("namespace", "name") + labels)


DASHBOARD: tuple[Panel, ...] = (
    Panel("Records per second", (
        Query(f'sum by ({_by("outcome")}) (rate({m.RECORDS.name}{{{SEL}}}[{RATE}]))',
              "{{namespace}}/{{name}} {{outcome}}"),
    ), unit="rps", description="Read (in), written (out) and dead-lettered records."),
    Panel("Dead-lettered share", (
        Query(f'sum by ({_by()}) (rate({m.RECORDS.name}{{{SEL}, outcome="dead_lettered"}}[{RATE}]))'
              f' / sum by ({_by()}) (rate({m.RECORDS.name}{{{SEL}, outcome="in"}}[{RATE}]))',
              "{{namespace}}/{{name}}"),
    ), unit="percentunit"),
    Panel("Scoring latency per record", tuple(
        Query(f'histogram_quantile({q}, sum by ({_by("le")}) (rate({m.SCORING_LATENCY.name}_bucket{{{SEL}}}[{RATE}])))',
              f"{{{{namespace}}}}/{{{{name}}}} p{round(q * 100)}")
        for q in (0.5, 0.9, 0.99)
    ), unit="s"),
    Panel("Consumer lag", (
        Query(f"sum by ({_by()}) ({m.CONSUMER_LAG.name}{{{SEL}}})", "{{namespace}}/{{name}}"),
    ), description="Records in the data topic not yet processed (the data consumer group's lag)."),
    Panel("Micro-batches per second", (
        Query(f"sum by ({_by()}) (rate({m.BATCHES.name}{{{SEL}}}[{RATE}]))", "{{namespace}}/{{name}}"),
    ), unit="ops"),
    Panel("Serving model versions", (
        Query(f"max by ({_by('data_type', 'model', 'version')}) ({m.MODEL_INFO.name}{{{SEL}}})",
              "{{name}} {{data_type}}: {{model}} {{version}}"),
    ), kind="state-timeline", description="Which version served each dataType, over time."),
    Panel("Records scored per model version", (
        Query(f"sum by ({_by('data_type', 'model', 'version')}) (rate({m.MODEL_INVOCATIONS.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{model}} {{version}}"),
    ), unit="rps", description="During a canary, the split between the serving model and the candidate."),
    Panel("Model errors per second", (
        Query(f"sum by ({_by('data_type', 'model', 'version')}) (rate({m.MODEL_ERRORS.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{model}} {{version}}"),
    ), unit="rps"),
    Panel("Candidate on trial", (
        Query(f"max by ({_by('data_type', 'model', 'version', 'strategy')}) ({m.CANDIDATE_INFO.name}{{{SEL}}})",
              "{{name}} {{data_type}}: {{strategy}} {{model}} {{version}}"),
    ), kind="state-timeline", description="The canary or shadow standing next to the serving model."),
    Panel("Canary share of records", (
        Query(f"max by ({_by('data_type', 'strategy')}) ({m.CANDIDATE_RATIO.name}{{{SEL}}})",
              "{{name}} {{data_type}} {{strategy}}"),
    ), unit="percentunit", description="The share of records a canary scores; a shadow (0) scores every record, "
                                       "unwritten."),
    Panel("Shadow agreement with the serving model", (
        Query(f"max by ({_by('data_type', 'model', 'version')}) ({m.SHADOW_AGREEMENT.name}{{{SEL}}})",
              "{{name}} {{model}} {{version}} agreement"),
        Query(f"max by ({_by('data_type', 'model', 'version')}) ({m.SHADOW_MEAN_ABS_DIFF.name}{{{SEL}}})",
              "{{name}} {{model}} {{version}} mean |diff|"),
    ), description="Share of equal predictions, and the mean absolute difference of predicted values."),
    Panel("Shadow comparisons per second", (
        Query(f"sum by ({_by('data_type', 'model', 'version')}) (rate({m.SHADOW_COMPARED.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{model}} {{version}} compared"),
        Query(f"sum by ({_by('data_type', 'model', 'version')}) (rate({m.SHADOW_ERRORS.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{model}} {{version}} errors"),
    ), unit="rps"),
    Panel("Prediction drift against the baseline", (
        Query(f"max by ({_by('data_type', 'model', 'version')}) ({m.PREDICTION_DRIFT_PSI.name}{{{SEL}}})",
              "{{name}} {{model}} {{version}} PSI"),
        Query(f"max by ({_by('data_type', 'model', 'version')}) ({m.PREDICTION_DRIFT_KS.name}{{{SEL}}})",
              "{{name}} {{model}} {{version}} KS"),
    ), description="Each model version's predictions against those it made on its verification sample: the "
                   "population stability index (below 0.1 stable, above 0.25 shifted) and the Kolmogorov-Smirnov "
                   "statistic (0 to 1)."),
    Panel("Feature drift against the baseline", (
        Query(f"max by ({_by('data_type', 'model', 'version', 'feature')}) ({m.FEATURE_DRIFT_PSI.name}{{{SEL}}})",
              "{{name}} {{version}} {{feature}} PSI"),
        Query(f"max by ({_by('data_type', 'model', 'version', 'feature')}) ({m.FEATURE_DRIFT_KS.name}{{{SEL}}})",
              "{{name}} {{version}} {{feature}} KS"),
        Query(f"sum by ({_by('data_type', 'model', 'version')}) (rate({m.DRIFT_RECORDS.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{version}} records counted per second"),
    ), description="Each input of each model version against its verification sample."),
    Panel("Executors", (
        Query(f"sum by ({_by()}) ({m.EXECUTORS.name}{{{SEL}}})", "{{namespace}}/{{name}} running"),
        Query(f"sum by ({_by()}) ({m.EXECUTOR_TARGET.name}{{{SEL}}})", "{{namespace}}/{{name}} target"),
    )),
    Panel("Driver JVM", (
        Query(f"sum by ({_by('area')}) ({m.JVM_MEMORY_USED.name}{{{SEL}}})", "{{name}} {{area}} used"),
        Query(f"sum by ({_by('area')}) ({m.JVM_MEMORY_COMMITTED.name}{{{SEL}}})", "{{name}} {{area}} committed"),
        Query(f"sum by ({_by('area')}) ({m.JVM_MEMORY_MAX.name}{{{SEL}}})", "{{name}} {{area}} max"),
    ), unit="bytes", description="The driver's heap and non-heap memory."),
    Panel("Driver JVM: garbage collection and threads", (
        Query(f"sum by ({_by('gc')}) (rate({m.JVM_GC_SECONDS.name}{{{SEL}}}[{RATE}]))", "{{name}} {{gc}} GC s/s"),
        Query(f"sum by ({_by('gc')}) (rate({m.JVM_GC_COLLECTIONS.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{gc}} collections/s"),
        Query(f"max by ({_by('state')}) ({m.JVM_THREADS.name}{{{SEL}}})", "{{name}} threads {{state}}"),
    )),
    Panel("Executor JVMs", (
        Query(f"max by ({_by('executor_id')}) ({m.EXECUTOR_PEAK_HEAP.name}{{{SEL}}})", "{{name}} {{executor_id}} peak heap"),
        Query(f"max by ({_by('executor_id')}) ({m.EXECUTOR_STORAGE_USED.name}{{{SEL}}})",
              "{{name}} {{executor_id}} storage used"),
        Query(f"max by ({_by('executor_id')}) ({m.EXECUTOR_STORAGE_MAX.name}{{{SEL}}})",
              "{{name}} {{executor_id}} storage"),
    ), unit="bytes", description="Per executor, from Spark's status store (the executors' heartbeats); in local "
                                 "mode the driver is the one executor."),
    Panel("Executor tasks and garbage collection", (
        Query(f"sum by ({_by('executor_id', 'outcome')}) (rate({m.EXECUTOR_TASKS.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{executor_id}} {{outcome}} tasks/s"),
        Query(f"max by ({_by('executor_id')}) ({m.EXECUTOR_ACTIVE_TASKS.name}{{{SEL}}})",
              "{{name}} {{executor_id}} running tasks"),
        Query(f"sum by ({_by('executor_id')}) (rate({m.EXECUTOR_GC_SECONDS.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{executor_id}} GC s/s"),
    )),
    Panel("Job ready", (
        Query(f"max by ({_by()}) ({m.JOB_READY.name}{{{SEL}}})", "{{namespace}}/{{name}}"),
    ), kind="state-timeline"),
)


def concrete(expr: str, rate_interval: str = "1m", **values: str) -> str:
    """A panel's query as Prometheus receives it from Grafana: its variables substituted (all
    values of $namespace and $name unless given)."""
    for var, value in {"namespace": ".*", "name": ".*", **values}.items():
        expr = expr.replace(f'"${var}"', f'"{value}"')
    return expr.replace(RATE, rate_interval)


def _variable(name: str, label: str, within: str = "") -> dict:
    query = f"label_values({m.RECORDS.name}{within}, {name})"
    return {"name": name, "label": label, "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": query, "refId": name}, "definition": query,
            "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2, "sort": 1,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}}


def dashboard() -> dict:
    panels = []
    for i, p in enumerate(DASHBOARD):
        panels.append({
            "id": i + 1, "type": p.kind, "title": p.title, "description": p.description,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
            "targets": [{"refId": chr(ord("A") + j), "expr": q.expr, "legendFormat": q.legend, "range": True}
                        for j, q in enumerate(p.queries)],
        })
    return {
        "uid": "scorestream", "title": "scorestream", "tags": ["scorestream", "kafka", "spark"],
        "schemaVersion": 39, "version": 1, "editable": True, "timezone": "browser",
        "time": {"from": "now-1h", "to": "now"}, "refresh": "30s",
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0},
            _variable("namespace", "Namespace"),
            _variable("name", "ModelServing", '{namespace=~"$namespace"}'),
        ]},
        "panels": panels,
    }


DASHBOARD_FILE = Path(__file__).resolve().parents[1] / "charts" / "scorestream" / "dashboards" / "scorestream.json"


def dashboard_json() -> str:
    return json.dumps(dashboard(), indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    from scorestream.generated import print_or_write

    return print_or_write("python -m scorestream.tools.dashboard", "Print, or write into the chart, the Grafana dashboard.",
                          DASHBOARD_FILE, dashboard_json, argv)


if __name__ == "__main__":
    sys.exit(main())
