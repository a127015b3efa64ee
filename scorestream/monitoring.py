"""What scorestream exposes to Prometheus, and the Grafana dashboard over it.

The metric catalogue is what the dashboard, the alert rules and their tests are checked against:
each family is named once here, and a test compares the catalogue with what the real collectors
(the job's and the operator's) expose. The dashboard JSON in the chart is generated from
``DASHBOARD`` (``python -m scorestream.monitoring --write``; a test fails on drift).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Kind = Literal["counter", "gauge", "histogram"]
Source = Literal["job", "operator"]

# Every job series carries these (from its JobConfig), every per-resource operator series too:
# one resource's job and status line up in a query without relabelling.
RESOURCE_LABELS = ("namespace", "name")


@dataclass(frozen=True)
class Family:
    name: str  # as exposed: counters end in _total
    kind: Kind
    source: Source
    labels: tuple[str, ...] = ()

    @property
    def series(self) -> tuple[str, ...]:
        """The series names Prometheus stores for this family."""
        if self.kind == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)


MODEL = ("data_type", "model", "version")

# The job's /metrics (runtime/stats.py StatsCollector, runtime/job_metrics.py JobCollector).
RECORDS = Family("scorestream_records_total", "counter", "job", ("outcome",))  # outcome: in, out, dead_lettered
BATCHES = Family("scorestream_batches_total", "counter", "job")
SCORING_LATENCY = Family("scorestream_scoring_latency_seconds", "histogram", "job")
CONSUMER_LAG = Family("scorestream_consumer_lag", "gauge", "job")
MODEL_INVOCATIONS = Family("scorestream_model_invocations_total", "counter", "job", MODEL)
MODEL_INFO = Family("scorestream_model_info", "gauge", "job", MODEL)
MODEL_SINCE = Family("scorestream_model_since_timestamp_seconds", "gauge", "job", ("data_type",))
MODEL_SWITCHES = Family("scorestream_model_switches_total", "counter", "job")
MODELS_REJECTED = Family("scorestream_models_rejected_total", "counter", "job")
JOB_READY = Family("scorestream_job_ready", "gauge", "job")
EXECUTORS = Family("scorestream_executors", "gauge", "job")
EXECUTOR_TARGET = Family("scorestream_executor_target", "gauge", "job")
MODEL_ERRORS = Family("scorestream_model_errors_total", "counter", "job", MODEL)
CANDIDATE_INFO = Family("scorestream_candidate_info", "gauge", "job", MODEL + ("strategy",))
CANDIDATE_RATIO = Family("scorestream_candidate_ratio", "gauge", "job", ("data_type", "strategy"))
SHADOW_COMPARED = Family("scorestream_shadow_compared_total", "counter", "job", MODEL)
SHADOW_ERRORS = Family("scorestream_shadow_errors_total", "counter", "job", MODEL)
SHADOW_AGREEMENT = Family("scorestream_shadow_agreement_ratio", "gauge", "job", MODEL)
SHADOW_MEAN_ABS_DIFF = Family("scorestream_shadow_mean_abs_diff", "gauge", "job", MODEL)
# A model version's inputs and predictions against its baseline (its verification sample).
PREDICTION_DRIFT_PSI = Family("scorestream_prediction_drift_psi", "gauge", "job", MODEL)
PREDICTION_DRIFT_KS = Family("scorestream_prediction_drift_ks", "gauge", "job", MODEL)
FEATURE_DRIFT_PSI = Family("scorestream_feature_drift_psi", "gauge", "job", MODEL + ("feature",))
FEATURE_DRIFT_KS = Family("scorestream_feature_drift_ks", "gauge", "job", MODEL + ("feature",))
DRIFT_RECORDS = Family("scorestream_drift_records_total", "counter", "job", MODEL)
# The driver's JVM, and each executor's as Spark's status store has it (runtime/jvm_metrics.py).
JVM_MEMORY_USED = Family("scorestream_jvm_memory_used_bytes", "gauge", "job", ("area",))
JVM_MEMORY_COMMITTED = Family("scorestream_jvm_memory_committed_bytes", "gauge", "job", ("area",))
JVM_MEMORY_MAX = Family("scorestream_jvm_memory_max_bytes", "gauge", "job", ("area",))
JVM_GC_COLLECTIONS = Family("scorestream_jvm_gc_collections_total", "counter", "job", ("gc",))
JVM_GC_SECONDS = Family("scorestream_jvm_gc_collection_seconds_total", "counter", "job", ("gc",))
JVM_THREADS = Family("scorestream_jvm_threads", "gauge", "job", ("state",))
EXECUTOR_STORAGE_USED = Family("scorestream_executor_storage_memory_used_bytes", "gauge", "job", ("executor_id",))
EXECUTOR_STORAGE_MAX = Family("scorestream_executor_storage_memory_max_bytes", "gauge", "job", ("executor_id",))
EXECUTOR_PEAK_HEAP = Family("scorestream_executor_jvm_heap_peak_bytes", "gauge", "job", ("executor_id",))
EXECUTOR_GC_SECONDS = Family("scorestream_executor_gc_seconds_total", "counter", "job", ("executor_id",))
EXECUTOR_TASKS = Family("scorestream_executor_tasks_total", "counter", "job", ("executor_id", "outcome"))
EXECUTOR_ACTIVE_TASKS = Family("scorestream_executor_active_tasks", "gauge", "job", ("executor_id",))

# The operator's /metrics (operator/metrics.py).
CONDITION = Family("scorestream_modelserving_condition", "gauge", "operator", ("type", "status", "reason"))
PHASE = Family("scorestream_modelserving_phase", "gauge", "operator", ("phase",))
RECONCILES = Family("scorestream_operator_reconciles_total", "counter", "operator", ("trigger", "outcome"))
RECONCILE_SECONDS = Family("scorestream_operator_reconcile_seconds", "histogram", "operator", ("trigger",))
ROLLOUT_STEPS = Family("scorestream_operator_rollout_steps_total", "counter", "operator", ("step",))

FAMILIES: tuple[Family, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Family))


def series_names() -> set[str]:
    return {s for f in FAMILIES for s in f.series}


# -- the Grafana dashboard -------------------------------------------------------------------------

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
        Query(f'sum by ({_by("outcome")}) (rate({RECORDS.name}{{{SEL}}}[{RATE}]))',
              "{{namespace}}/{{name}} {{outcome}}"),
    ), unit="rps", description="Read (in), written (out) and dead-lettered records."),
    Panel("Dead-lettered share", (
        Query(f'sum by ({_by()}) (rate({RECORDS.name}{{{SEL}, outcome="dead_lettered"}}[{RATE}]))'
              f' / sum by ({_by()}) (rate({RECORDS.name}{{{SEL}, outcome="in"}}[{RATE}]))',
              "{{namespace}}/{{name}}"),
    ), unit="percentunit"),
    Panel("Scoring latency per record", tuple(
        Query(f'histogram_quantile({q}, sum by ({_by("le")}) (rate({SCORING_LATENCY.name}_bucket{{{SEL}}}[{RATE}])))',
              f"{{{{namespace}}}}/{{{{name}}}} p{round(q * 100)}")
        for q in (0.5, 0.9, 0.99)
    ), unit="s"),
    Panel("Consumer lag", (
        Query(f"sum by ({_by()}) ({CONSUMER_LAG.name}{{{SEL}}})", "{{namespace}}/{{name}}"),
    ), description="Records in the data topic not yet processed (the data consumer group's lag)."),
    Panel("Micro-batches per second", (
        Query(f"sum by ({_by()}) (rate({BATCHES.name}{{{SEL}}}[{RATE}]))", "{{namespace}}/{{name}}"),
    ), unit="ops"),
    Panel("Serving model versions", (
        Query(f"max by ({_by('data_type', 'model', 'version')}) ({MODEL_INFO.name}{{{SEL}}})",
              "{{name}} {{data_type}}: {{model}} {{version}}"),
    ), kind="state-timeline", description="Which version served each dataType, over time."),
    Panel("Records scored per model version", (
        Query(f"sum by ({_by('data_type', 'model', 'version')}) (rate({MODEL_INVOCATIONS.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{model}} {{version}}"),
    ), unit="rps", description="During a canary, the split between the serving model and the candidate."),
    Panel("Model errors per second", (
        Query(f"sum by ({_by('data_type', 'model', 'version')}) (rate({MODEL_ERRORS.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{model}} {{version}}"),
    ), unit="rps"),
    Panel("Candidate on trial", (
        Query(f"max by ({_by('data_type', 'model', 'version', 'strategy')}) ({CANDIDATE_INFO.name}{{{SEL}}})",
              "{{name}} {{data_type}}: {{strategy}} {{model}} {{version}}"),
    ), kind="state-timeline", description="The canary or shadow standing next to the serving model."),
    Panel("Canary share of records", (
        Query(f"max by ({_by('data_type', 'strategy')}) ({CANDIDATE_RATIO.name}{{{SEL}}})",
              "{{name}} {{data_type}} {{strategy}}"),
    ), unit="percentunit", description="The share of records a canary scores; a shadow (0) scores every record, "
                                       "unwritten."),
    Panel("Shadow agreement with the serving model", (
        Query(f"max by ({_by('data_type', 'model', 'version')}) ({SHADOW_AGREEMENT.name}{{{SEL}}})",
              "{{name}} {{model}} {{version}} agreement"),
        Query(f"max by ({_by('data_type', 'model', 'version')}) ({SHADOW_MEAN_ABS_DIFF.name}{{{SEL}}})",
              "{{name}} {{model}} {{version}} mean |diff|"),
    ), description="Share of equal predictions, and the mean absolute difference of predicted values."),
    Panel("Shadow comparisons per second", (
        Query(f"sum by ({_by('data_type', 'model', 'version')}) (rate({SHADOW_COMPARED.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{model}} {{version}} compared"),
        Query(f"sum by ({_by('data_type', 'model', 'version')}) (rate({SHADOW_ERRORS.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{model}} {{version}} errors"),
    ), unit="rps"),
    Panel("Prediction drift against the baseline", (
        Query(f"max by ({_by('data_type', 'model', 'version')}) ({PREDICTION_DRIFT_PSI.name}{{{SEL}}})",
              "{{name}} {{model}} {{version}} PSI"),
        Query(f"max by ({_by('data_type', 'model', 'version')}) ({PREDICTION_DRIFT_KS.name}{{{SEL}}})",
              "{{name}} {{model}} {{version}} KS"),
    ), description="Each model version's predictions against those it made on its verification sample: the "
                   "population stability index (below 0.1 stable, above 0.25 shifted) and the Kolmogorov-Smirnov "
                   "statistic (0 to 1)."),
    Panel("Feature drift against the baseline", (
        Query(f"max by ({_by('data_type', 'model', 'version', 'feature')}) ({FEATURE_DRIFT_PSI.name}{{{SEL}}})",
              "{{name}} {{version}} {{feature}} PSI"),
        Query(f"max by ({_by('data_type', 'model', 'version', 'feature')}) ({FEATURE_DRIFT_KS.name}{{{SEL}}})",
              "{{name}} {{version}} {{feature}} KS"),
        Query(f"sum by ({_by('data_type', 'model', 'version')}) (rate({DRIFT_RECORDS.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{version}} records counted per second"),
    ), description="Each input of each model version against its verification sample."),
    Panel("Executors", (
        Query(f"sum by ({_by()}) ({EXECUTORS.name}{{{SEL}}})", "{{namespace}}/{{name}} running"),
        Query(f"sum by ({_by()}) ({EXECUTOR_TARGET.name}{{{SEL}}})", "{{namespace}}/{{name}} target"),
    )),
    Panel("Driver JVM", (
        Query(f"sum by ({_by('area')}) ({JVM_MEMORY_USED.name}{{{SEL}}})", "{{name}} {{area}} used"),
        Query(f"sum by ({_by('area')}) ({JVM_MEMORY_COMMITTED.name}{{{SEL}}})", "{{name}} {{area}} committed"),
        Query(f"sum by ({_by('area')}) ({JVM_MEMORY_MAX.name}{{{SEL}}})", "{{name}} {{area}} max"),
    ), unit="bytes", description="The driver's heap and non-heap memory."),
    Panel("Driver JVM: garbage collection and threads", (
        Query(f"sum by ({_by('gc')}) (rate({JVM_GC_SECONDS.name}{{{SEL}}}[{RATE}]))", "{{name}} {{gc}} GC s/s"),
        Query(f"sum by ({_by('gc')}) (rate({JVM_GC_COLLECTIONS.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{gc}} collections/s"),
        Query(f"max by ({_by('state')}) ({JVM_THREADS.name}{{{SEL}}})", "{{name}} threads {{state}}"),
    )),
    Panel("Executor JVMs", (
        Query(f"max by ({_by('executor_id')}) ({EXECUTOR_PEAK_HEAP.name}{{{SEL}}})", "{{name}} {{executor_id}} peak heap"),
        Query(f"max by ({_by('executor_id')}) ({EXECUTOR_STORAGE_USED.name}{{{SEL}}})",
              "{{name}} {{executor_id}} storage used"),
        Query(f"max by ({_by('executor_id')}) ({EXECUTOR_STORAGE_MAX.name}{{{SEL}}})",
              "{{name}} {{executor_id}} storage"),
    ), unit="bytes", description="Per executor, from Spark's status store (the executors' heartbeats); in local "
                                 "mode the driver is the one executor."),
    Panel("Executor tasks and garbage collection", (
        Query(f"sum by ({_by('executor_id', 'outcome')}) (rate({EXECUTOR_TASKS.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{executor_id}} {{outcome}} tasks/s"),
        Query(f"max by ({_by('executor_id')}) ({EXECUTOR_ACTIVE_TASKS.name}{{{SEL}}})",
              "{{name}} {{executor_id}} running tasks"),
        Query(f"sum by ({_by('executor_id')}) (rate({EXECUTOR_GC_SECONDS.name}{{{SEL}}}[{RATE}]))",
              "{{name}} {{executor_id}} GC s/s"),
    )),
    Panel("Job ready", (
        Query(f"max by ({_by()}) ({JOB_READY.name}{{{SEL}}})", "{{namespace}}/{{name}}"),
    ), kind="state-timeline"),
)


def concrete(expr: str, rate_interval: str = "1m", **values: str) -> str:
    """A panel's query as Prometheus receives it from Grafana: its variables substituted (all
    values of $namespace and $name unless given)."""
    for var, value in {"namespace": ".*", "name": ".*", **values}.items():
        expr = expr.replace(f'"${var}"', f'"{value}"')
    return expr.replace(RATE, rate_interval)


def _variable(name: str, label: str, within: str = "") -> dict:
    query = f"label_values({RECORDS.name}{within}, {name})"
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

    return print_or_write("python -m scorestream.monitoring", "Print, or write into the chart, the Grafana dashboard.",
                          DASHBOARD_FILE, dashboard_json, argv)


if __name__ == "__main__":
    sys.exit(main())
