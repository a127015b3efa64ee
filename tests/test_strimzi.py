"""Strimzi, first-class: a job and the operator on a broker secured as a Strimzi cluster is.

Real parts: the Apache Kafka broker with an mTLS listener and a SASL_SSL SCRAM-SHA-512 listener
(tests/harness/strimzi.py), credentials made here in Strimzi's Secret formats, Spark jobs scoring a PMML
model through each listener, the tests' real API server with Strimzi's own KafkaTopic and KafkaUser
CRDs (built by `io.strimzi.api.kafka.Crds` of the pinned io.strimzi:api jar), and the operator as a
process. One double: Strimzi's Topic Operator, which we do not run: the test creates each topic a
KafkaTopic asks for (for real, through the admin API) and then sets the KafkaTopic's Ready condition,
as the Topic Operator does.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from pathlib import Path

import pytest

from scorestream import naming
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.kafka_auth import JAVA_CONFIG_PROVIDER, java_properties
from scorestream.operator import desired, models_route, observer, publish, strimzi, topics
from scorestream.operator.kube import Kube
from scorestream.tools.demo import feed, models
from scorestream.tools.local.broker import create_topics

from harness.operator import EXAMPLE, Operated, apply, condition, obj, resource, until
from harness.strimzi import Pki, SecureBroker, secret_object, strimzi_crds, write_secret

CLUSTER = "my-cluster"
CA_SECRET = f"{CLUSTER}-cluster-ca-cert"


# --- the spec and what it renders (no broker, no API server) ----------------------------------------

def _kafka(**extra) -> dict:
    return {**copy.deepcopy(EXAMPLE["spec"]["kafka"]), "secretRef": None, **extra}


TLS = {"trustedCertificates": [{"secretName": CA_SECRET, "certificate": "ca.crt"}]}
MTLS = {"type": "tls", "certificateAndKey": {"secretName": "alice", "certificate": "user.crt", "key": "user.key"}}
P12 = {"type": "tls", "keystore": {"secretName": "alice"}}
SCRAM = {"type": "scram-sha-512", "username": "bob", "passwordSecret": {"secretName": "bob", "password": "password"}}


def _body(**kafka) -> dict:
    body = copy.deepcopy(EXAMPLE)
    body["spec"]["kafka"] = {k: v for k, v in _kafka(**kafka).items() if v is not None}
    body["metadata"]["uid"] = "u-1"
    return body


@pytest.mark.parametrize("kafka, word", [
    ({"authentication": MTLS}, "needs kafka.tls"),
    ({"tls": TLS, "authentication": {**MTLS, "keystore": {"secretName": "alice"}}}, "type tls takes one of"),
    ({"tls": TLS, "authentication": {"type": "tls"}}, "type tls takes one of"),
    ({"tls": TLS, "authentication": {**SCRAM, "username": None}}, "type scram-sha-512 takes username"),
    ({"tls": TLS, "authentication": {**SCRAM, "keystore": {"secretName": "bob"}}}, "type scram-sha-512 takes"),
    ({"tls": TLS, "secretRef": {"name": "kafka-client"}}, "use one"),
])
def test_a_wrong_authentication_is_refused_by_the_crd_and_the_types_alike(kafka, word):
    from harness.admission import admit

    body = _body(**kafka)
    body["spec"]["kafka"] = {k: v for k, v in body["spec"]["kafka"].items() if v is not None}
    if "authentication" in kafka:
        body["spec"]["kafka"]["authentication"] = {k: v for k, v in kafka["authentication"].items() if v is not None}
    del body["metadata"]["uid"]
    errors = admit(body)
    assert any(word in e for e in errors), errors
    with pytest.raises(ValueError, match=word.split(" ")[0]):
        s.ModelServingSpec.model_validate(body["spec"])


@pytest.mark.parametrize("auth", [MTLS, P12, SCRAM], ids=["certificateAndKey", "keystore", "scram"])
def test_the_secrets_are_mounted_into_driver_and_executors_and_no_value_is_rendered(auth):
    from harness.admission import admit

    body = _body(tls=TLS, authentication=auth)
    assert admit({**body, "metadata": {"name": "wine", "namespace": "ml"}}) == []
    objects = desired.desired_objects(body)
    sts = next(o for o in objects if o["kind"] == "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["kafka-ca"] == strimzi.CA_DIR and mounts["kafka-auth"] == strimzi.AUTH_DIR
    auth_volume = next(v for v in pod["volumes"] if v["name"] == "kafka-auth")
    name, keys = s.KafkaClientAuthentication.model_validate(auth).secret_keys()
    assert auth_volume["secret"]["secretName"] == name and [i["key"] for i in auth_volume["secret"]["items"]] == keys
    config_map = next(o for o in objects if o["kind"] == "ConfigMap")
    executor = __import__("yaml").safe_load(config_map["data"][desired.EXECUTOR_TEMPLATE_KEY])["spec"]
    assert {v["name"] for v in executor["volumes"]} >= {"kafka-ca", "kafka-auth"}
    assert {m["mountPath"] for m in executor["containers"][0]["volumeMounts"]} >= {strimzi.CA_DIR, strimzi.AUTH_DIR}
    job = json.loads(config_map["data"]["job.json"])
    credentials = job["kafka"]["credentials"]
    assert credentials["caFiles"] == [f"{strimzi.CA_DIR}/0/ca.crt"] and credentials["mechanism"] == auth["type"]
    # Spark's Java client reads each secret from its file where it runs: only references in its options.
    java = java_properties(desired.job_config("wine", "ml", s.ModelServingSpec.model_validate(body["spec"])).kafka.credentials)
    assert java["config.providers.dir.class"] == JAVA_CONFIG_PROVIDER
    secret_settings = [v for k, v in java.items() if k in ("ssl.keystore.password", "ssl.keystore.key", "sasl.jaas.config",
                                                           "ssl.keystore.certificate.chain")]
    assert secret_settings and all(f"${{dir:{strimzi.AUTH_DIR}:" in v for v in secret_settings), java


def test_kafka_topics_are_made_in_the_newest_version_the_cluster_serves():
    """Strimzi serves v1 beside v1beta2 from 0.49 and v1 alone from 0.52 / 1.0."""
    assert strimzi.kafka_topic_api_version(["v1beta2"]) == "kafka.strimzi.io/v1beta2"
    assert strimzi.kafka_topic_api_version(["v1", "v1beta2"]) == "kafka.strimzi.io/v1"
    assert strimzi.kafka_topic_api_version(["v1"]) == "kafka.strimzi.io/v1"
    assert strimzi.kafka_topic_api_version([]) == "kafka.strimzi.io/v1beta2"  # none: the request says why


def test_kafka_topics_are_labelled_with_the_cluster_and_only_the_resources_own_topics_are_owned():
    body = _body(strimziTopics={"cluster": CLUSTER, "replicas": 3})
    spec = s.ModelServingSpec.model_validate(body["spec"])
    owner = desired.owner_reference(body["metadata"])
    models_topic = "scorestream-models.ml"  # the namespace's own, which the operator assigns
    made = strimzi.kafka_topics(spec.kafka, "ml", owner, 6, naming.labels("wine", "topic"), models_topic,
                                "kafka.strimzi.io/v1beta2")
    by_topic = {o["spec"]["topicName"]: (o, owned) for o, owned in made}
    assert set(by_topic) == {spec.kafka.output_topic, spec.kafka.dead_letter_topic, models_topic}
    for o, owned in by_topic.values():
        assert o["apiVersion"] == "kafka.strimzi.io/v1beta2" and o["metadata"]["labels"]["strimzi.io/cluster"] == CLUSTER
        assert o["spec"]["replicas"] == 3
        assert ("ownerReferences" in o["metadata"]) == owned
    assert by_topic[spec.kafka.output_topic][0]["spec"]["partitions"] == 6
    assert by_topic[models_topic][0]["spec"]["config"] == {"cleanup.policy": "compact"}
    assert not by_topic[models_topic][1]
    assert "scorestream.dev/modelserving" not in by_topic[models_topic][0]["metadata"]["labels"]
    assert strimzi.resource_name("wine_Records.v1") != strimzi.resource_name("wine-records-v1")


def test_the_driver_waits_for_a_topic_strimzi_has_not_made_and_not_for_one_that_went_unready():
    def kt(ready: str | None, topic: str | None = None, generation: int = 1, observed: int = 1) -> dict:
        status = {"observedGeneration": observed, "conditions": [{"type": "Ready", "status": ready, "message": "m"}]
                  if ready else []}
        return {"metadata": {"generation": generation}, "status": {**status, **({"topicName": topic} if topic else {})}}

    assert strimzi.waiting_for({"a": kt("True", "a"), "b": kt("True", "b")}) == (None, None)
    waiting, failing = strimzi.waiting_for({"a": None, "b": kt(None), "c": kt("False", "c")})
    assert "KafkaTopic a does not exist" in waiting and "KafkaTopic b is not Ready (no Ready condition yet)" in waiting
    assert "KafkaTopic c" not in waiting and failing == "KafkaTopic c is not Ready (m)"
    assert "generation 2" in strimzi.waiting_for({"a": kt("True", "a", generation=2)})[1]


def test_a_missing_secret_or_key_is_named_in_the_error_and_its_values_never():
    spec = s.ModelServingSpec.model_validate(_body(tls=TLS, authentication=SCRAM)["spec"])
    ca = secret_object(CA_SECRET, "ml", {"ca.crt": b"-----BEGIN CERTIFICATE-----\n"})
    with pytest.raises(strimzi.CredentialsError, match="Secret ml/bob .* does not exist"):
        strimzi.operator_credentials(spec.kafka, "ml", {CA_SECRET: ca, "bob": None})
    wrong = secret_object("bob", "ml", {"sasl.jaas.config": b"hunter2-secret"})
    with pytest.raises(strimzi.CredentialsError, match=r"has no key 'password' \(it has: sasl.jaas.config\)") as e:
        strimzi.operator_credentials(spec.kafka, "ml", {CA_SECRET: ca, "bob": wrong})
    assert "hunter2" not in str(e.value)
    creds = strimzi.operator_credentials(spec.kafka, "ml", {CA_SECRET: ca, "bob": secret_object("bob", "ml", {"password": b"pw"})})
    assert "pw" not in repr(creds)
    assert creds.librdkafka()["security.protocol"] == "SASL_SSL"


def test_the_manifest_of_the_docs_is_admitted_by_the_crd_and_the_types():
    import re

    import yaml
    from harness.admission import admit

    page = (Path(__file__).resolve().parents[1] / "docs" / "strimzi.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", page, re.S) if "kind: ModelServing" in b]
    manifest = next(d for d in yaml.safe_load_all(block) if d["kind"] == "ModelServing")
    assert admit(manifest) == []
    spec = s.ModelServingSpec.model_validate(manifest["spec"])
    assert spec.kafka.authentication.type == "tls" and spec.kafka.strimzi_topics.cluster == "my-cluster"


# --- a real broker secured as Strimzi's, and real jobs ----------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"), CLUSTER)


@pytest.fixture(scope="module")
def broker(pki, tmp_path_factory):
    """This module's broker (for the `serving` fixture too): the PLAINTEXT listener for the test's
    own set-up, `tls` and `scram` for the job and the operator."""
    b = SecureBroker(pki, log=tmp_path_factory.mktemp("broker") / "kafka.log").start(timeout=300)  # a loaded machine
    try:
        yield b
    finally:
        b.stop()


def _credentials(kind: str, pki: Pki, broker: SecureBroker, workdir: Path) -> tuple[str, dict]:
    """The bootstrap address and the job config's kafka.credentials, with the Secrets written as
    the driver's and executors' volumes hold them."""
    ca = write_secret(pki.cluster_ca_secret(), workdir / "ca" / "0")
    files = {"tls": True, "caFiles": [str(ca / "ca.crt")]}
    if kind == "scram":
        user = Pki.scram_user_secret("bob")
        broker.add_scram_user("bob", user["password"].decode())
        d = write_secret(user, workdir / "auth")
        return broker.scram_bootstrap, {**files, "mechanism": "scram-sha-512", "username": "bob",
                                        "passwordFile": str(d / "password")}
    d = write_secret(pki.tls_user_secret("alice"), workdir / "auth")
    if kind == "p12":
        return broker.tls_bootstrap, {**files, "mechanism": "tls", "keystoreFile": str(d / "user.p12"),
                                      "keystorePasswordFile": str(d / "user.password")}
    return broker.tls_bootstrap, {**files, "mechanism": "tls", "certificateFile": str(d / "user.crt"),
                                  "keyFile": str(d / "user.key")}


@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.timeout(600)
# mTLS with PEM files: the job of test_kafka_topics_are_made_and_the_job_waits_for_them_to_be_ready.
@pytest.mark.parametrize("kind", ["p12", "scram"])
def test_a_job_serves_through_the_strimzi_listener(kind, serving, demo_models, pki, broker, tmp_path):
    s_ = serving()
    s_.publish(demo_models["tree"])
    bootstrap, credentials = _credentials(kind, pki, broker, tmp_path / "secrets")
    job = s_.start(kafka={"bootstrapServers": bootstrap, "credentials": credentials}).wait_ready()
    config = job.config.to_json()
    for secret in (tmp_path / "secrets" / "auth").iterdir():
        if secret.name in ("password", "user.password", "user.key"):
            assert secret.read_text() not in config
    n = s_.produce(feed.wine_records(feed.wine_rows()[:200]))
    job.wait_records(n)
    out = s_.outputs(expect=n)
    assert len(out) == n and {o["model"]["name"] for o in out} == {"tree"}
    assert "sasl.jaas.config=" not in job.tail(400) and "BEGIN PRIVATE KEY" not in job.tail(400)
    assert job.stop() == 0


@pytest.mark.broker
@pytest.mark.parametrize("kind, auth", [("mtls-pem", MTLS), ("p12", P12), ("scram", SCRAM)])
async def test_the_operator_checks_topics_and_publishes_through_the_strimzi_listener(kind, auth, api, pki, broker,
                                                                                     tmp_path):
    """The operator's own clients (librdkafka), with the Secrets read through the real API server."""
    user = Pki.scram_user_secret("bob") if kind == "scram" else pki.tls_user_secret("alice")
    if kind == "scram":
        broker.add_scram_user("bob", user["password"].decode())
    api.create("v1/secrets", secret_object(CA_SECRET, api.ns, pki.cluster_ca_secret()))
    api.create("v1/secrets", secret_object("bob" if kind == "scram" else "alice", api.ns, user))
    suffix = tmp_path.name[-8:].replace("_", "-")
    names = {"dataTopic": f"records-{suffix}", "outputTopic": f"predictions-{suffix}",
             "deadLetterTopic": f"dlq-{suffix}", "modelsTopic": f"models-{suffix}"}
    create_topics(broker.bootstrap, {names["dataTopic"]: 2})
    bootstrap = broker.scram_bootstrap if kind == "scram" else broker.tls_bootstrap
    spec = s.ModelServingSpec.model_validate({**resource(names, broker)["spec"], "kafka": {
        **resource(names, broker)["spec"]["kafka"], "bootstrapServers": bootstrap, "tls": TLS, "authentication": auth}})
    token = api.cluster.token(api.installation.namespace, api.installation.service_account)
    kube = Kube.for_server(api.cluster.server, token, verify_ssl=False)
    try:
        props = await observer.kafka_client_properties(kube, api.ns, spec)
    finally:
        await kube.close()
    report = await asyncio.to_thread(topics.ensure_topics, spec.kafka, props)
    assert report.error is None and report.data_topic_exists and report.data_partitions == 2
    assert set(report.created) == {names["outputTopic"], names["deadLetterTopic"], names["modelsTopic"]}
    d = publish.descriptor(s.ModelServingSpec.model_validate({**spec.model_dump(by_alias=True), "model": {
        "name": "tree", "version": "1", "format": "pmml",
        "uri": "data:application/xml;base64," + base64.b64encode(models.tree_pmml(feed.wine_rows(), max_depth=2)).decode()}}))
    route = models_route.route(spec.kafka, api.ns, models_route.Assignment(), props)  # the spec's own topic
    await asyncio.to_thread(publish.publish, route, d, publish.rollout_id(d), api.ns, "wine")
    from scorestream.tools.local.process import read_topic

    (message,) = read_topic(broker.bootstrap, names["modelsTopic"], expect=1)
    assert json.loads(message.value())["name"] == "tree"
    # Without the credentials the listener refuses the same client.
    refused = await asyncio.to_thread(topics.ensure_topics, spec.kafka, {"security.protocol": "SSL",
                                                                         "ssl.ca.pem": pki.ca.read_text()}, -1, 5.0)
    assert refused.error is not None


