"""A real Prometheus (Debian's `prometheus`) scraping a real job on the test broker, and every
Grafana panel's query answered with data from that scrape — the panels exactly as the chart ships
them (scorestream/tools/dashboard.py), the Grafana variables set to the job's namespace and name; and
the chart's alert rules loaded into it: all evaluate cleanly, none fires for the healthy job, and
the dead letters alert fires once malformed records arrive.

The job serves a PMML tree with a shadow candidate (so the candidate and shadow panels have
something to show) while records keep arriving. Prometheus listens on loopback only, keeps its
data in the test's temporary folder, and is stopped by the test; the whole test is bounded.
"""

from __future__ import annotations

import json
import math
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from scorestream import monitoring as m
from scorestream.tools import dashboard
from scorestream.api.descriptor import CandidateRole
from scorestream.api.verification import Sample
from scorestream.tools.demo import feed, models
from scorestream.tools.local.broker import free_port

from harness import helm as helm_tool
from harness.helm import installed_tool
from harness.streaming import wait_until
from test_monitoring import ALL_ON, check_metrics, one, render, rule_groups

pytestmark = [pytest.mark.spark, pytest.mark.broker]

SCRAPE = "1s"
RATE_INTERVAL = "20s"  # what Grafana's $__rate_interval would be at this scrape interval, roughly


@pytest.fixture
def prometheus_binary() -> str:
    return installed_tool("prometheus", "prometheus")


@pytest.fixture
def promtool() -> str:
    return installed_tool("promtool", "prometheus")


def scrape_config(endpoint: dict, target: str, namespace: str, name: str) -> dict:
    """The chart's PodMonitor endpoint as the Prometheus Operator turns it into a scrape config,
    for one static target: the labels its relabelings give a driver pod (the pod's namespace, its
    scorestream.dev/modelserving label as `name`) are set on the target, as service discovery would."""
    def snake(rule: dict) -> dict:
        keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
        return {keys.get(k, k): v for k, v in rule.items()}

    return {"job_name": "scorestream-jobs", "metrics_path": endpoint["path"],
            "honor_labels": endpoint["honorLabels"],
            "metric_relabel_configs": [snake(r) for r in endpoint.get("metricRelabelings", [])],
            "static_configs": [{"targets": [target], "labels": {"namespace": namespace, "name": name}}]}


