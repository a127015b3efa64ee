"""A thin async Kubernetes client for the few kinds the operator owns: get, create, patch, delete.

Built on the `kubernetes` package's async ApiClient (its configuration loading and auth), with
paths for our kinds only. `apply` is server-side apply under one field manager: the operator owns
exactly the fields it renders, so a field it stops rendering (a label, a nodeSelector key) is
removed, fields others set (the server's defaults, another controller's) are left alone, and an
edit of an owned field is taken back. It never takes over an object another owner controls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

PLURALS = {
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("v1", "Service"): "services",
    ("v1", "Pod"): "pods",
    ("v1", "Secret"): "secrets",
    ("v1", "Event"): "events",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    ("apps/v1", "StatefulSet"): "statefulsets",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicies",
    ("kafka.strimzi.io/v1", "KafkaTopic"): "kafkatopics",
    ("kafka.strimzi.io/v1beta2", "KafkaTopic"): "kafkatopics",
}


FIELD_MANAGER = "scorestream-operator"
_READ = object()  # Kube.apply: the current object is to be read from the API server


class KubeError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status


class Conflict(KubeError):
    """A write refused because the object changed since the resourceVersion it was based on."""


class NotOwned(Exception):
    """An object of the desired name exists and another controller owns it."""


def path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    """The URL path of an object, or of its kind's collection (namespace None: in every namespace)."""
    plural = PLURALS.get((api_version, kind))
    if plural is None:
        from scorestream.api.v1alpha1 import modelserving as s
        if (api_version, kind) != (s.API_VERSION, s.KIND):
            raise ValueError(f"no path known for {api_version} {kind}")
        plural = s.PLURAL
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    base = f"{prefix}/namespaces/{namespace}/{plural}" if namespace is not None else f"{prefix}/{plural}"
    return f"{base}/{name}" if name else base


