"""`kubectl scorestream ui NAME`: Spark's web UI of a ModelServing's driver, through a port-forward
that kubectl runs (as the user: their kubeconfig, context and the `pods/portforward` permission)
to the driver Service's port spark-ui. The UI is there only where spec.spark.ui.enabled."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from scorestream import naming


class NoUI(Exception):
    """Why there is no UI to forward to, said as one line."""


def check(ms: dict[str, Any]) -> None:
    """Refuses a resource whose driver serves no UI: not switched on, or no driver running."""
    meta, spec = ms["metadata"], ms.get("spec") or {}
    where = f"modelserving {meta.get('namespace')}/{meta['name']}"
    if not ((spec.get("spark") or {}).get("ui") or {}).get("enabled"):
        raise NoUI(f"{where} has Spark's UI off: set spec.spark.ui.enabled=true (the driver restarts with it)")
    if spec.get("suspend"):
        raise NoUI(f"{where} is suspended: no driver runs to serve the UI")


def command(kubectl: str, name: str, namespace: str, local_port: int, address: str = "127.0.0.1",
            kubeconfig: str | None = None, context: str | None = None) -> list[str]:
    """The port-forward: `local_port` on `address` to the driver Service's Spark UI port."""
    flags = [*(["--kubeconfig", kubeconfig] if kubeconfig else []), *(["--context", context] if context else [])]
    return [kubectl, *flags, "--namespace", namespace, "port-forward", f"service/{naming.Names(name, namespace).driver}",
            f"{local_port}:{naming.SPARK_UI_PORT}", "--address", address]


def forward(ms: dict[str, Any], local_port: int, address: str = "127.0.0.1", kubeconfig: str | None = None,
            context: str | None = None) -> int:
    """Runs the port-forward until it ends or is interrupted; its exit code."""
    check(ms)
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise NoUI("kubectl is not on PATH: the UI is reached through `kubectl port-forward`")
    name, namespace = ms["metadata"]["name"], ms["metadata"]["namespace"]
    print(f"Spark UI of {namespace}/{name}: http://{address}:{local_port}/ (Ctrl-C to stop)", flush=True)
    try:
        return subprocess.run(command(kubectl, name, namespace, local_port, address, kubeconfig, context)).returncode
    except KeyboardInterrupt:
        return 0
