"""Pod templates (spec.driver.podTemplate, spec.executor.podTemplate) merged under the operator's pod.

Pure. The rules follow the Flink Kubernetes Operator's pod template merge (its
`kubernetes.operator.pod-template.merge-arrays-by-name`): objects are merged key by key, lists of
named items by name, and where both say something the operator's value wins. docs/pod-templates.md
lists what the operator owns; this module is where that list is enforced.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from scorestream.operator import spec as s

# The main container's fields the operator sets whole: a template's value would not be merged
# into them but replaced (args would be appended to the operator's command, a port list merged
# by name could expose another port, probes and resources come from spec.spark, and a merged
# securityContext could add capabilities or `privileged` next to the operator's hardening).
MAIN_CONTAINER_OWNED = ("image", "imagePullPolicy", "command", "args", "ports", "resources",
                        "startupProbe", "livenessProbe", "readinessProbe", "securityContext")
# Pod fields the operator decides whatever the template says: who the pod runs as (the driver's
# ServiceAccount is what its Role is bound to; `serviceAccount` is the field's deprecated alias).
POD_OWNED = ("serviceAccountName", "serviceAccount", "automountServiceAccountToken",
             "terminationGracePeriodSeconds")
# The driver's volumes by name; `checkpoint` is the StatefulSet's volume claim template.
DRIVER_VOLUMES = ("config", "tmp", "checkpoint", "kafka-client", "control")
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def _key(list_name: str | None) -> str:
    # A volume may be mounted at several paths: mounts are told apart by where they go.
    return "mountPath" if list_name == "volumeMounts" else "name"


def merge(template: Any, owned: Any, list_name: str | None = None) -> Any:
    """`owned` merged over `template`: objects key by key, lists of named items by name (the
    owned items first, in their order, then the template's others), anything else: owned."""
    if isinstance(template, dict) and isinstance(owned, dict):
        out = dict(template)
        for k, v in owned.items():
            out[k] = merge(template[k], v, k) if k in template else copy.deepcopy(v)
        return out
    if isinstance(template, list) and isinstance(owned, list):
        key = _key(list_name)
        if all(isinstance(i, dict) and key in i for i in template + owned):
            by_key = {i[key]: i for i in template}
            mine = {i[key] for i in owned}
            return [merge(by_key[i[key]], i, list_name) if i[key] in by_key else copy.deepcopy(i) for i in owned] + \
                   [copy.deepcopy(i) for i in template if i[key] not in mine]
        return copy.deepcopy(owned) + [copy.deepcopy(i) for i in template if i not in owned]
    return copy.deepcopy(owned)


def _cleared(pod_spec: dict[str, Any], main: str, volumes: tuple[str, ...] = ()) -> dict[str, Any]:
    """The template's pod spec without what the operator owns outright."""
    out = {k: copy.deepcopy(v) for k, v in pod_spec.items() if k not in POD_OWNED}
    out["containers"] = [{k: v for k, v in c.items() if k not in MAIN_CONTAINER_OWNED}
                         if isinstance(c, dict) and c.get("name") == main else c
                         for c in out.get("containers") or []]
    if volumes and out.get("volumes"):
        out["volumes"] = [v for v in out["volumes"] if not (isinstance(v, dict) and v.get("name") in volumes)]
    if not out["containers"]:
        del out["containers"]
    return out


def merged_pod(template: s.PodTemplate | None, owned: dict[str, Any], main: str,
               volumes: tuple[str, ...] = ()) -> dict[str, Any]:
    """The operator's pod template (`owned`: {metadata, spec}) with `template` merged under it."""
    if template is None:
        return owned
    under = {"metadata": template.metadata.model_dump(exclude_defaults=True),
             "spec": _cleared(template.spec, main, volumes)}
    return merge(under, owned)


def executor_pod(template: s.PodTemplate, name: str, main: str) -> dict[str, Any]:
    """The pod Spark starts each executor from (spark.kubernetes.executor.podTemplateFile): the
    template, its main container named so that Spark picks it (and not a sidecar, which it
    would take when no container has the name it is given), the operator's labels over the template's.
    Spark itself then sets the image, command, resources, ports and its own env and labels."""
    owned = {"metadata": {"labels": {"scorestream.dev/modelserving": name, "app.kubernetes.io/component": "executor"}},
             "spec": {"containers": [{"name": main}]}}
    return {"apiVersion": "v1", "kind": "Pod", **merged_pod(template, owned, main)}


def executor_pod_yaml(template: s.PodTemplate, name: str, main: str) -> str:
    return yaml.safe_dump(executor_pod(template, name, main), sort_keys=True)


def template_images(spec: s.ModelServingSpec) -> list[str]:
    """The images the pod templates add (sidecars, init containers): the main containers' are
    the operator's (spec.spark.image) and never taken from a template."""
    images = []
    for settings, main in ((spec.driver, "driver"), (spec.executor, "executor")):
        if settings.pod_template is None:
            continue
        for list_name in CONTAINER_LISTS:
            for c in settings.pod_template.spec.get(list_name) or []:
                if isinstance(c, dict) and not (list_name == "containers" and c.get("name") == main) and c.get("image"):
                    images.append(str(c["image"]))
    return images


def overridden(spec: s.ModelServingSpec) -> list[str]:
    """The paths of pod template fields the operator sets whatever the template says (for
    `scorestream render` to warn about: the merge drops them without a word)."""
    from scorestream.operator.desired import DRIVER_CONTAINER, EXECUTOR_CONTAINER

    found = []
    for role, main, volumes in (("driver", DRIVER_CONTAINER, DRIVER_VOLUMES), ("executor", EXECUTOR_CONTAINER, ())):
        template = getattr(spec, role).pod_template
        if template is None:
            continue
        at = f"spec.{role}.podTemplate.spec"
        found += [f"{at}.{k}" for k in POD_OWNED if k in template.spec]
        for i, c in enumerate(template.spec.get("containers") or []):
            if isinstance(c, dict) and c.get("name") == main:
                found += [f"{at}.containers[{i}].{k}" for k in MAIN_CONTAINER_OWNED if k in c]
        found += [f"{at}.volumes[{i}] ({v['name']})" for i, v in enumerate(template.spec.get("volumes") or [])
                  if isinstance(v, dict) and v.get("name") in volumes]
    return found
