"""The compatibility matrix (docs/compatibility.md): the parts a run is on, asked for their versions,
are those of its end (harness/matrix.py). Every run is on the newest; `make test-compat` runs this
file and the user paths of a few others (COMPAT_TESTS in the Makefile) on the oldest the project
admits, where it prints the versions they ran on."""

from __future__ import annotations

import json
import subprocess

from harness.matrix import END, NAME
from harness.operator import tool


def test_the_parts_run_the_versions_of_the_runs_end_of_the_matrix(kube, helm, broker):
    api_server = kube.get("/version")["gitVersion"]
    helm_version = subprocess.run([str(helm), "version", "--short"], capture_output=True, text=True,
                                  check=True).stdout.strip()
    kubectl = json.loads(tool("kubectl", kube, "version", "--client", "-o", "json").stdout)["clientVersion"]["gitVersion"]
    print(f"the {NAME} end of the matrix: kube-apiserver {api_server}, helm {helm_version}, kubectl {kubectl}, "
          f"Apache Kafka broker {broker.version} (KRaft)")
    assert api_server == END.kube
    assert helm_version.split("+")[0] == END.tools.helm and kubectl == END.tools.kubectl
    assert broker.version == END.kafka
