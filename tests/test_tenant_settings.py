"""Tenant settings (issue #15): spark.conf keys the operator owns, kafka.properties that carry
secrets or load code are refused at admission (CEL) and by pydantic alike, naming the key and never
its value; a malformed Secret line is never quoted."""

from __future__ import annotations

import asyncio
import base64
import copy
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from scorestream.api.v1alpha1 import modelserving as s
from scorestream.config import read_properties_text
from scorestream.operator import crd, desired, observer, status

from harness.admission import admit

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = yaml.safe_load((REPO / "examples" / "wine-pmml.yaml").read_text())
SECRET_VALUE = "CANARY-hunter2-do-not-echo"


def with_settings(conf: dict | None = None, properties: dict | None = None) -> dict:
    obj = copy.deepcopy(EXAMPLE)
    if conf is not None:
        obj["spec"]["spark"]["conf"] = conf
    if properties is not None:
        obj["spec"]["kafka"]["properties"] = properties
    return obj


def verdicts(obj: dict) -> tuple[list[str], list[str]]:
    """(the API server's refusals, pydantic's messages as the operator reports them)."""
    try:
        s.ModelServingSpec.model_validate(obj["spec"])
        messages = []
    except ValidationError as e:
        messages = [status.invalid_spec(1, e).message]
    return admit(obj), messages


OWNED_SPARK = ["spark.master", "spark.kubernetes.container.image", "spark.kubernetes.namespace",
               "spark.executor.instances", "spark.driver.host", "spark.driver.port", "spark.jars",
               "spark.jars.packages", "spark.dynamicAllocation.maxExecutors", "spark.authenticate",
               "spark.authenticate.secret", "spark.kubernetes.authenticate.driver.serviceAccountName",
               "spark.kubernetes.authenticate.executor.serviceAccountName", "spark.kubernetes.executor.podTemplateFile"]
TENANT_SPARK = {"spark.sql.shuffle.partitions": "4", "spark.executor.cores": "2",
                "spark.kubernetes.executor.node.selector.pool": "scoring",
                "spark.kubernetes.executor.label.team": "risk", "spark.sql.streaming.minBatchesToRetain": "10"}


@pytest.mark.parametrize("key", OWNED_SPARK)
def test_spark_conf_keys_the_operator_owns_are_refused_by_name(key):
    cel, py = verdicts(with_settings(conf={**TENANT_SPARK, key: SECRET_VALUE}))
    want = f"spark.conf key '{key}' is the operator's to set"
    assert len(cel) == 1 and want in cel[0], cel
    assert len(py) == 1 and want in py[0], py
    assert SECRET_VALUE not in cel[0] + py[0]


def test_tenant_spark_settings_are_admitted_by_both():
    assert verdicts(with_settings(conf=TENANT_SPARK)) == ([], [])


def test_every_key_the_operator_renders_is_owned():
    """The list is the code's: whatever job_config puts in spark.conf besides the spec's own conf."""
    spec = s.ModelServingSpec.model_validate(with_settings(conf=TENANT_SPARK)["spec"])
    rendered = desired.job_config("wine", "ns", spec).spark.conf
    operator_keys = set(rendered) - set(TENANT_SPARK)
    assert operator_keys and all(s.OPERATOR_SPARK_CONF.matches(k) for k in operator_keys), \
        sorted(k for k in operator_keys if not s.OPERATOR_SPARK_CONF.matches(k))
    # And what the runtime sets itself (runtime/job.py spark_session), and the master.
    assert all(s.OPERATOR_SPARK_CONF.matches(k) for k in ("spark.app.name", "spark.jars", "spark.master"))


@pytest.mark.parametrize("key", ["sasl.password", "sasl.jaas.config", "ssl.key.password", "ssl.keystore.password",
                                 "ssl.truststore.password", "sasl.oauthbearer.client.secret", "ssl.key.pem",
                                 "sasl.oauthbearer.assertion.private.key.passphrase"])
def test_kafka_passwords_are_refused_and_never_echoed(key):
    cel, py = verdicts(with_settings(properties={"security.protocol": "SASL_SSL", key: SECRET_VALUE}))
    want = f"kafka.properties key '{key}' carries a secret: put it in the Secret"
    assert len(cel) == 1 and want in cel[0], cel
    assert len(py) == 1 and want in py[0], py
    assert SECRET_VALUE not in " ".join(cel + py)


