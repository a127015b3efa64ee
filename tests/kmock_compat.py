"""A thin layer that makes kmock 0.8's emulated API behave like a Kubernetes API server where kopf
and our client depend on it. Each override names the difference it bridges."""

from __future__ import annotations

import copy
import datetime
import itertools
import uuid
from typing import Any

import attrs
import jsonpatch
import kmock
from kmock._internal import enums, parsing

from scorestream.operator import spec as s


REQUEST_HISTORY = 8


_parse_path = parsing.parse_path


def _parse_namespaces_too(path: str) -> parsing.ParsedPath:
    """kmock reads `/api/v1/namespaces[/NAME]` as a namespace prefix with nothing after it and
    fails (500); it is the cluster-scoped resource `namespaces`, which kopf lists and watches
    whenever it serves a list of namespaces."""
    parts = path.split("?")[0].strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 4:
        return parsing.ParsedPath(group="", version="v1", plural="namespaces", namespace=None,
                                  name=parts[3] if len(parts) == 4 else None)
    return _parse_path(path)


parsing.parse_path = _parse_namespaces_too


class Emulator(kmock.KubernetesEmulator):
    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._rv = itertools.count(1)
        self.audit: set[tuple[str, str, str]] = set()
        self.resources.load_bundled()
        # kmock does not serve a CRD as a resource by itself: register ours, with its subresources.
        self.resources[f"{s.GROUP}/{s.VERSION}/{s.PLURAL}"] = kmock.ResourceInfo(
            kind=s.KIND, singular=s.SINGULAR, namespaced=True, shortnames=set(s.SHORT_NAMES),
            verbs={"create", "delete", "get", "list", "patch", "update", "watch"},
            subresources={"status", "scale"},
        )
        # kopf's peering resources (operator HA), as the chart installs them.
        verbs = {"create", "delete", "get", "list", "patch", "update", "watch"}
        self.resources["kopf.dev/v1/clusterkopfpeerings"] = kmock.ResourceInfo(
            kind="ClusterKopfPeering", singular="clusterkopfpeering", namespaced=False, verbs=verbs)
        self.resources["kopf.dev/v1/kopfpeerings"] = kmock.ResourceInfo(
            kind="KopfPeering", singular="kopfpeering", namespaced=True, verbs=verbs)

    # Requests made with this bearer token are recorded as (verb, group, resource[/sub]): what
    # the operator actually does, for the RBAC audit (tests/test_chart.py).
    AUDIT_TOKEN = "audited-operator"

    def _record(self, request) -> None:
        if request.headers.get("Authorization") != f"Bearer {self.AUDIT_TOKEN}" or request.resource is None \
                or not request.resource.plural:  # discovery (/api/v1, /apis/...): every subject may
            return
        method = str(request.method.value if hasattr(request.method, "value") else request.method).upper()
        if method == "GET":
            verb = "get" if request.name else ("watch" if request.params.get("watch") in ("true", "1") else "list")
        else:
            verb = {"POST": "create", "PATCH": "patch", "PUT": "update",
                    "DELETE": "delete" if request.name else "deletecollection"}.get(method, method.lower())
        plural = request.resource.plural + (f"/{request.subresource}" if request.subresource else "")
        self.audit.add((verb, request.resource.group or "", plural))

    def _replace(self, request, **changes):
        # kmock matches its reactions against the requests it recorded: replace the record too.
        new = attrs.evolve(request, **changes)
        for i in range(len(self._requests) - 1, -1, -1):
            if self._requests[i] is request:
                self._requests[i] = new
                break
        return new

    def _current(self, request) -> dict[str, Any] | None:
        key = (request.resource, request.namespace, request.name)
        if key in self.objects and not self.objects[key].deleted:
            return copy.deepcopy(self.objects[key].raw)
        return None

    async def _handle(self, request):
        # kmock records every request and finds the current one in that record by a linear scan,
        # so each request costs O(requests so far): a long test slows down quadratically (100
        # changes took >400 s). No test reads old requests; keep a bounded tail.
        if len(self._requests) > 2 * REQUEST_HISTORY:
            del self._requests[:-REQUEST_HISTORY]
        self._record(request)
        if request.resource is None:
            return await super()._handle(request)
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if request.action == enums.action.CREATE and isinstance(request.data, dict):
            # kmock assigns no uid/resourceVersion/generation/creationTimestamp.
            data = copy.deepcopy(request.data)
            meta = data.setdefault("metadata", {})
            meta.update(uid=str(uuid.uuid4()), resourceVersion=str(next(self._rv)), generation=1,
                        creationTimestamp=now)
            if "name" not in meta and meta.get("generateName"):  # kmock ignores generateName
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            if request.namespace and "namespace" not in meta:
                meta["namespace"] = request.namespace
            request = self._replace(request, data=data)
            response = await super()._handle(request)
            if response.status == 200:
                response.set_status(201)  # kmock answers 200; the client expects 201 Created
            return response
        if request.action == enums.action.UPDATE:
            current = self._current(request)
            if current is None:
                return await super()._handle(request)
            data = request.data
            if isinstance(data, list):
                # A failed JSON-patch `test` must answer 422, not 500; and the resulting object
                # gets the same treatment as a merge patch below.
                try:
                    patched = jsonpatch.apply_patch(current, data, in_place=False)
                except (jsonpatch.JsonPatchTestFailed, jsonpatch.JsonPatchConflict) as e:
                    raise kmock.KubernetesError(status=422, reason="Invalid", message=str(e))
                data = _diff_as_merge(current, patched)
            data = copy.deepcopy(data or {})
            # The status subresource separates status from the rest, both ways.
            if request.subresource == "status":
                data = {k: v for k, v in data.items() if k in ("status", "metadata")}
            elif "status" in data and request.resource.plural == s.PLURAL:
                data.pop("status")
            meta = data.setdefault("metadata", {})
            meta["resourceVersion"] = str(next(self._rv))
            if "spec" in data and request.subresource is None:
                new_spec = _merge(copy.deepcopy(current.get("spec", {})), data["spec"])
                if new_spec != current.get("spec"):
                    meta["generation"] = current["metadata"].get("generation", 1) + 1
            request = self._replace(request, data=data)
        return await super()._handle(request)

    async def _serve_watch(self, request):
        # kmock subscribes to its event bus after sending the snapshot, so events in between are
        # lost; here the bus is marked under the same lock as the snapshot.
        yield b""
        bus = self._buses[request.resource]
        async with self._lock:
            objs = [o for o in self._KubernetesEmulator__get_objs(request, strict=False) if not o.deleted]
            events = [{"type": "ADDED", "object": o.raw} for o in objs]
            mark = await bus.mark()
        try:
            for event in events:
                yield event
            async for event in bus.stream(since=mark):
                meta = event.get("object", {}).get("metadata", {})
                if self._KubernetesEmulator__check(request, request.resource, meta.get("namespace"),
                                                   meta.get("name"), strict=False):
                    yield event
        finally:
            await bus.unmark(mark)


def _merge(base: dict, patch: dict) -> dict:
    for key, value in patch.items():
        if value is None:
            base.pop(key, None)
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def _diff_as_merge(old: Any, new: Any) -> Any:
    """A merge patch turning `old` into `new` (kmock applies merge patches to its history)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    out = {}
    for key in old.keys() - new.keys():
        out[key] = None
    for key, value in new.items():
        if key not in old:
            out[key] = value
        elif old[key] != value:
            out[key] = _diff_as_merge(old[key], value)
    return out
