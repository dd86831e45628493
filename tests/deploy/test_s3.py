"""How a store location is spelt for tritonize, Triton (its endpoint regex) and KServe; bad locations."""

from __future__ import annotations

import re

import pytest

from tritonize.deploy.s3 import Store
from tritonize.errors import TritonizeError

# Triton 2.51's custom-endpoint pattern (libtritonserver.so); anything it does not match goes to AWS.
TRITON_ENDPOINT_RE = re.compile(
    r"s3://(http://|https://|)([0-9a-zA-Z\-.]+):([0-9]+)/([0-9a-z.\-]+)(((/[0-9a-zA-Z.\-_]+)*)?)")


@pytest.mark.parametrize("endpoint, expected", [
    ("http://minio.minio.svc:9000", "s3://minio.minio.svc:9000/models/prod/resnet/releases/0123abcd"),
    ("http://127.0.0.1:9000/", "s3://127.0.0.1:9000/models/prod/resnet/releases/0123abcd"),
    ("https://s3.example.com", "s3://https://s3.example.com:443/models/prod/resnet/releases/0123abcd"),
    ("http://minio", "s3://minio:80/models/prod/resnet/releases/0123abcd"),
])
def test_custom_endpoints_in_tritons_syntax(endpoint, expected):
    store = Store.parse("s3://models/prod/resnet/", endpoint)
    uri = store.triton_uri("releases/0123abcd")
    assert uri == expected
    match = TRITON_ENDPOINT_RE.fullmatch(uri)
    assert match and match.group(4) == "models" and match.group(5) == "/prod/resnet/releases/0123abcd"
    assert store.uri("releases/0123abcd") == "s3://models/prod/resnet/releases/0123abcd"  # KServe's storageUri
    # the credential file entry is the bucket in the same syntax: a prefix of every path under it
    (name,) = store.credential_file()["s3"]
    assert uri.startswith(name + "/") and name.endswith("/models")


def test_aws_form_and_region(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.delenv("AWS_REGION", raising=False)
    store = Store.parse("s3://models")
    assert store.triton_uri("releases/x") == "s3://models/releases/x" and store.region == "eu-west-1"
    assert not TRITON_ENDPOINT_RE.fullmatch(store.triton_uri("releases/x"))
    assert store.credential_file()["s3"]["s3://models"]["region"] == "eu-west-1"
    assert Store.parse("s3://models", region="us-west-2").region == "us-west-2"


@pytest.mark.parametrize("dest, endpoint, message", [
    ("models/resnet", None, "must be s3://BUCKET/PREFIX"),
    ("s3://Models/resnet", None, "bucket 'Models'"),
    ("s3://m/resnet", None, "bucket 'm'"),
    ("s3://models/res net", None, "prefix segment 'res net'"),
    ("s3://models/resnet+v2", None, "prefix segment 'resnet+v2'"),
    ("s3://models/resnet", "minio:9000", "--endpoint takes the store's URL"),
    ("s3://models/resnet", "http://minio:9000/bucket", "--endpoint takes the store's URL"),
    ("s3://models/resnet", "http://[::1]:9000", "Triton reads only host names and IPv4"),
])
def test_locations_triton_cannot_read_are_refused(dest, endpoint, message):
    with pytest.raises(TritonizeError, match=re.escape(message)):
        Store.parse(dest, endpoint)
