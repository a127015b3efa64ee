"""The end of the compatibility matrix (docs/compatibility.md) a test run is on.

Every run is on the newest releases the project supports. `make test-compat` sets
SCORESTREAM_MATRIX=oldest and runs a few test files again on the oldest it admits: the tests'
control plane at the oldest Kubernetes Chart.yaml's kubeVersion allows, Helm 3 with a kubectl of
that minor, and the oldest Kafka broker it claims. The fixtures (harness/fixtures.py) and the
harness's helm and kubectl (harness/operator.py `tool`) take their parts from here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from scorestream import jars
from scorestream.tools.local.broker import BROKER_JARS

from harness import cluster, helm


@dataclass(frozen=True)
class End:
    kube: str  # the control plane's release (cluster.KUBE_MODULES)
    tools: helm.Toolset  # helm and kubectl
    broker_jars: str  # the Kafka broker's jar set (scorestream.jars.SETS)
    kafka: str  # and its release


ENDS = {
    "newest": End(cluster.KUBE_VERSION, helm.NEWEST, BROKER_JARS, jars.KAFKA),
    "oldest": End(cluster.OLDEST_KUBE_VERSION, helm.OLDEST, "kafka-broker-oldest", jars.OLDEST_KAFKA),
}
NAME = os.environ.get("SCORESTREAM_MATRIX", "newest")
if NAME not in ENDS:
    raise RuntimeError(f"SCORESTREAM_MATRIX={NAME!r}: one of {', '.join(ENDS)}")
END = ENDS[NAME]
