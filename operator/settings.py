"""The operator's own configuration (flags and environment), as a typed model."""

from __future__ import annotations

from pydantic import Field

from scorestream.config import Strict


class OperatorConfig(Strict):
    namespaces: list[str] = Field(default_factory=list)
    """Namespaces to watch; empty with all_namespaces false: the operator's own namespace."""
    all_namespaces: bool = Field(False, alias="allNamespaces")
    """Watch every namespace (cluster-wide RBAC needed)."""
    peering: str | None = None
    """kopf peering name for HA: replicas of the operator elect one active; None: standalone."""
    observe_interval: float = Field(10.0, alias="observeInterval", gt=0)
    """Seconds between observations of each job (status, drift repair, crash loops)."""
    manage_topics: bool = Field(True, alias="manageTopics")
    """Ensure output, dead-letter and models topics exist and check the data topic."""
    endpoint_template: str | None = Field(None, alias="endpointTemplate")
    """The job's HTTP endpoint as a template of {name} and {namespace}; None: the driver pod's DNS name."""
