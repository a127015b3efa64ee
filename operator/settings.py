"""The operator's own configuration (flags and environment), as a typed model."""

from __future__ import annotations

import ipaddress

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from scorestream import naming
from scorestream.config import ArtifactPolicy, Strict


class Peer(Strict):
    """Pods admitted to the jobs' read-only port: those with these labels in namespaces with these
    labels (a NetworkPolicy peer; both must match, so a tenant's look-alike pod elsewhere is not)."""

    namespace_labels: dict[str, str] = Field(alias="namespaceLabels", min_length=1)
    pod_labels: dict[str, str] = Field(alias="podLabels", min_length=1)


class ModelsKafka(Strict):
    """The operator's own Kafka principal, for publishing model messages (docs/operations/security.md)."""

    bootstrap_servers: str = Field(alias="bootstrapServers", min_length=1)
    """The one Kafka cluster these credentials are for: used only for a ModelServing whose
    kafka.bootstrapServers names the same brokers (they would be sent to any broker named)."""
    properties_file: str = Field(alias="propertiesFile", min_length=1)
    """A file of librdkafka settings with the operator's credentials (security.protocol,
    sasl.mechanism, sasl.username, sasl.password...): the chart mounts it from a Secret."""
class LeaderElection(Strict):
    """Replicas of the operator elect one active through a Lease (operator/leader.py). client-go's
    defaults are 15/10/2 s; a follower takes over between leaseDuration − retryPeriod and
    leaseDuration + retryPeriod after the leader's last renewal (it dates the Lease by its own
    reads), so 10 s keeps a takeover and its first reconcile within 15 s of a leader's death."""

    lease_name: str = Field(naming.OPERATOR_LEASE, alias="leaseName", min_length=1)
    """The Lease's name, in `namespace`."""
    namespace: str | None = None
    """Where the Lease is; None: operatorNamespace, else POD_NAMESPACE."""
    lease_duration: float = Field(10.0, alias="leaseDuration", ge=1)
    """Seconds a follower waits after the Lease last changed before it takes it over: the longest
    a dead leader leaves the resources unserved."""
    renew_deadline: float = Field(7.0, alias="renewDeadline", gt=0)
    """Seconds the leader keeps trying to renew before it stops (exits, to restart as a follower)."""
    retry_period: float = Field(2.0, alias="retryPeriod", gt=0)
    """Seconds between tries to take or renew the Lease."""

    @model_validator(mode="after")
    def _ordered(self) -> "LeaderElection":
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leaderElection: retryPeriod < renewDeadline < leaseDuration, or a leader may"
                             " still act after a follower took its Lease over")
        return self


