"""Spark's web UI behind spec.spark.ui.enabled: off by default; switched on, the operator renders
the UI's Spark settings and the driver's spark-ui port (container and Service), a real job given
those settings serves the UI and Spark's own Prometheus endpoints, and `kubectl scorestream ui`
(against the tests' real API server) refuses a resource without it and forwards to the driver
Service's UI port for one with it. The port-forward itself needs a kubelet, which the tests'
control plane runs only in the real-node tier: here the plugin's kubectl command line is checked."""

from __future__ import annotations

import copy
import urllib.request
from pathlib import Path

import pytest
import yaml

from scorestream import naming
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import desired
from scorestream.tools import spark_ui
from scorestream.tools.demo import feed, models
from scorestream.tools.local.broker import free_port

from harness.operator import MS

EXAMPLE = yaml.safe_load((Path(__file__).resolve().parents[1] / "examples" / "wine-pmml.yaml").read_text())


def with_ui(body: dict, enabled: bool = True) -> dict:
    body = copy.deepcopy(body)
    body["spec"]["spark"]["ui"] = {"enabled": enabled}
    return body


def driver(objs: list[dict]) -> tuple[dict, dict, dict]:
    """The driver Service's ports, the driver container's ports (by name), the job's Spark conf."""
    svc = next(o for o in objs if o["kind"] == "Service")
    sts = next(o for o in objs if o["kind"] == "StatefulSet")
    container = sts["spec"]["template"]["spec"]["containers"][0]
    conf = yaml.safe_load(next(o for o in objs if o["kind"] == "ConfigMap")["data"]["job.json"])["spark"]["conf"]
    return ({p["name"]: p for p in svc["spec"]["ports"]}, {p["name"]: p for p in container["ports"]}, conf)


def test_the_ui_is_off_by_default_and_the_switch_renders_its_port_and_settings():
    service, container, conf = driver(desired.render(EXAMPLE))
    assert naming.SPARK_UI_PORT_NAME not in service and naming.SPARK_UI_PORT_NAME not in container
    assert "spark.ui.enabled" not in conf  # the runtime's own default: off

    service, container, conf = driver(desired.render(with_ui(EXAMPLE)))
    assert service[naming.SPARK_UI_PORT_NAME] == {"name": "spark-ui", "port": 4040, "targetPort": "spark-ui",
                                                  "protocol": "TCP"}
    assert container[naming.SPARK_UI_PORT_NAME]["containerPort"] == naming.SPARK_UI_PORT
    assert conf["spark.ui.enabled"] == "true" and conf["spark.ui.port"] == "4040"
    assert conf["spark.metrics.conf.*.sink.prometheusServlet.class"] == "org.apache.spark.metrics.sink.PrometheusServlet"
    # The NetworkPolicy admits no one to it: a port-forward goes through the API server and kubelet.
    policy = next(o for o in desired.render(with_ui(EXAMPLE)) if o["kind"] == "NetworkPolicy")
    assert naming.SPARK_UI_PORT not in {p.get("port") for r in policy["spec"]["ingress"] for p in r.get("ports", [])}

    # The switch is the one way: spark.conf may not set the UI's keys.
    body = copy.deepcopy(EXAMPLE)
    body["spec"]["spark"]["conf"] = {"spark.ui.enabled": "true"}
    with pytest.raises(ValueError, match="spark.ui.enabled' is the operator's to set"):
        s.ModelServingSpec.model_validate(body["spec"])


def test_the_plugin_forwards_to_the_driver_services_ui_port_and_refuses_without_the_ui():
    on = {"metadata": {"name": "wine", "namespace": "ml"}, "spec": {"spark": {"ui": {"enabled": True}}}}
    spark_ui.check(on)
    assert spark_ui.command("kubectl", "wine", "ml", 8040, context="prod") == [
        "kubectl", "--context", "prod", "--namespace", "ml", "port-forward", "service/wine-driver", "8040:4040",
        "--address", "127.0.0.1"]
    with pytest.raises(spark_ui.NoUI, match="Spark's UI off: set spec.spark.ui.enabled=true"):
        spark_ui.check({"metadata": on["metadata"], "spec": {}})
    with pytest.raises(spark_ui.NoUI, match="is suspended"):
        spark_ui.check({"metadata": on["metadata"], "spec": {**on["spec"], "suspend": True}})


async def test_kubectl_scorestream_ui_refuses_a_resource_without_the_ui(api, kube):
    from test_kubectl_plugin import _plain, plugin

    api.create(MS, _plain(api))
    refused = await plugin(kube.admin_config, "ui", "wine", "-n", api.ns, check=False)
    assert refused.returncode == 1 and "Spark's UI off" in refused.stderr, refused.stderr
    missing = await plugin(kube.admin_config, "ui", "nothing", "-n", api.ns, check=False)
    assert missing.returncode == 1 and "not found" in missing.stderr, missing.stderr


def _get(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


@pytest.mark.spark
@pytest.mark.broker
def test_a_job_with_the_rendered_ui_settings_serves_the_ui_and_sparks_prometheus_endpoints(serving):
    rows = feed.wine_rows()
    s_ = serving(name="ui")
    s_.publish(models.descriptor("tree", "1", "pmml", models.tree_pmml(rows)))
    port = free_port()
    conf = {**desired._spark_ui_conf(s.SparkUISpec(enabled=True)), "spark.ui.port": str(port)}
    job = s_.start(spark={"conf": conf}).wait_ready()
    s_.produce(feed.wine_records(rows[:200]))
    job.wait_records(200)
    ui = f"http://127.0.0.1:{port}"
    assert "Spark" in _get(f"{ui}/jobs/")
    driver_metrics = _get(f"{ui}/metrics/prometheus", timeout=60)
    # Served by Spark's REST API (Jersey), which starts at its first request: slow on a busy machine.
    assert "scorestream-test-ui" in _get(f"{ui}/api/v1/applications", timeout=120)
    executors = _get(f"{ui}/metrics/executors/prometheus", timeout=60)
    assert "metrics_" in driver_metrics and "metrics_executor_" in executors, (driver_metrics[:500], executors[:500])
    print(f"\nSpark UI on {ui}: /metrics/prometheus {len(driver_metrics.splitlines())} lines, "
          f"/metrics/executors/prometheus {len(executors.splitlines())} lines")
    assert job.stop() == 0
