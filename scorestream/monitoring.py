"""What scorestream exposes to Prometheus: the metric catalogue.

The dashboard (scorestream/tools/dashboard.py), the alert rules and their tests are checked against
it: each family is named once here, and a test compares the catalogue with what the real collectors
(the job's and the operator's) expose.
"""

from __future__ import annotations

from dataclasses import dataclass
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
JOB_POLLS = Family("scorestream_operator_job_polls_total", "counter", "operator", ("answer",))
# client-go's workqueue metrics, named as the operator's: keys waiting, and how long each waited.
QUEUE_DEPTH = Family("scorestream_operator_workqueue_depth", "gauge", "operator")
QUEUE_SECONDS = Family("scorestream_operator_workqueue_queue_duration_seconds", "histogram", "operator", ("priority",))

FAMILIES: tuple[Family, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Family))


def series_names() -> set[str]:
    return {s for f in FAMILIES for s in f.series}