class OperatorConfig(Strict):
    """Validated so that an operator never starts watching something other than what was meant."""

    namespaces: list[str] = Field(default_factory=list)
    """Namespaces to watch (the command line defaults it to the operator's own, POD_NAMESPACE)."""
    all_namespaces: bool = Field(False, alias="allNamespaces")
    """Watch every namespace (cluster-wide RBAC needed)."""
    leader_election: LeaderElection | None = Field(None, alias="leaderElection")
    """Replicas of the operator elect one active through a Lease; None: this one serves alone."""
    observe_interval: float = Field(10.0, alias="observeInterval", gt=0)
    """Seconds between observations of each job (status, drift repair, crash loops)."""
    workers: int = Field(8, ge=1, le=64)
    """Reconciles run at once, each of a different resource (one resource is never reconciled by two)."""
    rollout_poll: float = Field(1.0, alias="rolloutPoll", gt=0)
    """Seconds between looks at the job while a model rollout waits for its confirmation."""
    manage_topics: bool = Field(True, alias="manageTopics")
    """Ensure output, dead-letter and models topics exist and check the data topic."""
    secrets_recheck: float = Field(300.0, alias="secretsRecheck", ge=0)
    """Seconds the Kafka Secrets a spec names are trusted before they are read again (at once where
    a Kafka call failed): the operator may only read Secrets by name, not watch them."""
    topics_recheck: float = Field(60.0, alias="topicsRecheck", ge=0)
    """Seconds a complete topic check is trusted before the brokers are asked again."""
    reconcile_timeout: float = Field(120.0, alias="reconcileTimeout", ge=5, le=3600)
    """Seconds one reconcile may take: past it, it is given up, the resource gets a Warning Event
    (ReconcileTimedOut) and is tried again after a back-off, and its worker takes the next."""
    kafka_timeout: float = Field(3.0, alias="kafkaTimeout", ge=0.5, le=60)
    """Seconds one reconcile waits for Kafka at most, its topic check and model publishing
    together; brokers that do not answer in time make the resource Degraded (KafkaUnreachable)."""
    metrics_port: int | None = Field(None, alias="metricsPort", ge=1, le=65535)
    """Serve Prometheus metrics (reconciles by trigger and outcome, their duration) on this port."""
    health_port: int = Field(8080, alias="healthPort", ge=1, le=65535)
    """The liveness endpoint's port (/healthz; the chart's probes use 8080)."""
    endpoint_template: str | None = Field(None, alias="endpointTemplate")
    """The job's HTTP endpoint as a template of {name} and {namespace}; None: the driver pod's DNS name."""

    runtime_image: str | None = Field(None, alias="runtimeImage", min_length=1)
    """The runtime image of a ModelServing whose spec.spark.image is unset; None: such a resource
    is refused (status and Event NoRuntimeImage)."""
    allowed_images: list[str] = Field(default_factory=list, alias="allowedImages")
    """Glob patterns (fnmatch: '*' matches any characters, '/' included) a runtime image, and every
    image of the pod templates' containers, must match; empty: any image. runtimeImage is allowed."""
    api_server_cidrs: list[str] = Field(default_factory=list, alias="apiServerCIDRs")
    """Addresses of the API server as seen by pods (CIDRs): the jobs' NetworkPolicy admits them to
    the read-only port, for `kubectl scorestream` through the service proxy. Empty: not admitted."""

    artifact_allowed_networks: list[str] = Field(default_factory=list, alias="artifactAllowedNetworks")
    """Non-public networks (CIDRs) the jobs' artifact fetches may reach (ArtifactPolicy
    allowedNetworks, rendered into every job's configuration). Empty: none."""
    # The bounds: below 1 MiB no real model fits; above 16 GiB (or an hour) one fetch could hold a
    # driver's memory or its models follower for good. The defaults are ArtifactPolicy's own.
    artifact_max_fetch_bytes: int = Field(ArtifactPolicy.model_fields["max_fetch_bytes"].default,
                                          alias="artifactMaxFetchBytes", ge=1 << 20, le=16 << 30)
    """The largest artifact a job fetches from a location (ArtifactPolicy maxFetchBytes, the same
    for every job: a spec cannot raise it)."""
    artifact_fetch_timeout_seconds: float = Field(ArtifactPolicy.model_fields["fetch_timeout_seconds"].default,
                                                  alias="artifactFetchTimeoutSeconds", ge=1, le=3600)
    """Seconds one whole artifact fetch may take (ArtifactPolicy fetchTimeoutSeconds)."""

    log_format: Literal["text", "json"] = Field("text", alias="logFormat")
    """The operator's log lines: kopf's text format, or one JSON object per line (`kopf_logging`)."""

    models_topic: str | None = Field(None, alias="modelsTopic", pattern=r"^[a-zA-Z0-9._-]{1,249}$")
    """One models topic shared by every namespace; None: one per namespace,
    `<modelsTopicPrefix><namespace>` (the default). It applies to a ModelServing that leaves
    kafka.modelsTopic unset."""
    models_topic_prefix: str = Field(naming.MODELS_TOPIC_PREFIX, alias="modelsTopicPrefix",
                                     pattern=r"^[a-zA-Z0-9._-]{1,185}$")
    """The per-namespace models topics' common prefix (the operator's principal writes under it)."""
    models_kafka: ModelsKafka | None = Field(None, alias="modelsKafka")
    """The operator's own Kafka principal for the models topics it assigns (above). None: model
    messages are published with the ModelServing's own Kafka credentials."""

    monitoring_peers: list[Peer] = Field(default_factory=list, alias="monitoringPeers")
    """Who may scrape the jobs' read-only port (Prometheus, Grafana Alloy, vmagent, an OpenTelemetry
    collector): by namespace and pod labels. Empty: no one but the API server's CIDRs."""
    operator_namespace: str | None = Field(None, alias="operatorNamespace")
    """The operator's own namespace: only its pods there reach the jobs' control port. None: its
    labels in any namespace (the chart always sets it)."""

    def kopf_logging(self) -> dict[str, Any]:
        """kopf.configure's arguments for logFormat: its own JSON formatter carries the object a
        message is about (namespace and name) as fields, where the text format prefixes them."""
        import kopf

        return {"log_format": kopf.LogFormat.JSON if self.log_format == "json" else kopf.LogFormat.FULL}

    @field_validator("api_server_cidrs", "artifact_allowed_networks")
    @classmethod
    def _cidrs(cls, v: list[str]) -> list[str]:
        for cidr in v:
            ipaddress.ip_network(cidr, strict=False)  # a ValueError names the bad one
        return v

    @field_validator("allowed_images")
    @classmethod
    def _patterns(cls, v: list[str]) -> list[str]:
        if any(not p.strip() for p in v):
            raise ValueError("allowedImages: an empty pattern allows nothing; leave the list empty for any image")
        return v

    @model_validator(mode="after")
    def _one_scope(self) -> "OperatorConfig":
        if bool(self.namespaces) == self.all_namespaces:
            raise ValueError("watch either a list of namespaces or all namespaces (allNamespaces), not both or neither")
        return self
