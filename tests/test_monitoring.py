"""The chart's monitoring assets, checked with the real tools: the PrometheusRule's groups pass
`promtool check rules` and the unit tests in tests/monitoring/alerts.test.yaml (`promtool test
rules`, one test or more per alert); every dashboard query parses as PromQL (promtool); every
metric an alert or a panel reads is one the job or the operator exposes (their real collectors);
the PodMonitor selects the driver pods the operator renders. No Spark, no broker: the scrape of a
real job is tests/test_prometheus_scrape.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from harness.helm import installed_tool
from scorestream import naming
from scorestream import monitoring as m
from scorestream.api.job_http import Readiness
from scorestream.api.v1alpha1.modelserving import ModelServingSpec
from scorestream.operator import desired
from scorestream.runtime.job_metrics import JobCollector
from scorestream.runtime.models import ModelRegistry
from scorestream.runtime.stats import ServingStats
from scorestream.tools import dashboard

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "scorestream"
ALERT_TESTS = REPO / "tests" / "monitoring" / "alerts.test.yaml"
EXAMPLE = yaml.safe_load((REPO / "examples" / "wine-pmml.yaml").read_text())
K8S_VERSION = "1.32"
ALL_ON = ["--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true",
          "--set", "monitoring.dashboard.enabled=true", "--set", "metrics.serviceMonitor.enabled=true"]
METRIC = re.compile(r"\b(scorestream_[a-z_]+)\b")


@pytest.fixture(scope="session")
def promtool() -> str:
    return installed_tool("promtool", "prometheus")


def render(helm, *flags) -> list[dict]:
    res = subprocess.run([str(helm), "template", "ss", str(CHART), "--namespace", "operators", *flags],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def spec(body) -> ModelServingSpec:
    return ModelServingSpec.model_validate(body["spec"])


def one(objs, kind) -> dict:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}"
    return found[0]


def rule_groups(helm, *flags) -> dict:
    """The rendered PrometheusRule's groups as a Prometheus rule file."""
    return {"groups": one(render(helm, *ALL_ON, *flags), "PrometheusRule")["spec"]["groups"]}