def contains(current: Any, wanted: Any) -> bool:
    """Whether `current` has everything `wanted` says (servers add defaults; we ignore those)."""
    if isinstance(wanted, dict):
        return isinstance(current, dict) and all(contains(current.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return isinstance(current, list) and len(current) == len(wanted) and all(
            contains(c, w) for c, w in zip(current, wanted))
    return current == wanted


@dataclass
class Kube:
    api: Any  # kubernetes.aio.client.ApiClient

    @classmethod
    async def from_environment(cls) -> Kube:
        from kubernetes.aio import client, config

        try:
            config.load_incluster_config()
        except config.ConfigException:
            await config.load_kube_config()
        return cls(client.ApiClient())

    @classmethod
    def for_server(cls, server: str, token: str | None = None, verify_ssl: bool = True) -> Kube:
        from kubernetes.aio import client

        conf = client.Configuration(host=server)
        conf.verify_ssl = verify_ssl
        if token:
            conf.api_key = {"authorization": token}
            conf.api_key_prefix = {"authorization": "Bearer"}
        return cls(client.ApiClient(conf))

    async def close(self) -> None:
        await self.api.close()

    async def request(self, method: str, url_path: str, body: Any = None,
                      content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        method_, url, headers, body_, _ = await self.api.param_serialize(
            method, url_path, header_params=headers, body=body, auth_settings=["BearerToken"])
        response = await self.api.call_api(method_, url, headers, body_, _request_timeout=30)
        raw = await response.read()
        try:
            data = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            data = {"message": raw[:200].decode(errors="replace")}
        return response.status, data

    async def _named(self, method: str, api_version: str, kind: str, namespace: str,
                     name: str, body: Any = None) -> dict[str, Any] | None:
        """A request on one object: its answer, or None where the object does not exist."""
        status, data = await self.request(method, path(api_version, kind, namespace, name), body)
        if status == 404:
            return None
        if status >= 300:
            raise KubeError(status, data.get("message", ""))
        return data

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._named("GET", api_version, kind, namespace, name)

    async def patch_status(self, api_version: str, kind: str, namespace: str, name: str,
                           patch: dict[str, Any], resource_version: str | None = None) -> dict[str, Any] | None:
        """A JSON merge patch of the status subresource: the object as written, or None if it is gone.
        With `resource_version`, only onto that version of the object: else Conflict."""
        body: dict[str, Any] = {"status": patch}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        status, data = await self.request("PATCH", path(api_version, kind, namespace, name) + "/status",
                                          body, content_type="application/merge-patch+json")
        if status == 404:
            return None
        if status == 409:
            raise Conflict(status, data.get("message", ""))
        if status >= 300:
            raise KubeError(status, data.get("message", ""))
        return data

    async def create(self, obj: dict[str, Any]) -> bool:
        """Create `obj` if no object of its name exists: True if created, False if ours was there
        (left as it is; NotOwned if another's). For what must be made once, such as a random token:
        it is there on every call but the first, so it is read first (one request, not a refused
        create and a read)."""
        meta = obj["metadata"]
        current = await self.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        if current is None:
            status, data = await self.request("POST", path(obj["apiVersion"], obj["kind"], meta["namespace"]), obj)
            if status != 409:
                if status >= 300:
                    raise KubeError(status, data.get("message", ""))
                return True
            # made meanwhile by another writer
            current = await self.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
            if current is None:
                raise KubeError(status, data.get("message", ""))
        self._check_owner(current, obj)  # another's object of our name is never taken as ours
        return False

    async def served_versions(self, group: str) -> list[str]:
        """The versions of API group `group` the API server serves (discovery: no RBAC needed);
        none where it serves no such group."""
        status, data = await self.request("GET", f"/apis/{group}")
        if status == 404:
            return []
        if status >= 300:
            raise KubeError(status, data.get("message", ""))
        return [v.get("version", "") for v in data.get("versions") or []]

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete with the object's grace period (a pod gets SIGTERM); False if it was gone."""
        return await self._named("DELETE", api_version, kind, namespace, name) is not None

    async def orphan(self, current: dict[str, Any], wanted: dict[str, Any]) -> bool:
        """Delete `current` (that very object: its uid), which is to be made anew as `wanted`, and
        leave what it owns running, their owner references removed by the garbage collector, for
        the successor to adopt; False if it was gone. NotOwned where `current` is not ours."""
        self._check_owner(current, wanted)
        meta = current["metadata"]
        try:
            return await self._named("DELETE", current["apiVersion"], current["kind"], meta["namespace"], meta["name"],
                                     {"propagationPolicy": "Orphan", "preconditions": {"uid": meta["uid"]}}) is not None
        except KubeError as e:
            if e.status == 409:  # another object of its name since: not the one to delete
                return False
            raise

    async def apply(self, obj: dict[str, Any], current: Any = _READ) -> tuple[str, dict[str, Any]]:
        """Make `obj` exist as desired. Returns 'created', 'patched' or 'unchanged', and the object
        as written.

        `current`: the object as the caller's watch cache holds it (None: not there); unless
        given, it is read first. It is checked to be ours before anything is written.

        Why not merge patches: a JSON merge patch of the desired object can set fields but never
        remove one the operator rendered before and no longer does; server-side apply removes it
        because the operator's field manager owned it. The server writes nothing when an apply
        changes nothing."""
        meta = obj["metadata"]
        api_version, kind, ns, name = obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]
        if current is _READ:
            current = await self.get(api_version, kind, ns, name)
        if current is not None:
            self._check_owner(current, obj)
        # Not forced on create: an object someone made meanwhile conflicts instead of being adopted.
        status, data = await self._server_side_apply(obj, force=current is not None)
        if status == 409 and current is None:
            current = await self.get(api_version, kind, ns, name)
            if current is None:
                raise KubeError(409, f"{kind} {ns}/{name} conflicts but cannot be read")
            self._check_owner(current, obj)
            status, data = await self._server_side_apply(obj, force=True)
        if status >= 300:
            raise KubeError(status, data.get("message", ""))
        if current is None:
            return "created", data
        unchanged = data.get("metadata", {}).get("resourceVersion") == current["metadata"].get("resourceVersion")
        return ("unchanged" if unchanged else "patched"), data

    async def _server_side_apply(self, obj: dict[str, Any], force: bool) -> tuple[int, dict[str, Any]]:
        meta = obj["metadata"]
        url = (path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
               + f"?fieldManager={FIELD_MANAGER}&force={'true' if force else 'false'}")
        # JSON is YAML: the apply patch content type takes the object as rendered.
        return await self.request("PATCH", url, obj, content_type="application/apply-patch+yaml")

    @staticmethod
    def _check_owner(current: dict[str, Any], wanted: dict[str, Any]) -> None:
        ours = {r["uid"] for r in wanted["metadata"].get("ownerReferences", [])}
        controllers = [r for r in current.get("metadata", {}).get("ownerReferences", []) if r.get("controller")]
        if controllers and not any(r.get("uid") in ours for r in controllers):
            other = controllers[0]
            raise NotOwned(f"{wanted['kind']} {wanted['metadata']['name']} exists and is controlled by "
                           f"{other.get('kind')} {other.get('name')}")
        if not controllers and current.get("metadata", {}).get("uid") and ours:
            # An unowned object of our name: adopting it would make us delete a user's object.
            raise NotOwned(f"{wanted['kind']} {wanted['metadata']['name']} exists and is not owned by this ModelServing")
