"""Every name that two parts of scorestream must agree on, in one place: consumer groups and
models-topic keys, the child objects' names, ports, labels and annotations."""

from __future__ import annotations

import uuid
from dataclasses import dataclass


def data_group(namespace: str, name: str) -> str:
    """The data topic's consumer group: one per ModelServing, shared by all its executors.

    Two ModelServings reading one data topic get two groups, so both see every record.
    """
    return f"scorestream.{namespace}.{name}"


def source_group_prefix(namespace: str, name: str) -> str:
    """The prefix of the groups Spark's Kafka source reads with (it adds a unique suffix and never
    commits); progress is committed to ``data_group`` by the driver."""
    return f"{data_group(namespace, name)}.source"


def transactional_prefix(namespace: str, name: str, data_topic: str) -> str:
    """The transactional ids of a ``delivery: exactlyOnce`` job's writers, one per data-topic
    partition (``<prefix>-<partition>``): the same in every run, attempt and executor, so a
    writer fences every earlier one of its partition (docs/adr/0029)."""
    return f"{data_group(namespace, name)}.tx.{data_topic}"


def models_group(namespace: str, name: str, run_id: str | None = None) -> str:
    """The models topic's group: one per run, so every job (and every restart) reads all models."""
    return f"{data_group(namespace, name)}.models.{run_id or uuid.uuid4().hex[:12]}"


# The models topic of a namespace, where the operator's configuration names no shared one: the
# tenant's principal reads only its namespace's topic, the operator's writes them all (by prefix).
MODELS_TOPIC_PREFIX = "scorestream-models."


def namespace_models_topic(namespace: str, prefix: str = MODELS_TOPIC_PREFIX) -> str:
    return f"{prefix}{namespace}"


CANDIDATE = "candidate"


def model_key(namespace: str, name: str, data_type: str, candidate: bool = False) -> str:
    """The models topic's message key for one ModelServing: ``<namespace>/<name>/<dataType>``, and
    ``.../candidate`` for its canary or shadow. Compaction keeps the latest message per key, and a
    job accepts only keys addressed to it, so ModelServings sharing a topic and a dataType (in one
    namespace or several) never install each other's models."""
    base = f"{namespace}/{name}/{data_type}"
    return f"{base}/{CANDIDATE}" if candidate else base


def unaddressed_model_key(data_type: str, candidate: bool = False) -> str:
    """The report's key, by dataType alone (``<dataType>``, ``<dataType>/candidate``). A job
    accepts it only where its spec opts in (``kafka.acceptUnaddressedModels``, its own topic)."""
    return f"{data_type}/{CANDIDATE}" if candidate else data_type


@dataclass(frozen=True)
class ModelKey:
    """What a models-topic key says: to whom (None for the report's unaddressed keys), which
    dataType ("" for an unkeyed message) and which role."""

    namespace: str | None
    name: str | None
    data_type: str
    candidate: bool

    def addressed_to(self, namespace: str, name: str) -> bool:
        return (self.namespace, self.name) == (namespace, name)


def parse_model_key(key: str) -> ModelKey:
    """The inverse of ``model_key`` and ``unaddressed_model_key``. Kubernetes names and dataTypes
    hold no '/', so three or more segments are an address and fewer are the report's key."""
    parts = key.split("/")
    candidate = len(parts) in (2, 4) and parts[-1] == CANDIDATE
    if candidate:
        parts = parts[:-1]
    if len(parts) == 3:
        return ModelKey(parts[0], parts[1], parts[2], candidate)
    if len(parts) == 1:
        return ModelKey(None, None, parts[0], candidate)
    # Neither shape (a '/' too many or too few): nobody's address; the role part is kept whole.
    return ModelKey("", "", key, False)


# -- the API group, and the labels and annotations under it ----------------------------------------

