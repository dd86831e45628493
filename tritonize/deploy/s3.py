"""A place in S3-compatible object storage, and how each reader spells it.

- tritonize talks to it with the MinIO client (`minio` on PyPI). Not boto3: botocore pins
  python-dateutil<3, and installing it would downgrade the dateutil 4 this environment has for
  matplotlib; minio installs without changing any installed package.
- Triton's `--model-repository` (docs/user_guide/model_repository.md, v2.51): `s3://bucket/path` on
  AWS, `s3://host:port/bucket/path` for another endpoint (`s3://https://host:port/...` over TLS).
  Triton recognises the endpoint form with the regex
  `s3://(http://|https://|)([0-9a-zA-Z\\-.]+):([0-9]+)/([0-9a-z.\\-]+)(((/[0-9a-zA-Z.\\-_]+)*)?)` and takes
  anything else for an AWS bucket (measured: it then retries DNS for ~50 s and exits), so names are
  checked against those character classes here. Credentials: AWS_* environment variables, or the
  JSON file named by TRITON_CLOUD_CREDENTIAL_PATH (`credential_file`).
- KServe's storageUri is `s3://bucket/path` whatever the endpoint: its storage initializer takes the
  endpoint from annotations on the credentials Secret.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from typing import Iterator
from urllib.parse import urlsplit

import certifi
import urllib3
from minio import Minio
from minio.credentials.providers import AWSConfigProvider, ChainedProvider, EnvAWSProvider
from minio.error import S3Error

from tritonize.errors import TritonizeError

AWS_ENDPOINT = "s3.amazonaws.com"
DEFAULT_REGION = "us-east-1"
_BUCKET = re.compile(r"[0-9a-z][0-9a-z.\-]{1,61}[0-9a-z]")  # S3's bucket rule, within Triton's [0-9a-z.-]
_SEGMENT = re.compile(r"[0-9a-zA-Z.\-_]+")  # Triton's path segment class
_HOST = re.compile(r"[0-9a-zA-Z\-.]+")  # Triton's endpoint host class (no IPv6 literals)


@dataclass(frozen=True)
class Store:
    """`s3://bucket/prefix` at `endpoint` ("host:port"; None: AWS)."""

    bucket: str
    prefix: str  # "" or "a/b", no slash at either end
    endpoint: str | None = None
    secure: bool = True
    region: str = DEFAULT_REGION

    @classmethod
    def parse(cls, dest: str, endpoint: str | None = None, region: str | None = None) -> "Store":
        """DEST `s3://bucket/prefix`; `endpoint` a URL (`http://host:port`, `https://host[:port]`) of an
        S3-compatible store, None for AWS; `region` defaults to AWS_REGION / AWS_DEFAULT_REGION / us-east-1."""
        if not dest.startswith("s3://"):
            raise TritonizeError(f"the destination must be s3://BUCKET/PREFIX (got {dest!r})")
        bucket, _, prefix = dest[len("s3://"):].partition("/")
        prefix = prefix.strip("/")
        if not _BUCKET.fullmatch(bucket):
            raise TritonizeError(f"bucket {bucket!r}: Triton reads only buckets of 3-63 characters from "
                                 "a-z, 0-9, '.' and '-' (starting and ending with a letter or digit)")
        for segment in prefix.split("/") if prefix else []:
            if not _SEGMENT.fullmatch(segment):
                raise TritonizeError(f"prefix segment {segment!r} in {dest}: Triton reads only paths made of "
                                     "letters, digits, '.', '-' and '_' (anything else sends it to AWS)")
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
        if endpoint is None:
            return cls(bucket, prefix, None, True, region)
        url = urlsplit(endpoint)
        if url.scheme not in ("http", "https") or not url.hostname or url.path.strip("/") or url.query:
            raise TritonizeError(f"--endpoint takes the store's URL, http://HOST:PORT or https://HOST[:PORT] "
                                 f"(got {endpoint!r})")
        if not _HOST.fullmatch(url.hostname):
            raise TritonizeError(f"--endpoint host {url.hostname!r}: Triton reads only host names and IPv4 "
                                 "addresses (letters, digits, '.', '-')")
        port = url.port or (443 if url.scheme == "https" else 80)
        return cls(bucket, prefix, f"{url.hostname}:{port}", url.scheme == "https", region)

    def key(self, *parts: str) -> str:
        """The object key of `parts` under the prefix."""
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p.strip("/"))

    def uri(self, *parts: str) -> str:
        """`s3://bucket/key`: how people, the AWS CLI and KServe's storageUri name it."""
        return f"s3://{self.bucket}/{self.key(*parts)}".rstrip("/")

    def triton_uri(self, *parts: str) -> str:
        """The `--model-repository=` value for `parts` under the prefix, in Triton's syntax."""
        path = f"{self.bucket}/{self.key(*parts)}".rstrip("/")
        if self.endpoint is None:
            return f"s3://{path}"
        return f"s3://{'https://' if self.secure else ''}{self.endpoint}/{path}"

    def credential_file(self) -> dict:
        """A template of Triton's TRITON_CLOUD_CREDENTIAL_PATH file for this bucket (placeholders,
        never the caller's secrets). Triton uses the entry whose name is the longest prefix of the path."""
        bucket = Store(self.bucket, "", self.endpoint, self.secure, self.region).triton_uri()
        return {"s3": {bucket: {
            "secret_key": "<AWS_SECRET_ACCESS_KEY>", "key_id": "<AWS_ACCESS_KEY_ID>", "region": self.region,
            "session_token": "", "profile": "",
        }}}

    def client(self) -> Minio:
        """A MinIO client for the store, with credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
        (/ AWS_SESSION_TOKEN) or the AWS shared credentials file (AWS_PROFILE)."""
        provider = ChainedProvider([EnvAWSProvider(), AWSConfigProvider()])
        try:
            provider.retrieve()
        except ValueError:
            raise TritonizeError("no credentials for the store: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                                 "(or AWS_PROFILE with ~/.aws/credentials)") from None
        # minio's default retries 5 times over ~6 s; a push is resumable, so fail sooner and say so.
        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=10, read=300), cert_reqs="CERT_REQUIRED",
            ca_certs=os.environ.get("SSL_CERT_FILE") or certifi.where(),
            retries=urllib3.Retry(total=3, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]),
        )
        return Minio(self.endpoint or AWS_ENDPOINT, secure=self.secure, region=self.region, credentials=provider,
                     http_client=http)

    def __str__(self) -> str:
        return self.uri() + (f" at {'https' if self.secure else 'http'}://{self.endpoint}" if self.endpoint else "")


@contextlib.contextmanager
def store_errors(store: Store, doing: str) -> Iterator[None]:
    """The client's failures as one line that says what to do."""
    try:
        yield
    except S3Error as e:
        hint = {"NoSuchBucket": f"create bucket {store.bucket} first",
                "AccessDenied": "check the credentials' permissions on the bucket",
                "InvalidAccessKeyId": "check AWS_ACCESS_KEY_ID",
                "SignatureDoesNotMatch": "check AWS_SECRET_ACCESS_KEY"}.get(e.code, "see the store's message")
        raise TritonizeError(f"{doing} {store}: {e.code}: {e.message} ({hint})") from None
    except urllib3.exceptions.HTTPError as e:
        raise TritonizeError(f"{doing} {store}: cannot reach the store ({type(e).__name__}: {e}); "
                             "check --endpoint and the network, then run the command again") from None
