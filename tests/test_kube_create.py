"""`Kube.create`, for what the operator makes once (the control token, a shared KafkaTopic), against
the real API server with the chart's ServiceAccount: made when missing, read and left when it is
there (one request: it is there on every reconcile but the first), never taken when another's,
and never deleted to be made anew either."""

from __future__ import annotations

import copy

import pytest

from scorestream.operator.kube import Kube, NotOwned

from harness.operator import EXAMPLE, MS, apply, obj


def secret(namespace: str, name: str, owner: dict | None) -> dict:
    meta = {"name": name, "namespace": namespace}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"], "controller": True,
                                    "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}]
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "stringData": {"token": "t0ken"}}


class Counted(Kube):
    """The operator's client, counting what it sends (the answers are the API server's)."""

    sent: list[str]

    async def request(self, method, url_path, body=None, content_type="application/json"):
        self.sent.append(method)
        return await super().request(method, url_path, body, content_type)


async def test_made_once_read_after_and_another_s_never_taken(api):
    installation = api.installation
    token = api.cluster.token(installation.namespace, installation.service_account)
    kube = Counted.for_server(api.cluster.server, token, verify_ssl=False)
    kube.sent = []
    try:
        example = copy.deepcopy(EXAMPLE)
        example["metadata"].pop("namespace", None)
        await apply(api, example)  # no operator runs: only its uid matters here
        owner = obj(api, MS, EXAMPLE["metadata"]["name"])
        ours = secret(api.ns, "made-once", owner)

        assert await kube.create(ours) is True
        assert kube.sent == ["GET", "POST"]
        kube.sent.clear()
        assert await kube.create(ours) is False
        assert kube.sent == ["GET"]  # not a refused POST and a GET

        api.create("v1/secrets", secret(api.ns, "users-own", None))
        with pytest.raises(NotOwned, match="not owned by this ModelServing"):
            await kube.create(secret(api.ns, "users-own", owner))
        # Nor deleted to be made anew (a child whose immutable fields changed): refused unsent.
        kube.sent.clear()
        with pytest.raises(NotOwned, match="not owned by this ModelServing"):
            await kube.orphan(obj(api, "v1/secrets", "users-own"), secret(api.ns, "users-own", owner))
        assert kube.sent == [] and obj(api, "v1/secrets", "users-own")
    finally:
        await kube.close()