GROUP = "scorestream.dev"
# Every pod and object of one ModelServing carries it: the scale subresource's selector.
MODELSERVING_LABEL = f"{GROUP}/modelserving"
# The job configuration a driver runs (its pod template's annotation): a change rolls the driver.
CONFIG_HASH_ANNOTATION = f"{GROUP}/config-hash"
# Label keys a template may not set on any pod: what NetworkPolicies and monitoring select by.
OPERATOR_LABEL_PREFIXES = ("app.kubernetes.io/", f"{GROUP}/")
# The operator's pods, as the NetworkPolicy of every job admits them to its control port. The chart
# sets it on the operator's pods whatever nameOverride or fullnameOverride say: its own
# app.kubernetes.io/name follows nameOverride, so a policy selecting by that would lock the operator
# out of every job (templates/_helpers.tpl scorestream.operatorPodLabels; tests/test_chart.py).
# Under the API group, which a pod template may not set on the pods the operator makes.
OPERATOR_POD_LABELS = {f"{GROUP}/component": "operator"}

# Manual rollout controls (`kubectl scorestream promote|abort|rollback`): annotations on the
# resource, not spec fields, because they are one-off requests about what the operator did (a
# candidate it published, a version in status.model.history), not desired state: a GitOps tool
# that reapplies the manifest leaves an annotation it does not own in place, where it would
# revert a spec field. Each value is a request id; the operator acts on a value once and records
# it in status.controls. rollback-to's value is the version, optionally followed by '@<request id>'
# so that a second rollback to the same version is a new request.
PROMOTE_ANNOTATION = f"{GROUP}/promote"
ABORT_ANNOTATION = f"{GROUP}/abort"
ROLLBACK_ANNOTATION = f"{GROUP}/rollback-to"
CONTROL_ANNOTATIONS = {"promote": PROMOTE_ANNOTATION, "abort": ABORT_ANNOTATION, "rollbackTo": ROLLBACK_ANNOTATION}

# The Lease the operator's replicas elect their leader with, in the operator's namespace.
OPERATOR_LEASE = "scorestream-operator"

# -- ports ---------------------------------------------------------------------------------------

# The job's control port (every endpoint; POST /executors with the token): the operator's.
HTTP_PORT = 8080
# The job's read-only port (/metrics, /stats, /models, /healthz, /readyz): monitoring's and the probes'.
METRICS_PORT = 9090
DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079
# Spark's web UI on the driver, where spec.spark.ui.enabled: its port in the driver container and
# in the driver's Service, by this name (what `kubectl scorestream ui` port-forwards to).
SPARK_UI_PORT = 4040
SPARK_UI_PORT_NAME = "spark-ui"


# -- child objects ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Names:
    """Every child object's name, from the resource's name."""

    name: str
    namespace: str

    @property
    def config(self) -> str:
        return f"{self.name}-job"

    @property
    def control_secret(self) -> str:
        """The Secret holding the job's control token."""
        return f"{self.name}-control"

    @property
    def service_account(self) -> str:
        return f"{self.name}-driver"

    @property
    def driver(self) -> str:
        """The StatefulSet, its headless Service, Role and RoleBinding."""
        return f"{self.name}-driver"

    @property
    def driver_pod(self) -> str:
        return f"{self.driver}-0"

    @property
    def driver_host(self) -> str:
        return f"{self.driver_pod}.{self.driver}.{self.namespace}.svc"

    @property
    def endpoint(self) -> str:
        return f"http://{self.driver_host}:{HTTP_PORT}"


def labels(name: str, component: str = "driver") -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "scorestream",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "scorestream-operator",
        MODELSERVING_LABEL: name,
    }


def selector(name: str) -> dict[str, str]:
    return {MODELSERVING_LABEL: name, "app.kubernetes.io/component": "driver"}


def selector_string(name: str) -> str:
    """The scale subresource's selector: every pod of the job, driver and executors."""
    return f"{MODELSERVING_LABEL}={name}"