class Prometheus:
    def __init__(self, binary: str, workdir, scrape: dict, rule_files: list[str]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {"global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE}, "rule_files": rule_files,
                  "scrape_configs": [scrape]}
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = open(workdir / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def get(self, path: str, **params) -> dict:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}" if params else self.url + path
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            assert self.proc.poll() is None, f"prometheus exited {self.proc.returncode}"
            return False

    def query(self, expr: str) -> list[dict]:
        answer = self.get("/api/v1/query", query=expr)
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()


def wait_until_value(get, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = get()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError(what)


def _empty_here(expr: str) -> bool:
    """Queries with nothing to show in this setting. The executor target exists only where the job
    manages its executors (a Spark standalone or Kubernetes master); here Spark runs local[2]."""
    return m.EXECUTOR_TARGET.name in expr


def test_every_dashboard_panel_returns_data_from_a_real_scrape_of_a_real_job(serving, prometheus_binary, promtool,
                                                                              tmp_path):
    rows = feed.wine_rows()
    s = serving(name="scraped")
    # A verification sample: each version's drift baseline, so the drift panels have data too.
    sample = Sample(records=[json.loads(feed.wine_json(r)) for r in rows[:300]])
    s.publish(models.descriptor("tree", "1", "pmml", models.tree_pmml(rows)).model_copy(update={"verification": sample}))
    job = s.start().wait_ready()
    shadow = models.descriptor("shallow", "2", "pmml", models.tree_pmml(rows, max_depth=2))
    s.publish(shadow.model_copy(update={"candidate": CandidateRole(strategy="Shadow", percent=0.0),
                                        "verification": sample}))
    wait_until(lambda: "wine" in job.get("/models")["candidates"], what="the shadow installed")

    stop = threading.Event()
    sent = [0]

    def feed_records():
        while not stop.is_set():
            batch = [rows[(sent[0] + i) % len(rows)] for i in range(50)]
            sent[0] += s.produce(feed.wine_records(batch, start=sent[0]))
            stop.wait(0.5)

    producer = threading.Thread(target=feed_records, daemon=True)
    producer.start()
    # The chart's alert rules, the dead-letter alert without its 5 minutes' wait.
    rules = tmp_path / "rules.yaml"
    helm = helm_tool.ensure()
    rules.write_text(yaml.safe_dump(rule_groups(helm, "--set", "monitoring.prometheusRule.deadLetterFor=0s")))
    # Scraped as the chart's PodMonitor scrapes a driver: honorLabels false, its relabelings.
    (endpoint,) = one(render(helm, *ALL_ON), "PodMonitor")["spec"]["podMetricsEndpoints"]
    prom = Prometheus(prometheus_binary, tmp_path, scrape_config(endpoint, job.url.removeprefix("http://"), "test", "scraped"),
                      [str(rules)])
    try:
        wait_until(prom.ready, timeout=60, what="prometheus ready")
        wait_until(lambda: prom.query('up{job="scorestream-jobs"} == 1'), timeout=60, what="the job scraped")
        job.wait_records(200)
        time.sleep(25)  # a rate window's worth of scrapes while records flow

        missing, answers = [], {}
        for panel in dashboard.DASHBOARD:
            for q in panel.queries:
                expr = dashboard.concrete(q.expr, RATE_INTERVAL, namespace="test", name="scraped")
                result = prom.query(expr)
                values = [float(r["value"][1]) for r in result]
                answers[f"{panel.title}: {q.legend}"] = values
                if (not values or not any(math.isfinite(v) for v in values)) and not _empty_here(q.expr):
                    missing.append((panel.title, expr, result))
        for k, v in answers.items():
            print(f"  {k}: {[round(x, 6) for x in v]}")
        assert not missing, f"panels without data: {missing}\njob: {job.get('/stats')}"
        assert all(any(answers[f"{p.title}: {q.legend}"] for q in p.queries) for p in dashboard.DASHBOARD)
        # What Prometheus scraped passes promtool's lint: every family present, the shadow's too.
        with urllib.request.urlopen(job.url + "/metrics", timeout=10) as r:
            scraped = r.read().decode()
        assert m.SHADOW_AGREEMENT.name in scraped and m.CANDIDATE_RATIO.name in scraped
        assert m.FEATURE_DRIFT_PSI.name in scraped
        check_metrics(promtool, scraped)
        series = prom.get("/api/v1/series", **{"match[]": '{__name__=~"scorestream_.*"}'})["data"]
        assert series and all((x["namespace"], x["name"]) == ("test", "scraped") for x in series)
        assert {x["__name__"] for x in series} <= m.series_names()
        family = {name: f for f in m.FAMILIES for name in f.series}
        for x in series:  # each series has exactly the labels the catalogue names for its family
            own = set(x) - {"__name__", "instance", "job", "le", *m.RESOURCE_LABELS}
            assert own == set(family[x["__name__"]].labels), x

        # Every alert rule evaluates without error on the real series, and none fires for a
        # healthy job ...
        evaluated = [r for g in prom.get("/api/v1/rules")["data"]["groups"] for r in g["rules"]]
        assert len(evaluated) == 7 and all(r["health"] == "ok" for r in evaluated), evaluated
        assert prom.get("/api/v1/alerts")["data"]["alerts"] == []
        # ... until about a tenth of what it reads is malformed: the dead letters alert fires for it.
        s.produce([(f"bad-{i}".encode(), b'{"dataType": "wine", "alcohol": ') for i in range(400)])
        fired = wait_until_value(lambda: [a for a in prom.get("/api/v1/alerts")["data"]["alerts"]
                                          if a["labels"]["alertname"] == "ScorestreamDeadLetterRateHigh"
                                          and a["state"] == "firing"], timeout=60, what="the dead letters alert")
        assert [(a["labels"]["namespace"], a["labels"]["name"]) for a in fired] == [("test", "scraped")]
        print(f"  fired: {fired[0]['annotations']['summary']}")
    finally:
        stop.set()
        producer.join(timeout=10)
        prom.stop()
