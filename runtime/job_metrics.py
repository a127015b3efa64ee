"""The job's /metrics: the serving statistics (``StatsCollector``) plus readiness, executors and
the candidate on trial, every series labelled with the resource's namespace and name.

The labels come from the job's own configuration, so a Prometheus that scrapes jobs without the
PodMonitor's relabelling (a static target, a local run) still tells them apart.
"""

from __future__ import annotations

from typing import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from scorestream import monitoring as m
from scorestream.api.job_http import ModelFigures, Readiness
from scorestream.runtime import jvm_metrics
from scorestream.runtime.stats import ServingStats, StatsCollector


def _family(f: m.Family, doc: str) -> Metric:
    labels = list(f.labels)
    if f.kind == "counter":  # the client appends _total itself
        return CounterMetricFamily(f.name.removesuffix("_total"), doc, labels=labels)
    return GaugeMetricFamily(f.name, doc, labels=labels)


def _labelled(family: Metric, const: dict[str, str]) -> Metric:
    out = Metric(family.name, family.documentation, family.type, family.unit)
    out.samples = [s._replace(labels={**const, **s.labels}) for s in family.samples]
    return out


class JobCollector(Collector):
    def __init__(self, stats: ServingStats, ready: Callable[[], Readiness], namespace: str, name: str):
        self.stats = stats
        self.ready = ready
        self.inner = StatsCollector(stats)
        self.const = dict(zip(m.RESOURCE_LABELS, (namespace, name)))

    def collect(self):
        for family in self.inner.collect():
            yield _labelled(family, self.const)
        for family in self._own():
            yield _labelled(family, self.const)
        for family in jvm_metrics.families(self.stats.jvm() if self.stats.jvm is not None else None):
            yield _labelled(family, self.const)

    def _own(self):
        ready = _family(m.JOB_READY, "1 when the job answers /readyz with 200 (serving), else 0")
        ready.add_metric([], 1 if self.ready().ready else 0)
        yield ready
        totals = self.stats.totals()
        for f, value, doc in ((m.EXECUTORS, totals.executors, "Executors running"),
                              (m.EXECUTOR_TARGET, totals.executorTarget, "Executors asked for")):
            g = _family(f, doc)
            if value is not None:
                g.add_metric([], value)
            yield g

        errors = _family(m.MODEL_ERRORS, "Records a model failed to score")
        info = _family(m.CANDIDATE_INFO, "The candidate on trial per data type (value 1)")
        share = _family(m.CANDIDATE_RATIO, "A canary's share of records, 0 to 1 (a shadow: 0, it scores every "
                                           "record unwritten)")
        compared = _family(m.SHADOW_COMPARED, "Records both the shadow and the serving model scored")
        shadow_errors = _family(m.SHADOW_ERRORS, "Records the shadow failed where the serving model scored")
        agreement = _family(m.SHADOW_AGREEMENT, "Share of records, 0 to 1, the shadow predicted as the serving model did")
        diff = _family(m.SHADOW_MEAN_ABS_DIFF, "Mean absolute difference of the shadow's and the serving "
                                               "model's predictions")
        drift = _DriftFamilies()
        for dt, serving in self.stats.serving_info().items():
            for fig in (serving, *serving.previous):
                errors.add_metric([dt, fig.name, fig.version], fig.errors)
            for fig in (serving, *serving.previous, *([serving.candidate] if serving.candidate else [])):
                drift.add([dt, fig.name, fig.version], fig)
            c = serving.candidate
            if c is None:
                continue
            key = [dt, c.name, c.version]
            info.add_metric(key + [c.strategy], 1)
            share.add_metric([dt, c.strategy], c.percent / 100)
            if c.comparison is None:  # a canary: its errors are its own scoring's
                errors.add_metric(key, c.errors)
                continue
            compared.add_metric(key, c.comparison.records)
            shadow_errors.add_metric(key, c.comparison.errors)
            if c.comparison.agreement is not None:
                agreement.add_metric(key, c.comparison.agreement)
            if c.comparison.meanAbsDiff is not None:
                diff.add_metric(key, c.comparison.meanAbsDiff)
        yield from (errors, info, share, compared, shadow_errors, agreement, diff)
        yield from drift.families()


class _DriftFamilies:
    """Each model version's drift against its baseline (``ModelDrift``), as Prometheus series."""

    def __init__(self):
        self.psi = _family(m.PREDICTION_DRIFT_PSI, "Population stability index of the model's predictions against "
                                                   "those on its verification sample")
        self.ks = _family(m.PREDICTION_DRIFT_KS, "Kolmogorov-Smirnov statistic (0 to 1) of the model's predictions "
                                                 "against those on its verification sample")
        self.feature_psi = _family(m.FEATURE_DRIFT_PSI, "Population stability index of a model input against its "
                                                        "verification sample")
        self.feature_ks = _family(m.FEATURE_DRIFT_KS, "Kolmogorov-Smirnov statistic (0 to 1) of a model input "
                                                      "against its verification sample")
        self.records = _family(m.DRIFT_RECORDS, "Predictions counted into the model's drift histograms")

    def add(self, key: list[str], fig: ModelFigures) -> None:
        d = fig.drift
        if d is None:
            return
        self.records.add_metric(key, d.records)
        for family, value in ((self.psi, d.prediction.psi), (self.ks, d.prediction.ks)):
            if value is not None:
                family.add_metric(key, value)
        for feature, figures in d.features.items():
            for family, value in ((self.feature_psi, figures.psi), (self.feature_ks, figures.ks)):
                if value is not None:
                    family.add_metric(key + [feature], value)

    def families(self):
        return self.psi, self.ks, self.feature_psi, self.feature_ks, self.records