def promtool_run(promtool, *args, cwd=None) -> str:
    res = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60, cwd=cwd)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def check_metrics(promtool: str, exposition: str) -> None:
    """`promtool check metrics` over a scrape's text: no lint finding at all (it exits 0 with
    warnings printed for some findings, so the output must be empty too)."""
    res = subprocess.run([promtool, "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and not (res.stdout + res.stderr).strip(), res.stdout + res.stderr


def test_monitoring_is_off_by_default_and_renders_valid_objects_when_on(helm):
    kinds = {o["kind"] for o in render(helm)}
    assert not kinds & {"PodMonitor", "PrometheusRule"} and "ServiceMonitor" not in kinds
    lint = subprocess.run([str(helm), "lint", "--strict", str(CHART), *ALL_ON], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    for mode in ([], ["--set", "watch.allNamespaces=true"], ["--set", "watch.namespaces={ml,analytics}"]):
        objs = render(helm, *ALL_ON, *mode)
        for o in objs:
            if not o["apiVersion"].startswith("monitoring.coreos.com/"):
                kubernetes_validate.validate(o, K8S_VERSION, strict=True)
        pm = one(objs, "PodMonitor")["spec"]
        assert pm["namespaceSelector"] == ({"any": True} if mode == ["--set", "watch.allNamespaces=true"]
                                           else {"matchNames": ["ml", "analytics"] if mode else ["operators"]})
        # The resource's labels on the operator's series must survive the scrape (not exported_namespace).
        assert one(objs, "ServiceMonitor")["spec"]["endpoints"][0]["honorLabels"] is True
        assert_a_job_pod_cannot_speak_for_another_resource(pm["podMetricsEndpoints"][0])


def assert_a_job_pod_cannot_speak_for_another_resource(endpoint: dict) -> None:
    """Issue 48: any pod with the driver's labels is scraped. Its series take the namespace and
    name of the target (the pod's namespace, its scorestream.dev/modelserving label), the scraped
    copies are dropped, and so are series only the operator publishes."""
    assert endpoint["honorLabels"] is False
    assert {"sourceLabels": ["__meta_kubernetes_pod_label_scorestream_dev_modelserving"], "targetLabel": "name",
            "action": "replace"} in endpoint["relabelings"]
    drops = [r for r in endpoint["metricRelabelings"] if r["action"] == "drop"]
    (dropped,) = [re.compile(r["regex"]) for r in drops if r["sourceLabels"] == ["__name__"]]
    for family in m.FAMILIES:
        for series in family.series:
            assert bool(dropped.fullmatch(series)) == (family.source == "operator"), series
    (labeldrop,) = [re.compile(r["regex"]) for r in endpoint["metricRelabelings"] if r["action"] == "labeldrop"]
    assert labeldrop.fullmatch("exported_namespace") and labeldrop.fullmatch("exported_name")
    assert not labeldrop.fullmatch("namespace") and not labeldrop.fullmatch("model")


def test_podmonitor_selects_the_driver_pods_the_operator_renders_and_not_the_executors(helm):
    pm = one(render(helm, *ALL_ON), "PodMonitor")["spec"]
    sts = next(o for o in desired.render(EXAMPLE) if o["kind"] == "StatefulSet")
    pod = sts["spec"]["template"]
    labels = pod["metadata"]["labels"]

    def selects(pod_labels):
        sel = pm["selector"]
        return all(pod_labels.get(k) == v for k, v in sel["matchLabels"].items()) and all(
            e["operator"] == "Exists" and e["key"] in pod_labels for e in sel.get("matchExpressions", []))

    assert selects(labels)
    assert not selects(naming.labels("wine", component="executor"))
    endpoint = pm["podMetricsEndpoints"][0]
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
    # The job's read-only port (its JobConfig, as the operator renders it), not the control port.
    assert ports[endpoint["port"]] == desired.job_config("wine", "ml", spec(EXAMPLE)).http.metrics_port


def test_rules_pass_promtool_check_and_every_alert_has_unit_tests_that_pass(helm, promtool, tmp_path):
    groups = rule_groups(helm)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(groups, sort_keys=False))
    shutil.copy(ALERT_TESTS, tmp_path / ALERT_TESTS.name)
    out = promtool_run(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    alerts = {r["alert"] for g in groups["groups"] for r in g["rules"]}
    assert f"SUCCESS: {len(alerts)} rules found" in out, out
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    tested = {t["alertname"] for group in tests["tests"] for t in group.get("alert_rule_test", [])
              if t.get("exp_alerts")}
    assert tested == alerts, f"alerts without a firing test: {alerts - tested}; tests of no alert: {tested - alerts}"
    out = promtool_run(promtool, "test", "rules", ALERT_TESTS.name, cwd=tmp_path)
    print(f"\n{len(alerts)} alerts, {len(tests['tests'])} test groups:\n{out}")
    assert "SUCCESS" in out


def test_thresholds_come_from_the_values(helm):
    groups = rule_groups(helm, "--set", "monitoring.prometheusRule.lagMinimum=50",
                         "--set-json", "monitoring.prometheusRule.deadLetterRatio=0.2",
                         "--set", "monitoring.prometheusRule.notReadyFor=3m")
    rules = {r["alert"]: r for g in groups["groups"] for r in g["rules"]}
    assert "> 50\n" in rules["ScorestreamConsumerLagGrowing"]["expr"]
    assert rules["ScorestreamDeadLetterRateHigh"]["expr"].endswith("> 0.2")
    assert rules["ScorestreamJobNotReady"]["for"] == "3m"


def test_the_chart_ships_the_generated_dashboard_with_the_sidecar_label(helm):
    assert dashboard.DASHBOARD_FILE.read_text() == dashboard.dashboard_json(), \
        "charts/scorestream/dashboards/scorestream.json differs: run `python -m scorestream.tools.dashboard --write`"
    cm = next(o for o in render(helm, *ALL_ON, "--set", "monitoring.dashboard.namespace=grafana")
              if o["kind"] == "ConfigMap" and "scorestream.json" in o.get("data", {}))
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1" and cm["metadata"]["namespace"] == "grafana"
    assert json.loads(cm["data"]["scorestream.json"]) == dashboard.dashboard()


def test_every_dashboard_query_parses_as_promql(promtool, tmp_path):
    rules = [{"record": f"scorestream_dashboard:panel{i}:{j}", "expr": dashboard.concrete(q.expr)}
             for i, p in enumerate(dashboard.DASHBOARD) for j, q in enumerate(p.queries)]
    (tmp_path / "panels.yaml").write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    out = promtool_run(promtool, "check", "rules", "panels.yaml", cwd=tmp_path)
    assert f"SUCCESS: {len(rules)} rules found" in out, out
    covered = " ".join(p.title.lower() for p in dashboard.DASHBOARD)
    for topic in ("records", "dead", "latency", "lag", "model versions", "candidate", "shadow", "executors"):
        assert topic in covered, topic


def test_every_metric_an_alert_or_a_panel_reads_exists(helm):
    exprs = [r["expr"] for g in rule_groups(helm)["groups"] for r in g["rules"]]
    exprs += [q.expr for p in dashboard.DASHBOARD for q in p.queries]
    read = {name for e in exprs for name in METRIC.findall(e)}
    assert read - m.series_names() == set()
    job_families = {f for f in m.FAMILIES if f.source == "job"}
    unused = {f.name for f in job_families} - {f.name for f in job_families if set(f.series) & read}
    assert unused == {m.MODEL_SINCE.name, m.MODEL_SWITCHES.name}, "job metrics no panel or alert shows"


def _exposed(registry) -> dict[str, str]:
    """Family name (counters with _total, as the catalogue names them) -> type."""
    text = generate_latest(registry).decode()
    return {(f.name + "_total" if f.type == "counter" else f.name): f.type
            for f in text_string_to_metric_families(text) if f.name.startswith("scorestream_")}


def test_the_catalogue_is_what_the_collectors_expose_with_the_resource_labels():
    reg = CollectorRegistry()
    reg.register(JobCollector(ServingStats(ModelRegistry()), lambda: Readiness(ready=False, reason="restoring models"),
                              "ml", "wine"))
    exposed = _exposed(reg)
    assert exposed == {f.name: f.kind for f in m.FAMILIES if f.source == "job"}
    for family in text_string_to_metric_families(generate_latest(reg).decode()):
        for sample in family.samples:
            assert (sample.labels["namespace"], sample.labels["name"]) == ("ml", "wine"), sample
    ready = [s for f in text_string_to_metric_families(generate_latest(reg).decode()) for s in f.samples
             if s.name == m.JOB_READY.name]
    assert [s.value for s in ready] == [0.0]

    from scorestream.operator import metrics

    metrics.record_status("ml", "wine", {"phase": "Degraded", "conditions": [
        {"type": "Degraded", "status": "True", "reason": "CrashLoopBackOff"},
        {"type": "Ready", "status": "False", "reason": "DriverFailing"}]})
    try:
        from prometheus_client import REGISTRY

        exposed = _exposed(REGISTRY)
        assert {k: v for k, v in exposed.items() if k.startswith("scorestream_")} == \
            {f.name: f.kind for f in m.FAMILIES if f.source == "operator"}
        text = generate_latest(REGISTRY).decode()
        assert ('scorestream_modelserving_condition{name="wine",namespace="ml",reason="CrashLoopBackOff",'
                'status="True",type="Degraded"} 1.0') in text
        assert 'scorestream_modelserving_phase{name="wine",namespace="ml",phase="Degraded"} 1.0' in text
        metrics.record_status("ml", "wine", {"phase": "Running", "conditions": [
            {"type": "Degraded", "status": "False", "reason": "Healthy"}]})
        assert "CrashLoopBackOff" not in "".join(_series_of(REGISTRY, "ml", "wine")), \
            "a condition's old reason must not linger"
    finally:
        metrics.forget("ml", "wine")
    # Only this resource's series: the registry is the process's, and an operator test that ran
    # before in the same worker may have left a resource of its own (also named wine) in it.
    assert _series_of(REGISTRY, "ml", "wine") == []


def _series_of(registry, namespace: str, name: str) -> list[str]:
    labels = f'name="{name}",namespace="{namespace}"'
    return [line for line in generate_latest(registry).decode().splitlines() if labels in line]


def test_a_status_not_recomputed_for_a_while_stops_being_exported():
    """A standby operator replica keeps what it computed before kopf paused it; its series must
    not keep an alert firing. The clock is a stand-in: five real minutes are too long to wait."""
    from scorestream.operator.metrics import ResourceStatus

    now = [1000.0]
    collector = ResourceStatus(stale_after=300, clock=lambda: now[0])
    collector.record("ml", "wine", {"phase": "Degraded", "conditions": [
        {"type": "Degraded", "status": "True", "reason": "CrashLoopBackOff"}]})
    reg = CollectorRegistry()
    reg.register(collector)
    now[0] += 299
    assert "CrashLoopBackOff" in generate_latest(reg).decode()
    now[0] += 2
    assert 'name="wine"' not in generate_latest(reg).decode()


def test_rejected_models_are_counted_past_the_list_that_models_shows():
    """/models keeps the last 50 rejections; the counter the alert's increase() reads must not
    stop there, or a models topic rejecting steadily would look quiet."""
    registry = ModelRegistry()
    reg = CollectorRegistry()
    reg.register(JobCollector(ServingStats(registry), lambda: Readiness(ready=True, reason="serving"), "ml", "wine"))

    def counted() -> float:
        text = generate_latest(reg).decode()
        return [s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == m.MODELS_REJECTED.name and s.labels == {"namespace": "ml", "name": "wine"}][0]

    for i in range(120):
        registry.reject(f"offset {i}", "wine" if i % 2 else None, "not a model")
        if i == 49:
            assert counted() == 50.0
    assert len(registry.rejected) == 50
    assert counted() == 120.0


def test_promtool_lint_catches_the_old_names_and_passes_the_operators_registry(promtool):
    """The lint is not vacuous: the labels before the conventions fix fail it (promtool lints label
    case; `_ratio` and `_timestamp_seconds` are conventions it does not check). The operator's whole
    registry (its process and Python collectors included) passes, with no `_created` series; the
    real scrapes are in tests/test_operator_monitoring.py and tests/test_prometheus_scrape.py."""
    old = ("# HELP scorestream_candidate_percent A canary's share\n# TYPE scorestream_candidate_percent gauge\n"
           'scorestream_candidate_percent{dataType="wine",strategy="Canary"} 10.0\n')
    res = subprocess.run([promtool, "check", "metrics"], input=old, capture_output=True, text=True, timeout=60)
    found = res.stdout + res.stderr
    assert res.returncode != 0 and "camelCase" in found, found

    from prometheus_client import REGISTRY

    from scorestream.operator import metrics

    metrics.RECONCILES.labels("create", "ok").inc()
    metrics.RECONCILE_SECONDS.labels("create").observe(0.2)
    metrics.ROLLOUT_STEPS.labels("candidate").inc()
    metrics.record_status("ml", "lint", {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True", "reason": "Serving"}]})
    try:
        text = generate_latest(REGISTRY).decode()
        assert "_created" not in text
        check_metrics(promtool, text)
    finally:
        metrics.forget("ml", "lint")
