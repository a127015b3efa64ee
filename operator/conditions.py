"""The status conditions' vocabulary, and the one way a condition is set.

Every reason the operator writes into a condition is a `Reason`; code that matches a condition
(the reconciler's next look, Argo CD's health script's expectations, `status.recorded`) matches
these members, never a literal. A new reason is one new member. Members are `str`s, so what is
written to the status subresource is the reason's name, as before.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from scorestream.api.v1alpha1 import modelserving as s

Status = Literal["True", "False", "Unknown"]


class Reason(StrEnum):
    # Ready / Progressing / Degraded
    SERVING = "Serving"
    STABLE = "Stable"
    HEALTHY = "Healthy"
    APPLY_FAILED = "ApplyFailed"
    SUSPENDED = "Suspended"
    DATA_TOPIC_MISSING = "DataTopicMissing"
    DRIVER_CREATING = "DriverCreating"
    DRIVER_STARTING = "DriverStarting"
    DRIVER_FAILING = "DriverFailing"
    JOB_NOT_READY = "JobNotReady"
    JOB_ANSWER_INVALID = "JobAnswerInvalid"
    TOPICS_UNAVAILABLE = "TopicsUnavailable"
    TOPICS_NOT_READY = "TopicsNotReady"  # KafkaTopics Strimzi has not made Ready yet
    KAFKA_CREDENTIALS_MISSING = "KafkaCredentialsMissing"  # a Secret or key spec.kafka names
    KAFKA_UNREACHABLE = "KafkaUnreachable"  # no broker answered within the reconcile's Kafka budget
    # The job finds partitions with fewer in-sync replicas than min.insync.replicas (job_http.KafkaError)
    NOT_ENOUGH_REPLICAS = "NotEnoughReplicas"
    UPGRADING = "Upgrading"
    UPGRADE_FAILED = "UpgradeFailed"
    UPGRADE_ROLLED_BACK = "UpgradeRolledBack"
    INVALID_SPEC = "InvalidSpec"
    NO_RUNTIME_IMAGE = "NoRuntimeImage"
    IMAGE_NOT_ALLOWED = "ImageNotAllowed"
    # Degraded, the driver's container as Kubernetes reports it (its waiting reason)
    CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
    ERROR = "Error"
    OOM_KILLED = "OOMKilled"
    CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
    CREATE_CONTAINER_ERROR = "CreateContainerError"
    IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
    ERR_IMAGE_PULL = "ErrImagePull"
    INVALID_IMAGE_NAME = "InvalidImageName"
    RESTARTING = "Restarting"  # restarted again and again, waiting for another reason
    # ModelReady
    NO_MODEL = "NoModel"
    ROLLING_OUT = "RollingOut"
    CANARY_ANALYSIS = "CanaryAnalysis"
    SHADOW_ANALYSIS = "ShadowAnalysis"
    ROLLED_BACK = "RolledBack"
    ROLLED_BACK_BY_REQUEST = "RolledBackByRequest"
    PUBLISH_FAILED = "PublishFailed"


# The driver's waiting reasons that mean it fails (not that it is on its way).
CRASH_REASONS = frozenset({Reason.CRASH_LOOP_BACK_OFF, Reason.ERROR, Reason.OOM_KILLED,
                           Reason.CREATE_CONTAINER_CONFIG_ERROR, Reason.CREATE_CONTAINER_ERROR,
                           Reason.IMAGE_PULL_BACK_OFF, Reason.ERR_IMAGE_PULL, Reason.INVALID_IMAGE_NAME})

# A condition False for one of these reasons is on its way or at rest, not failing.
BENIGN_FALSE = frozenset({Reason.DRIVER_CREATING, Reason.DRIVER_STARTING, Reason.JOB_NOT_READY, Reason.NO_MODEL,
                          Reason.ROLLING_OUT, Reason.SUSPENDED, Reason.CANARY_ANALYSIS, Reason.SHADOW_ANALYSIS,
                          Reason.UPGRADING, Reason.STABLE, Reason.TOPICS_NOT_READY})

# Why the operator will not run a resource: announced by one Warning of its own, not per condition.
REFUSALS = frozenset({Reason.INVALID_SPEC, Reason.NO_RUNTIME_IMAGE, Reason.IMAGE_NOT_ALLOWED})


def analysis(strategy: str) -> Reason:
    """ModelReady's reason while a candidate of this strategy (Canary, Shadow) is analyzed."""
    return Reason(f"{strategy}Analysis")


def crash_reason(waiting_reason: str | None) -> Reason:
    """Degraded's reason for a failing driver: its waiting reason where it names a failure."""
    return Reason(waiting_reason) if waiting_reason in CRASH_REASONS else Reason.RESTARTING


def find(conditions: list[s.Condition], ctype: s.ConditionType) -> s.Condition | None:
    return next((c for c in conditions if c.type == ctype), None)


def set_condition(conditions: list[s.Condition], ctype: s.ConditionType, status: Status, reason: Reason,
                  message: str, generation: int, now: str) -> list[s.Condition]:
    """`conditions` with `ctype` set, as apimachinery's meta.SetStatusCondition does it: the
    lastTransitionTime moves only when the status changes; reason, message and observed generation
    are always the new ones. A condition not there yet is added at the end."""
    old = find(conditions, ctype)
    new = s.Condition(type=ctype, status=status, reason=reason.value, message=message,
                      lastTransitionTime=old.last_transition_time if old and old.status == status else now,
                      observedGeneration=generation)
    if old is None:
        return [*conditions, new]
    return [new if c.type == ctype else c for c in conditions]