# --- KafkaTopics on the real API server, and the operator waiting for them ---------------------------

@pytest.fixture(scope="module")
def strimzi_installed(kube, tmp_path_factory):
    """Strimzi's KafkaTopic and KafkaUser CRDs, from its published API (io.strimzi:api 0.49.0)."""
    import time

    def established(name: str) -> bool:
        crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") or {}
        return any(c["type"] == "Established" and c["status"] == "True"
                   for c in (crd.get("status") or {}).get("conditions") or [])

    crds = strimzi_crds(tmp_path_factory.mktemp("crds"))
    for crd in crds:
        if kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}") is None:
            kube.create(crd)
    deadline = time.monotonic() + 60
    while not all(established(c["metadata"]["name"]) for c in crds):
        assert time.monotonic() < deadline, "Strimzi's CRDs not Established in 60 s"
        time.sleep(0.2)
    return kube


def _play_topic_operator(api, broker, made: set[str]) -> None:
    """The double of Strimzi's Topic Operator: every KafkaTopic of the namespace becomes a real topic
    (through the admin API) and then Ready on its status."""
    for kt in api.request("GET", api.path("kafka.strimzi.io/v1beta2/kafkatopics"))["items"]:
        name, spec_ = kt["metadata"]["name"], kt["spec"]
        if name in made:
            continue
        create_topics(broker.bootstrap, {spec_["topicName"]: spec_["partitions"]},
                      {spec_["topicName"]: spec_.get("config") or {}})
        api.patch("kafka.strimzi.io/v1beta2/kafkatopics", name, {"status": {
            "observedGeneration": kt["metadata"]["generation"], "topicName": spec_["topicName"],
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
            subresource="status")
        made.add(name)



def _driver_pod_settled(api) -> bool:
    """Whether the driver StatefulSet's pod exists at its current revision."""
    sts, pod = obj(api, "apps/v1/statefulsets", "wine-driver"), obj(api, "v1/pods", "wine-driver-0")
    status = (sts or {}).get("status", {})
    return pod is not None and status.get("currentRevision") == status.get("updateRevision") == \
        pod["metadata"].get("labels", {}).get("controller-revision-hash")

@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.timeout(600)
async def test_kafka_topics_are_made_and_the_job_waits_for_them_to_be_ready(api, strimzi_installed, pki, broker,
                                                                            tmp_path):
    names = {"dataTopic": "records-kt", "outputTopic": "predictions_KT", "deadLetterTopic": "dlq-kt",
             "modelsTopic": f"models-{api.ns}"}
    create_topics(broker.bootstrap, {names["dataTopic"]: 2})
    pmml = models.tree_pmml(feed.wine_rows(), max_depth=2)
    body = resource(names, broker, model={"name": "tree", "version": "1", "format": "pmml",
                                          "uri": "data:application/xml;base64," + base64.b64encode(pmml).decode()})
    body["spec"]["kafka"].update(bootstrapServers=broker.tls_bootstrap, tls=TLS, authentication=MTLS,
                                 strimziTopics={"cluster": CLUSTER})
    body["spec"]["spark"]["triggerInterval"] = "500ms"
    api.create("v1/secrets", secret_object(CA_SECRET, api.ns, pki.cluster_ca_secret()))
    # The operator trusts a Secret it has read for secretsRecheck (it may not watch Secrets): 2 s
    # here, so that the KafkaUser Secret's removal below is seen within the wait for it.
    async with Operated(api, observeInterval=0.5, secretsRecheck=2) as run:
        await apply(api, body)
        # No KafkaUser Secret yet (Strimzi's User Operator writes it a moment after the KafkaUser).
        await until(lambda: condition(api, "wine", "Ready").get("reason") == "KafkaCredentialsMissing", timeout=30,
                    what="Ready=False KafkaCredentialsMissing")
        assert f"Secret {api.ns}/alice (kafka.authentication) does not exist" in condition(api, "wine", "Ready")["message"]
        assert obj(api, "apps/v1/statefulsets", "wine-driver") is None or \
            obj(api, "apps/v1/statefulsets", "wine-driver")["spec"]["replicas"] == 0
        user = pki.tls_user_secret("alice")
        api.create("v1/secrets", secret_object("alice", api.ns, user))
        await until(lambda: condition(api, "wine", "Ready").get("reason") == "TopicsNotReady", timeout=30,
                    what="Ready=False TopicsNotReady")
        assert "waiting for Strimzi's Topic Operator" in condition(api, "wine", "Ready")["message"]
        kts = {k["spec"]["topicName"]: k for k in
               api.request("GET", api.path("kafka.strimzi.io/v1beta2/kafkatopics"))["items"]}
        assert set(kts) == {names["outputTopic"], names["deadLetterTopic"], names["modelsTopic"]}
        assert all(k["metadata"]["labels"]["strimzi.io/cluster"] == CLUSTER for k in kts.values())
        assert kts[names["outputTopic"]]["metadata"]["ownerReferences"][0]["kind"] == "ModelServing"
        assert kts[names["outputTopic"]]["spec"]["partitions"] == 2
        # Made as v1, the newest Strimzi 0.49's CRD serves (read here as v1beta2, its stored version).
        assert {f["apiVersion"] for k in kts.values() for f in k["metadata"]["managedFields"]
                if f["manager"] == "scorestream-operator"} == {"kafka.strimzi.io/v1"}
        sts = obj(api, "apps/v1/statefulsets", "wine-driver")
        assert sts is None or sts["spec"]["replicas"] == 0  # the driver waits for the topics
        await asyncio.to_thread(_play_topic_operator, api, broker, set())
        await until(lambda: (obj(api, "apps/v1/statefulsets", "wine-driver") or {}).get("spec", {}).get("replicas") == 1,
                    timeout=30, what="the driver, once the KafkaTopics are Ready")
        # The job as the driver pod runs it, with the Secrets where its volumes put them.
        _, credentials = _credentials("mtls-pem", pki, broker, tmp_path / "secrets")
        write_secret(user, tmp_path / "secrets" / "auth")
        job = await run.start_job(tmp_path / "job", kafka={"credentials": credentials})
        await until(lambda: job.get("/models")["serving"].get("wine", {}).get("name") == "tree", timeout=120,
                    what="the model the operator published through mTLS")
        n = await asyncio.to_thread(feed.produce, broker.bootstrap, names["dataTopic"],
                                    feed.wine_records(feed.wine_rows()[:100]), partitions=2)
        await asyncio.to_thread(job.wait_records, n)
        from scorestream.tools.local.process import read_topic

        out = await asyncio.to_thread(read_topic, broker.bootstrap, names["outputTopic"], n)
        assert len(out) == n
        # The private key reaches the job as a file, never in its configuration or its log.
        assert user["user.key"].decode() not in job.config.to_json()
        assert "BEGIN PRIVATE KEY" not in job.tail(400)
        # The KafkaUser's Secret goes away under the running job (a KafkaUser recreated): the
        # driver keeps what it mounted and keeps running; the resource says so. Only a driver pod
        # that is there keeps running: one the StatefulSet is still making or replacing would not
        # start without the Secret, and is rightly held (a loaded CI machine was that slow).
        await until(lambda: _driver_pod_settled(api), timeout=60, what="the driver pod, made and not replaced")
        api.request("DELETE", api.path("v1/secrets", "alice"))
        await until(lambda: condition(api, "wine", "Degraded").get("reason") == "KafkaCredentialsMissing", timeout=30,
                    what="Degraded=True KafkaCredentialsMissing")
        assert obj(api, "apps/v1/statefulsets", "wine-driver")["spec"]["replicas"] == 1
