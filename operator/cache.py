"""What the watches last said: the operator reads its objects from here, not from the API server.

An informer's store, fed by the watch events of the ModelServings, their children and their driver
pods (handlers.py). A reconcile reads its resource, its children and its driver pod here; the API
server is asked only to change something. Where the operator wrote an object itself, the answer
is stored at once (`put` keeps the newer of two versions), so the next reconcile does not decide
from the version before its own write.
"""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple

from scorestream.api.v1alpha1 import modelserving as s

Body = dict[str, Any]


class Key(NamedTuple):
    """A ModelServing's key in the work queue: what a reconcile is asked for."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def _kind_of(body: Body) -> tuple[str, str]:
    return body.get("apiVersion", ""), body.get("kind", "")


def _newer(a: Body, b: Body) -> bool:
    """Whether `a` is at least as new as `b`. resourceVersions are opaque to clients, but within
    one object they grow: compared as numbers where both are (etcd's revisions always are)."""
    ra, rb = a.get("metadata", {}).get("resourceVersion"), b.get("metadata", {}).get("resourceVersion")
    try:
        return int(ra) >= int(rb)
    except (TypeError, ValueError):
        return True  # not comparable: the later write wins, as a watch event does


def owner_key(body: Body) -> Key | None:
    """The ModelServing controlling a child object, if one does."""
    owner = next((r for r in body.get("metadata", {}).get("ownerReferences") or []
                  if r.get("kind") == s.KIND and r.get("controller")), None)
    if owner is None:
        return None
    return Key(body["metadata"].get("namespace", ""), owner["name"])


class Cache:
    def __init__(self) -> None:
        self._objects: dict[tuple[str, str, str, str], Body] = {}

    def __len__(self) -> int:
        return len(self._objects)

    @staticmethod
    def _at(api_version: str, kind: str, namespace: str, name: str) -> tuple[str, str, str, str]:
        return api_version, kind, namespace, name

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Body | None:
        return self._objects.get(self._at(api_version, kind, namespace, name))

    def put(self, body: Body) -> bool:
        """Store an object as a watch event or a write's answer gave it (the newer of the two wins).
        True where this is news: a version the cache did not hold (a watch event of the operator's
        own write, whose answer was stored already, is not)."""
        meta = body.get("metadata", {})
        at = self._at(*_kind_of(body), meta.get("namespace", ""), meta.get("name", ""))
        held = self._objects.get(at)
        if held is not None and held.get("metadata", {}).get("uid") == meta.get("uid"):
            if held.get("metadata", {}).get("resourceVersion") == meta.get("resourceVersion") or not _newer(body, held):
                return False
        # managedFields are most of a server-side-applied object's size, and nothing here reads them.
        self._objects[at] = {**body, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
        return True

    def delete(self, body: Body) -> None:
        meta = body.get("metadata", {})
        at = self._at(*_kind_of(body), meta.get("namespace", ""), meta.get("name", ""))
        held = self._objects.get(at)
        if held is not None and held.get("metadata", {}).get("uid") in (None, meta.get("uid")):
            del self._objects[at]

    def resource(self, key: Key) -> Body | None:
        return self.get(s.API_VERSION, s.KIND, key.namespace, key.name)

    def resources(self) -> Iterator[Key]:
        for api_version, kind, namespace, name in list(self._objects):
            if (api_version, kind) == (s.API_VERSION, s.KIND):
                yield Key(namespace, name)
