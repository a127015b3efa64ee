"""What the operator tells monitoring about a resource, on the real control plane: its conditions
and phase as Prometheus series labelled with the resource's namespace and name (what the alerts
read), following the status and gone with the resource; and the READY column of
`kubectl get modelservings`."""

from __future__ import annotations

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from scorestream import monitoring as m
from scorestream.tools.local.broker import free_port

from harness.helm import installed_tool
from harness.operator import MS, Operator, apply, condition, operator_config, resource, tool, until
from test_monitoring import check_metrics

pytestmark = pytest.mark.broker


def series(port: int, family: m.Family, **labels: str) -> list:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return [s for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == family.name and all(s.labels.get(k) == v for k, v in labels.items())]


async def test_conditions_and_phase_are_series_of_the_resource_and_kubectl_shows_ready(api, broker, topics):
    port = free_port()
    # Its own namespace only: other tests' resources on the shared control plane are not its business.
    op = Operator(api, operator_config(allNamespaces=False, namespaces=[api.ns], observeInterval=0.5, metricsPort=port))
    await op.start()
    try:
        await apply(api, resource(topics, broker))  # no data topic: Pending, Ready False
        await until(lambda: condition(api, "wine", "Ready").get("reason") == "DataTopicMissing", what="DataTopicMissing")
        mine = {"namespace": api.ns, "name": "wine"}
        ready = await until(lambda: series(port, m.CONDITION, type="Ready", **mine), what="the Ready series")
        assert [(s.labels["status"], s.labels["reason"], s.value) for s in ready] == [("False", "DataTopicMissing", 1.0)]
        phases = {s.labels["phase"]: s.value for s in series(port, m.PHASE, **mine)}
        assert phases["Pending"] == 1.0 and sum(phases.values()) == 1.0
        # The operator's scrape as Prometheus gets it, after reconciles: promtool's lint is clean.
        scraped = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert m.RECONCILES.name in scraped and "_created" not in scraped
        check_metrics(installed_tool("promtool", "prometheus"), scraped)

        got = tool("kubectl", api.cluster, "get", "modelservings", "-n", api.ns).stdout
        print(f"\n{got}")
        header, row = got.splitlines()[:2]
        assert header.split()[:3] == ["NAME", "READY", "MODEL"] and row.split()[:2] == ["wine", "False"]

        api.delete(MS, "wine")
        try:
            await until(lambda: api.request("GET", api.path(MS, "wine"), ok_missing=True) is None, timeout=120,
                        what="the resource gone")
            await until(lambda: not series(port, m.CONDITION, **mine) and not series(port, m.PHASE, **mine),
                        timeout=30, what="the resource's series gone")
        except AssertionError as e:
            left = api.request("GET", api.path(MS, "wine"), ok_missing=True)
            raise AssertionError(f"{e}; resource: {left and left['metadata']}; series: "
                                 f"{series(port, m.CONDITION, **mine)}\n{op.log[-6000:]}") from None
    finally:
        await op.stop()
