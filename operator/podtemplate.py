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

from scorestream import naming
from scorestream.api.v1alpha1 import modelserving as s

# The main container's fields the operator sets whole: a template's value would not be merged
# into them but replaced (args would be appended to the operator's command, a port list merged
# by name could expose another port, probes and resources come from spec.spark, and a merged
# securityContext could add capabilities or `privileged` next to the operator's hardening).
MAIN_CONTAINER_OWNED = ("image", "imagePullPolicy", "command", "args", "ports", "resources",
                        "startupProbe", "livenessProbe", "readinessProbe", "securityContext")
# Pod fields the operator decides whatever the template says: who the pod runs as (the driver's
# ServiceAccount is what its Role is bound to; `serviceAccount` is the field's deprecated alias).
# And what would let another container reach the main one's files, token included (a shared
# process namespace exposes /proc/<pid>/root), or the node's.
POD_OWNED = ("serviceAccountName", "serviceAccount", "automountServiceAccountToken",
             "terminationGracePeriodSeconds", "shareProcessNamespace", "hostPID", "hostIPC", "hostNetwork",
             "hostUsers")
# The driver's volumes by name; `checkpoint` is the StatefulSet's volume claim template.
# `sa-token` is the ServiceAccount's token, projected into the main container only.
# `store-*` are spec.modelStore's Secrets (desired.STORE_VOLUMES); `kafka-ca`, `kafka-auth` the Kafka credentials (operator/strimzi.py).
DRIVER_VOLUMES = ("config", "tmp", "checkpoint", "kafka-client", "kafka-ca", "kafka-auth", "control", "sa-token", "store-s3",
                  "store-gcs", "store-https")
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
# Where the main container's ServiceAccount token is (Kubernetes' own path, where Spark's client looks).
SA_TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Environment a template may not give the main container: what steers the JVM (options, agents,
# class path), Spark, Python, the dynamic loader, the Kubernetes client (which API server) and the
# job itself. `envFrom` could carry any of them, so the main container takes none from a template.
STEERING_ENV_PREFIXES = ("JAVA_", "_JAVA_", "JDK_", "JVM_", "SPARK_", "PYSPARK_", "PYTHON", "LD_", "HADOOP_",
                         "KUBERNETES_", "SCORESTREAM_", "MALLOC_", "GLIBC_",
                         # OpenSSL's configuration and providers (code it loads), the TLS trust and
                         # key log; the cloud SDKs' credential and metadata endpoints.
                         "OPENSSL_", "SSL", "AWS_CONTAINER_", "AWS_EC2_METADATA_", "GCE_METADATA_")
STEERING_ENV = ("CLASSPATH", "HOME", "PATH", "POD_NAME", "POD_IP",
                # glibc loads charset converters (shared objects) and locale data from these.
                "GCONV_PATH", "LOCPATH", "NLSPATH", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
# Paths a template may not mount into the main container, nor above nor under: the job's own files
# (configuration, checkpoint, Secrets, token), the code it runs (the image's system and /opt) and
# the files that steer the loader (/etc/ld.so.preload).
PROTECTED_PATHS = ("/etc", "/opt", "/usr", "/lib", "/lib64", "/bin", "/sbin", "/var/lib/scorestream",
                   "/var/run/secrets", "/tmp", "/root", "/home", "/proc", "/sys", "/dev")


def _steering(name: str) -> bool:
    # Proxies are read in either case (https_proxy, HTTPS_PROXY, all_proxy, no_proxy...): every
    # fetch of the job would go through, or around, a host of the template's choosing.
    return name in STEERING_ENV or name.startswith(STEERING_ENV_PREFIXES) or name.upper().endswith("_PROXY")


def _protected(path: str) -> bool:
    p = "/" + str(path).strip("/")
    return p == "/" or any(p == q or p.startswith(q + "/") or q.startswith(p + "/") for q in PROTECTED_PATHS)


def _gives_token(volume: Any) -> bool:
    """A template volume that would hand a container a ServiceAccount token of its own."""
    sources = ((volume.get("projected") or {}).get("sources") or []) if isinstance(volume, dict) else []
    return any(isinstance(src, dict) and "serviceAccountToken" in src for src in sources)


def _kept(c: dict[str, Any], list_name: str, drop) -> dict[str, Any]:
    """`c` without the items of its list `list_name` that `drop` says; an emptied list goes too (the
    API server would drop it, and the drift check would then find the pod changed)."""
    if not c.get(list_name):
        return c
    kept = [i for i in c[list_name] if not (isinstance(i, dict) and drop(i))]
    return {**{k: v for k, v in c.items() if k != list_name}, **({list_name: kept} if kept else {})}


def _main_container(c: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in c.items() if k not in MAIN_CONTAINER_OWNED and k != "envFrom"}
    out = _kept(out, "env", lambda e: _steering(str(e.get("name", ""))))
    return _kept(out, "volumeMounts", lambda m: _protected(m.get("mountPath", "/")))


def _other_container(c: Any, withheld: set[str]) -> Any:
    """A sidecar, init or ephemeral container: none of the operator's volumes (the job's Secrets,
    configuration, token) nor a token volume of the template's own."""
    return _kept(c, "volumeMounts", lambda m: m.get("name") in withheld) if isinstance(c, dict) else c


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
    tokens = {v.get("name") for v in out.get("volumes") or [] if _gives_token(v)}
    withheld = set(DRIVER_VOLUMES) | tokens
    out["containers"] = [_main_container(c) if isinstance(c, dict) and c.get("name") == main
                         else _other_container(c, withheld) for c in out.get("containers") or []]
    for list_name in ("initContainers", "ephemeralContainers"):
        if out.get(list_name):
            out[list_name] = [_other_container(c, withheld) for c in out[list_name]]
    if out.get("volumes"):
        out["volumes"] = [v for v in out["volumes"]
                          if not (isinstance(v, dict) and (v.get("name") in volumes or _gives_token(v)))]
    if not out["containers"]:
        del out["containers"]
    return out


def merged_pod(template: s.PodTemplate | None, owned: dict[str, Any], main: str,
               volumes: tuple[str, ...] = ()) -> dict[str, Any]:
    """The operator's pod template (`owned`: {metadata, spec}) with `template` merged under it."""
    if template is None:
        return owned
    meta = template.metadata.model_dump(exclude_defaults=True)
    if meta.get("labels"):
        meta["labels"] = {k: v for k, v in meta["labels"].items() if not k.startswith(naming.OPERATOR_LABEL_PREFIXES)}
    under = {"metadata": meta,
             "spec": _cleared(template.spec, main, volumes)}
    return merge(under, owned)


def executor_pod(template: s.PodTemplate | None, name: str, main: str, pod_security: dict[str, Any],
                 container_security: dict[str, Any],
                 kafka: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])) -> dict[str, Any]:
    """The pod Spark starts each executor from (spark.kubernetes.executor.podTemplateFile): the
    template, its main container named so that Spark picks it (and not a sidecar, which it
    would take when no container has the name it is given), the operator's labels over the template's,
    and the driver's hardening (`pod_security`, `container_security`: Spark keeps a template's
    securityContext and adds none, so without these an executor fails Pod Security `restricted`).
    Spark itself then sets the image, command, resources, ports and its own env and labels.
    Executors call no API: no ServiceAccount token. `kafka`: the volumes and mounts of the Kafka
    credentials (operator/strimzi.py), which Spark's Kafka clients read in every executor."""
    volumes, mounts = kafka
    owned = {"metadata": {"labels": {naming.MODELSERVING_LABEL: name, "app.kubernetes.io/component": "executor"}},
             "spec": {"automountServiceAccountToken": False, "securityContext": copy.deepcopy(pod_security),
                      "containers": [{"name": main, "securityContext": copy.deepcopy(container_security),
                                      # A read-only root: Python workers and the JVM write here.
                                      "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *mounts]}],
                      "volumes": [{"name": "tmp", "emptyDir": {}}, *volumes]}}
    return {"apiVersion": "v1", "kind": "Pod", **merged_pod(template, owned, main,
                                                            ("tmp", *(v["name"] for v in volumes)))}


def executor_pod_yaml(template: s.PodTemplate | None, name: str, main: str, pod_security: dict[str, Any],
                      container_security: dict[str, Any],
                      kafka: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])) -> str:
    # libyaml's emitter where PyYAML has it: the same text, a tenth of the time (every reconcile renders it).
    return yaml.dump(executor_pod(template, name, main, pod_security, container_security, kafka),
                     Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=True)


def template_images(spec: s.ModelServingSpec) -> list[str]:
    """The images the pod templates add (sidecars, init and ephemeral containers, OCI image
    volumes): the main containers' are the operator's (spec.spark.image) and never taken from a template."""
    images = []
    for settings, main in ((spec.driver, "driver"), (spec.executor, "executor")):
        if settings.pod_template is None:
            continue
        for list_name in CONTAINER_LISTS:
            for c in settings.pod_template.spec.get(list_name) or []:
                if isinstance(c, dict) and not (list_name == "containers" and c.get("name") == main) and c.get("image"):
                    images.append(str(c["image"]))
        for v in settings.pod_template.spec.get("volumes") or []:
            ref = (v.get("image") or {}).get("reference") if isinstance(v, dict) and isinstance(v.get("image"), dict) else None
            if ref:
                images.append(str(ref))
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
