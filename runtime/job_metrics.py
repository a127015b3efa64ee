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
from scorestream.api.job_http import Readiness
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
        info = _family(m.CANDIDATE_INFO, "The candidate on trial per dataType (value 1)")
        percent = _family(m.CANDIDATE_PERCENT, "A canary's share of records in percent (a shadow: 0, it scores "
                                               "every record unwritten)")
        compared = _family(m.SHADOW_COMPARED, "Records both the shadow and the serving model scored")
        shadow_errors = _family(m.SHADOW_ERRORS, "Records the shadow failed where the serving model scored")
        agreement = _family(m.SHADOW_AGREEMENT, "Share of records the shadow predicted as the serving model did")
        diff = _family(m.SHADOW_MEAN_ABS_DIFF, "Mean absolute difference of the shadow's and the serving "
                                               "model's predictions")
        for dt, serving in self.stats.serving_info().items():
            for fig in (serving, *serving.previous):
                errors.add_metric([dt, fig.name, fig.version], fig.errors)
            c = serving.candidate
            if c is None:
                continue
            key = [dt, c.name, c.version]
            info.add_metric(key + [c.strategy], 1)
            percent.add_metric([dt, c.strategy], c.percent)
            if c.comparison is None:  # a canary: its errors are its own scoring's
                errors.add_metric(key, c.errors)
                continue
            compared.add_metric(key, c.comparison.records)
            shadow_errors.add_metric(key, c.comparison.errors)
            if c.comparison.agreement is not None:
                agreement.add_metric(key, c.comparison.agreement)
            if c.comparison.meanAbsDiff is not None:
                diff.add_metric(key, c.comparison.meanAbsDiff)
        yield from (errors, info, percent, compared, shadow_errors, agreement, diff)
