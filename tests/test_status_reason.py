"""`kubectl get ms` says why a resource is not ready: status.reason (the REASON column) and a phase
that is not Pending while the resource is Degraded."""

from __future__ import annotations

from test_argocd_health import PMML, RUNNING, computed, resource

from scorestream.operator import crd, status


def test_reason_column_reads_status_reason():
    columns = {c["name"]: c["jsonPath"] for c in crd.generate()["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert columns["Reason"] == ".status.reason"


def test_topics_unavailable_before_the_driver_runs_is_degraded_with_its_reason():
    st = computed(PMML, topics_error="Kafka at kafka:9092 did not answer within 5 s")["status"]
    assert (st["phase"], st["reason"]) == ("Degraded", "TopicsUnavailable")


def test_reason_is_ready_s_while_not_ready_and_empty_when_serving():
    assert computed(PMML, data_topic_exists=False)["status"]["reason"] == "DataTopicMissing"
    assert computed(PMML)["status"]["reason"] == "DriverCreating"
    assert computed(resource(PMML, suspend=True))["status"]["reason"] == "Suspended"
    serving = computed(PMML, **RUNNING)["status"]
    assert (serving["phase"], serving["reason"]) == ("Running", "")
    crashing = computed(PMML, driver=status.DriverState(exists=True, restarts=5, waiting_reason="CrashLoopBackOff"))
    assert (crashing["status"]["phase"], crashing["status"]["reason"]) == ("Degraded", "CrashLoopBackOff")


def test_brokers_that_do_not_answer_are_degraded_kafka_unreachable():
    st = computed(PMML, topics_error="Kafka at kafka:9092 did not answer within 3 s", kafka_unreachable=True)["status"]
    assert (st["phase"], st["reason"]) == ("Degraded", "KafkaUnreachable")
    degraded = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and "did not answer within 3 s" in degraded["message"]


MISSING = "Secret ml/alice (kafka.authentication) does not exist"


def test_a_missing_kafka_secret_holds_back_a_driver_not_yet_started():
    st = computed(PMML, credentials_error=MISSING)["status"]
    assert (st["phase"], st["reason"]) == ("Degraded", "KafkaCredentialsMissing")
    seen = status.recorded(computed(PMML, credentials_error=MISSING))
    assert seen.kafka_waiting  # drift repair renders no driver either


def test_a_kafka_secret_gone_from_under_a_running_driver_leaves_it_running_and_degraded():
    # The pod keeps the Secret it mounted; scaling it to zero would stop a job that works.
    body = computed(PMML, credentials_error=MISSING, **RUNNING)
    st = body["status"]
    ready, degraded = (next(c for c in st["conditions"] if c["type"] == t) for t in ("Ready", "Degraded"))
    assert ready["status"] == "True" and (degraded["status"], degraded["reason"]) == ("True", "KafkaCredentialsMissing")
    assert MISSING in degraded["message"] and st["reason"] == "KafkaCredentialsMissing"
    assert not status.recorded(body).kafka_waiting  # drift repair keeps the driver


def test_kafka_topics_no_longer_ready_leave_a_running_driver_running():
    body = computed(PMML, topics_waiting="KafkaTopic predictions-ml is not Ready", **RUNNING)
    degraded = next(c for c in body["status"]["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "TopicsNotReady")
    assert not status.recorded(body).kafka_waiting


def short_of_replicas(role: str) -> dict:
    """The job's report (job_http.Stats.kafkaErrors) of a topic with fewer in-sync replicas than its minimum."""
    from scorestream.api import job_http

    error = job_http.KafkaError(code="NOT_ENOUGH_REPLICAS", topic="predictions", role=role, partitions=[0],
                                inSyncReplicas=1, minInSyncReplicas=2, since=1.7e9,
                                message="predictions: 1 of 2 in-sync replicas on partition 0")
    return dict(RUNNING, job=RUNNING["job"].model_copy(update={"kafka_errors": [error]}))


def test_a_topic_the_job_writes_short_of_in_sync_replicas_is_degraded_not_ready_and_clears_when_they_are_back():
    st = computed(PMML, **short_of_replicas("output"))["status"]
    ready, degraded = (next(c for c in st["conditions"] if c["type"] == t) for t in ("Ready", "Degraded"))
    assert (st["phase"], st["reason"]) == ("Degraded", "NotEnoughReplicas")
    assert ready["status"] == "False" and degraded["status"] == "True" and "1 of 2 in-sync" in degraded["message"]
    back = computed(PMML, previous=st, **RUNNING)["status"]
    assert (back["phase"], back["reason"]) == ("Running", "")


def test_a_data_topic_short_of_in_sync_replicas_leaves_the_job_serving_and_degraded():
    st = computed(PMML, **short_of_replicas("data"))["status"]
    ready, degraded = (next(c for c in st["conditions"] if c["type"] == t) for t in ("Ready", "Degraded"))
    assert ready["status"] == "True" and (degraded["status"], degraded["reason"]) == ("True", "NotEnoughReplicas")
