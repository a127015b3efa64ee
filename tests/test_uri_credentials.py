"""Credentials and signatures in spec.model.uri and spec.model.verification.uri are refused: a
location is published on the models topic and kept in the status (#30). Refused by pydantic, by the
CRD's CEL (offline, tests/harness/admission.py, and on the tests' real API server), and by the publisher."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

from scorestream.api.v1alpha1.modelserving import ModelServingSpec, ModelSpec, uri_credentials
from scorestream.operator import publish

from harness.admission import admit
from harness.operator import ApiError
from test_crd import EXAMPLE

CREDENTIALED = [
    ("https://user:pass@models.example/wine.pmml", "user info"),
    ("https://ghp_abc123@models.example/wine.pmml", "user info"),
    ("s3://AKIA:secret@bucket/wine.pmml", "user info"),
    ("https://bucket.s3.amazonaws.com/wine.pmml?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F2026"
     "&X-Amz-Signature=0123abcd", "x-amz-credential"),
    ("https://bucket.s3.amazonaws.com/wine.pmml?AWSAccessKeyId=AKIA&Expires=1&Signature=abc", "awsaccesskeyid"),
    ("https://storage.googleapis.com/b/wine.pmml?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature=ab12",
     "x-goog-signature"),
    ("https://acct.blob.core.windows.net/c/wine.pmml?sv=2022-11-02&se=2026-12-01&sp=r&sig=abc%3D", "sig"),
    ("https://models.example/wine.pmml?token=abc", "token"),
    ("https://models.example/wine.pmml?v=1&ACCESS_TOKEN=abc", "access_token"),
    ("https://models.example/wine.pmml?api_key=abc", "api_key"),
    ("https://models.example/wine.pmml#access_token=abc", "access_token"),
]
CLEAN = [
    "https://models.example/wine.pmml", "https://models.example/wine.pmml?version=3&format=pmml",
    "https://models.example/a@b/wine.pmml",  # '@' in the path is no user info
    "file:///models/wine.pmml", "/models/wine.pmml", "s3://bucket/wine.pmml",
    "data:text/plain,https://user:pass@x/?token=1",  # content, not a location
]


@pytest.mark.parametrize("uri, what", CREDENTIALED)
def test_a_credential_in_a_location_is_named(uri, what):
    assert what in uri_credentials(uri).lower()


@pytest.mark.parametrize("uri", CLEAN)
def test_a_location_without_credentials_passes(uri):
    assert uri_credentials(uri) is None
    ModelSpec(name="wine", version="1", format="pmml", uri=uri)


def _with(path: str, uri: str) -> dict:
    obj = copy.deepcopy(EXAMPLE)
    model = obj["spec"]["model"]
    if path == "verification":
        model["verification"] = {"uri": uri}
    else:
        model["uri"] = uri
    return obj


@pytest.mark.parametrize("path", ["model", "verification"])
@pytest.mark.parametrize("uri, what", CREDENTIALED)
def test_the_spec_and_the_crd_refuse_credentials_naming_the_field(path, uri, what):
    obj = _with(path, uri)
    with pytest.raises(ValidationError) as refused:
        ModelServingSpec.model_validate(obj["spec"])
    text = str(refused.value)
    assert "carries credentials" in text and ("verification.uri" if path == "verification" else "model.uri") in text
    errors = admit(obj)
    assert any("carries credentials" in e and "uri" in e for e in errors), errors


def test_the_publisher_refuses_a_credential_that_skipped_validation():
    """A model copied from the status (rollback-to) is built with model_copy, which validates nothing."""
    spec = ModelServingSpec.model_validate(EXAMPLE["spec"])
    bad = spec.model_copy(update={"model": spec.model.model_copy(update={"uri": CREDENTIALED[0][0]})})
    with pytest.raises(ValueError, match="spec.model.uri carries credentials"):
        publish.descriptor(bad)


def test_the_real_api_server_refuses_a_signed_model_uri(api):
    """The generated CRD's CEL rule, on the tests' real API server (dry run)."""
    body = _with("model", CREDENTIALED[3][0])
    body["metadata"]["namespace"] = api.ns
    collection = f"/apis/{body['apiVersion']}/namespaces/{api.ns}/modelservings"
    with pytest.raises(ApiError) as refused:
        api.request("POST", f"{collection}?dryRun=All", body)
    assert refused.value.status == 422 and "spec.model.uri" in str(refused.value), refused.value
    assert "carries credentials" in str(refused.value) and "0123abcd" not in str(refused.value)
    body = _with("verification", CREDENTIALED[0][0])
    body["metadata"]["namespace"] = api.ns
    with pytest.raises(ApiError) as refused:
        api.request("POST", f"{collection}?dryRun=All", body)
    assert "spec.model.verification.uri" in str(refused.value) and "carries credentials" in str(refused.value)
    clean = _with("model", CLEAN[1])
    clean["metadata"]["namespace"] = api.ns
    api.request("POST", f"{collection}?dryRun=All", clean)