@pytest.mark.parametrize("key", ["plugin.library.paths", "sasl.oauthbearer.token.endpoint.url", "ssl.engine.location",
                                 "sasl.login.callback.handler.class", "sasl.client.callback.handler.class",
                                 "sasl.kerberos.kinit.cmd", "interceptor.classes", "sasl.oauthbearer.jwks.endpoint.url",
                                 "sasl.kerberos.keytab", "sasl.kerberos.service.name"])
def test_kafka_settings_that_load_code_or_call_out_are_refused(key):
    cel, py = verdicts(with_settings(properties={key: "/tmp/x.so"}))
    want = f"kafka.properties key '{key}' loads code, runs a command or calls out"
    assert len(cel) == 1 and want in cel[0], cel
    assert len(py) == 1 and want in py[0], py


def test_ordinary_kafka_settings_are_admitted_by_both():
    props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "scorer",
             "ssl.ca.location": "/etc/ssl/certs/ca-certificates.crt", "client.id": "wine"}
    assert verdicts(with_settings(properties=props)) == ([], [])


def test_the_rules_stay_cheap_for_the_api_server():
    """Literal-only string functions over a bounded map: the CRD's estimated CEL cost stays small."""
    spec = crd.generate()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    for field in (spec["spark"]["properties"]["conf"], spec["kafka"]["properties"]["properties"]):
        assert field["maxProperties"] == s.MAX_SETTINGS
        for v in field["x-kubernetes-validations"]:
            assert "contains(" not in v["rule"] and "matches(" not in v["rule"]
            assert "messageExpression" in v and "message" in v


def test_the_docs_list_every_refused_key():
    text = (REPO / "docs" / "tenant-settings.md").read_text()
    for rule in (s.OPERATOR_SPARK_CONF, s.KAFKA_SECRET_PROPERTIES, s.KAFKA_CODE_PROPERTIES):
        for key in (*rule.exact, *rule.prefixes, *rule.suffixes):
            assert f"`{key}" in text, key


# --- the Kafka Secret -----------------------------------------------------------------------------


def test_a_malformed_secret_line_is_named_by_number_not_quoted():
    with pytest.raises(ValueError) as e:
        read_properties_text(f"security.protocol=SASL_SSL\n# comment\n{SECRET_VALUE}\n")
    assert str(e.value) == "line 3 has no '=' (key=value expected)"


class SecretOnly:
    """The one Kubernetes read kafka_client_properties makes: a Secret by name."""

    def __init__(self, text: str):
        self.secret = {"data": {"client.properties": base64.b64encode(text.encode()).decode()}}

    async def get(self, api_version, kind, namespace, name):
        assert (api_version, kind, name) == ("v1", "Secret", "kafka-client")
        return self.secret


def _operator_props(text: str) -> dict[str, str]:
    body = with_settings()
    body["spec"]["kafka"]["secretRef"] = {"name": "kafka-client"}
    spec = s.ModelServingSpec.model_validate(body["spec"])
    return asyncio.run(observer.kafka_client_properties(SecretOnly(text), "ns", spec))


def test_the_operator_reads_its_kafka_secret():
    assert _operator_props(f"sasl.password={SECRET_VALUE}\n")["sasl.password"] == SECRET_VALUE


@pytest.mark.parametrize("text, why", [
    (f"sasl.username=scorer\n{SECRET_VALUE}\n", "line 2 has no '='"),
    ("sasl.oauthbearer.token.endpoint.url=http://169.254.169.254/\n", "sasl.oauthbearer.token.endpoint.url"),
    ("plugin.library.paths=/tmp/evil.so\n", "plugin.library.paths"),
    ("sasl.kerberos.keytab=/etc/scorestream/control/token\n", "sasl.kerberos.keytab"),  # #30 LOW
])
def test_the_operator_refuses_a_secret_it_must_not_use_without_quoting_it(text, why):
    with pytest.raises(LookupError) as e:
        _operator_props(text)
    assert why in str(e.value) and SECRET_VALUE not in str(e.value) and "169.254" not in str(e.value)
