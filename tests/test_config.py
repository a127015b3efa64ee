"""JobConfig: bad configuration fails at start, naming the field; names come from one place."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from scorestream import naming
from scorestream.config import ConfigError, JobConfig, parse_job_config

GOOD = {
    "name": "wine",
    "namespace": "ml",
    "kafka": {"bootstrapServers": "k:9092", "dataTopic": "in", "outputTopic": "out", "deadLetterTopic": "dlq"},
    "checkpointLocation": "/tmp/ck",
}


def with_(path: str, value):
    raw = json.loads(json.dumps(GOOD))
    node = raw
    *parents, last = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return raw


def test_good_config_has_defaults_and_group():
    c = parse_job_config(GOOD)
    assert c.kafka.models_topic == "scorestream-models"
    assert c.kafka.starting_offsets == "group"
    assert c.data_group == "scorestream.ml.wine" == naming.data_group("ml", "wine")
    assert c.spark.trigger_seconds() == 1.0
    assert JobConfig.model_validate_json(c.to_json()) == c


@pytest.mark.parametrize(
    "path,value,field",
    [
        ("kafka.dataTopic", "bad topic!", "kafka.dataTopic"),
        ("kafka.outputTopic", "in", "kafka"),
        ("spark.triggerInterval", "soon", "spark.triggerInterval"),
        ("name", "Wine_1", "name"),
        ("http.port", 70000, "http.port"),
        ("kafka.maxOffsetsPerTrigger", 0, "kafka.maxOffsetsPerTrigger"),
        ("input.format", "xml", "input.format"),
        ("kafka.bootstrapSevers", "typo", "kafka.bootstrapSevers"),
    ],
)
def test_bad_config_names_the_field(path, value, field):
    with pytest.raises(ConfigError) as e:
        parse_job_config(with_(path, value))
    assert f"  {field}" in str(e.value)


def test_a_real_time_job_takes_batches_of_5s_or_more_and_no_per_batch_bound():
    real_time = with_("spark.trigger", "realTime")
    with pytest.raises(ConfigError, match="at least 5s"):
        parse_job_config(real_time)
    real_time["spark"]["triggerInterval"] = "5s"
    assert parse_job_config(real_time).spark.real_time
    real_time["kafka"]["maxOffsetsPerTrigger"] = 1000
    with pytest.raises(ConfigError, match="takes no kafka.maxOffsetsPerTrigger"):
        parse_job_config(real_time)


def test_fields_added_later_leave_the_configuration_hash_of_existing_jobs_as_it_was():
    # The operator hashes hashed_json() to decide whether a driver rolls: a field added with a
    # default must not roll every driver on upgrade.
    config = parse_job_config(with_("spark.triggerInterval", "1s"))
    assert config.hashed_json() == config.to_json().replace('    "trigger": "processingTime",\n', "").replace(
        '    "warmUpBatches": 300,\n', "").replace('  "delivery": "atLeastOnce",\n', "")
    for field in ('"trigger"', '"delivery"', '"warmUpBatches"'):
        assert field not in config.hashed_json()
    real_time = parse_job_config(with_("spark", {"trigger": "realTime", "triggerInterval": "5s", "warmUpBatches": 0}))
    assert '"trigger": "realTime"' in real_time.hashed_json() and '"warmUpBatches": 0' in real_time.hashed_json()
    assert '"delivery": "exactlyOnce"' in parse_job_config(with_("delivery", "exactlyOnce")).hashed_json()


@pytest.mark.parametrize("change, word", [
    ({"spark": {"conf": {"spark.speculation": " True"}}}, "takes no spark.speculation"),
    ({"kafka": {"properties": {"transactional.id": "mine"}}}, "sets the Kafka settings"),
])
def test_exactly_once_refuses_what_cannot_keep_it(change, word):
    raw = with_("delivery", "exactlyOnce")
    for k, v in change.items():
        raw[k] = {**raw.get(k, {}), **v}
    with pytest.raises(ConfigError, match=word):
        parse_job_config(raw)
    del raw["delivery"]
    parse_job_config(raw)  # at-least-once takes each of them


def test_exactly_once_takes_the_real_time_trigger():
    raw = with_("delivery", "exactlyOnce")
    raw["spark"] = {**raw.get("spark", {}), "trigger": "realTime", "triggerInterval": "5s"}
    config = parse_job_config(raw)
    assert config.exactly_once and config.spark.real_time


def test_runtime_rejects_bad_config_at_start(tmp_path):
    bad = tmp_path / "job.json"
    bad.write_text(json.dumps(with_("kafka.dataTopic", "")))
    res = subprocess.run([sys.executable, "-m", "scorestream.runtime", "--config", str(bad)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "kafka.dataTopic" in res.stderr


@pytest.mark.parametrize("value,seconds", [("500ms", 0.5), ("2 seconds", 2.0), ("1m", 60.0), ("1.5s", 1.5)])
def test_trigger_interval(value, seconds):
    assert parse_job_config(with_("spark.triggerInterval", value)).spark.trigger_seconds() == seconds


def test_secret_properties_are_read_not_stored(tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("# from a Secret\nsasl.password=s3cret\nsecurity.protocol = SASL_SSL\n")
    c = parse_job_config(with_("kafka.secretPropertiesFile", str(props)))
    assert c.kafka.client_properties()["sasl.password"] == "s3cret"
    assert c.kafka.client_properties()["security.protocol"] == "SASL_SSL"
    assert "s3cret" not in c.to_json()


def test_group_names():
    assert naming.models_group("ml", "wine", "r1") == "scorestream.ml.wine.models.r1"
    assert naming.models_group("ml", "wine") != naming.models_group("ml", "wine"), "one group per run"
    assert naming.data_group("a", "x") != naming.data_group("b", "x")
    assert naming.model_key("ml", "wine", "red") == "ml/wine/red"
    assert naming.parse_model_key("ml/wine/red/candidate") == naming.ModelKey("ml", "wine", "red", True)
    assert naming.parse_model_key("red") == naming.ModelKey(None, None, "red", False)
    assert naming.parse_model_key("red/candidate") == naming.ModelKey(None, None, "red", True)
    assert naming.parse_model_key("") == naming.ModelKey(None, None, "", False), "unkeyed: the report's producer"
    assert not naming.parse_model_key("a/b").addressed_to("a", "b"), "neither shape: nobody's"


@pytest.mark.parametrize("scope", [{}, {"namespaces": ["ml"], "allNamespaces": True}])
def test_operator_watches_either_named_namespaces_or_all(scope):
    from scorestream.operator.settings import OperatorConfig

    with pytest.raises(ValidationError, match="namespaces"):
        OperatorConfig(**scope)
    assert OperatorConfig(namespaces=["ml"]).namespaces == ["ml"]


def test_spark_kafka_options_default_to_batch_sized_polls_and_short_fetch_waits():
    from scorestream.runtime import kafka_options

    c = parse_job_config(GOOD)
    source = kafka_options.source_options(c.kafka, "prefix")
    # At the log's end the broker holds a fetch this long, and the source's offset-range request
    # behind it waits as long: the default 500 ms would be added to every batch of a live stream.
    assert source["kafka.fetch.max.wait.ms"] == "20"
    assert source["kafka.max.poll.records"] == "10000"
    assert source["subscribe"] == "in" and source["includeHeaders"] == "true"
    assert kafka_options.sink_options(c.kafka)["kafka.linger.ms"] == "5"
    # A user's setting wins over the defaults.
    mine = parse_job_config(with_("kafka.properties", {"fetch.max.wait.ms": "100", "linger.ms": "0"}))
    assert kafka_options.source_options(mine.kafka, "prefix")["kafka.fetch.max.wait.ms"] == "100"
    assert kafka_options.sink_options(mine.kafka)["kafka.linger.ms"] == "0"


def test_the_driver_jvm_starts_from_a_small_heap_unless_the_spec_says_otherwise():
    from scorestream.runtime.job import session_conf

    assert session_conf(parse_job_config(GOOD))["spark.driver.extraJavaOptions"] == "-Xms64m"
    mine = parse_job_config(with_("spark", {"conf": {"spark.driver.extraJavaOptions": "-Xms1g -Dx=y"}}))
    # The spec's options follow: its -Xms, the last on the line, is the one the JVM takes.
    assert session_conf(mine)["spark.driver.extraJavaOptions"] == "-Xms64m -Xms1g -Dx=y"


def test_a_real_time_job_plans_without_whole_stage_code_unless_the_spec_says_otherwise():
    from scorestream.runtime.job import session_conf

    assert "spark.sql.codegen.wholeStage" not in session_conf(parse_job_config(GOOD))
    real_time = {"trigger": "realTime", "triggerInterval": "5s"}
    assert session_conf(parse_job_config(with_("spark", real_time)))["spark.sql.codegen.wholeStage"] == "false"
    mine = parse_job_config(with_("spark", {**real_time, "conf": {"spark.sql.codegen.wholeStage": "true"}}))
    assert session_conf(mine)["spark.sql.codegen.wholeStage"] == "true"
