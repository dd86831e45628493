"""`tritonize deploy push`: a checked model repository into object storage, atomically for readers.

Layout under s3://bucket/prefix/:

    releases/<id>/...      one repository, never changed once complete. <id> is the hash of its
                           files (path, size, SHA-256), so the same repository always lands in the
                           same place: an interrupted push resumes there, an unchanged one uploads nothing
    releases/<id>.json     the release record (every file's size, SHA-256 and ETag), written only
                           after every object of the release was uploaded and verified
    CURRENT                the pointer, {"release": "releases/<id>", ...}, switched last

An interrupted push leaves CURRENT and every complete release as they were. Readers that follow
CURRENT (`tritonize deploy k8s`) therefore only ever see complete releases. Triton itself follows
no pointer: it reads the one prefix given in --model-repository when it starts (and on each
explicit `load`), so a switch reaches a server as a new --model-repository and a restart, which on
Kubernetes is the rolling update of a regenerated Deployment.

Verification computes everything locally: the store's ETag of an object must be the MD5 of the file
(multipart: the MD5 of the parts' MD5s, "-N"; the part size is fixed here), and where it is not
(another client's part size, SSE-KMS) the object is read back and its SHA-256 compared. What the
server merely echoes (client-sent checksums) proves nothing and is not used.

CURRENT is replaced without a conditional write (If-Match is not supported by every S3-compatible
store): of two concurrent pushes the last one wins, and either release is complete.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from minio import Minio
from minio.deleteobjects import DeleteObject
from minio.error import S3Error

from tritonize.deploy.s3 import Store, store_errors
from tritonize.errors import TritonizeError
from tritonize.progress import say, step
from tritonize.repository_builder import check_repository

POINTER = "CURRENT"
RELEASES = "releases"
PART_SIZE = 16 * 2**20  # multipart above this; the expected ETags are computed with it


@dataclass(frozen=True)
class RepoFile:
    path: str  # relative, POSIX
    size: int
    sha256: str
    etag: str  # the ETag S3 gives this file uploaded with PART_SIZE parts


@dataclass(frozen=True)
class Release:
    id: str
    files: tuple[RepoFile, ...]

    @property
    def key(self) -> str:
        return f"{RELEASES}/{self.id}"

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def record(self) -> dict:
        return {"release": self.key, "files": [vars(f) for f in self.files], "bytes": self.size,
                "part_size": PART_SIZE}


@dataclass(frozen=True)
class PushResult:
    store: Store
    release: Release
    uploaded: int  # files sent
    kept: int  # files already there, verified
    previous: str | None  # the release CURRENT named before (None: the first push)

    def summary(self) -> dict:
        return {"release": self.release.key, "uri": self.store.uri(self.release.key),
                "model_repository": self.store.triton_uri(self.release.key),
                "files": len(self.release.files), "bytes": self.release.size, "uploaded": self.uploaded,
                "kept": self.kept, "previous": self.previous, "pointer": self.store.uri(POINTER),
                "credential_file": self.store.credential_file()}


def repository_files(repository: Path) -> list[Path]:
    """The files a server reads: everything but dot-files and Python's __pycache__ (written where a
    Python model was imported from; not part of the repository)."""
    found = []
    for path in sorted(Path(repository).rglob("*")):
        parts = path.relative_to(repository).parts
        if path.is_file() and not any(p.startswith(".") or p == "__pycache__" for p in parts):
            found.append(path)
    return found


def _hash(path: Path) -> tuple[int, str, str]:
    """(size, SHA-256, expected ETag) in one read."""
    sha, whole, parts, size = hashlib.sha256(), hashlib.md5(), [], 0
    with open(path, "rb") as f:
        while chunk := f.read(PART_SIZE):
            sha.update(chunk)
            whole.update(chunk)
            parts.append(hashlib.md5(chunk).digest())
            size += len(chunk)
    etag = whole.hexdigest() if len(parts) <= 1 else f"{hashlib.md5(b''.join(parts)).hexdigest()}-{len(parts)}"
    return size, sha.hexdigest(), etag


def snapshot(repository: Path) -> Release:
    """The repository's files and the release id they make."""
    files = []
    for path in repository_files(repository):
        size, sha, etag = _hash(path)
        files.append(RepoFile(path.relative_to(repository).as_posix(), size, sha, etag))
    listing = json.dumps([[f.path, f.size, f.sha256] for f in files], separators=(",", ":"))
    return Release(hashlib.sha256(listing.encode()).hexdigest()[:16], tuple(files))


def push(repository: Path, store: Store) -> PushResult:
    """Upload `repository` as a release of `store`, verify it, then point CURRENT at it."""
    repository = Path(repository)
    errors = [f for f in check_repository(repository) if f.severity == "error"]
    if errors:
        first = errors[0]
        raise TritonizeError(f"{repository} fails `tritonize repo check` ({len(errors)} error(s); first: "
                             f"{first.model}: {first.message}); fix it before pushing")
    with step(f"hash {repository}"):
        release = snapshot(repository)
    client = store.client()
    with store_errors(store, "pushing to"):
        if not client.bucket_exists(store.bucket):
            raise TritonizeError(f"bucket {store.bucket} does not exist at {store}; create it first")
        previous = current_release(store, client)
        uploaded = kept = 0
        with step(f"upload {store.uri(release.key)} ({len(release.files)} files, {release.size / 1e6:.1f} MB)"):
            for f in release.files:
                key = store.key(release.key, f.path)
                if _verified(client, store, key, f):
                    kept += 1
                    continue
                client.fput_object(store.bucket, key, str(repository / f.path), part_size=PART_SIZE)
                if not _verified(client, store, key, f):
                    raise TritonizeError(f"{store.uri(key)} differs from {repository / f.path} after upload "
                                         "(size, ETag and read-back SHA-256 checked); CURRENT was not switched: "
                                         "run the push again")
                uploaded += 1
            _remove_strays(client, store, release)
        say(f"  {uploaded} uploaded, {kept} already there; every object's size and checksum verified")
        _put_json(client, store, f"{release.key}.json", release.record())
        if previous != release.key:
            _put_json(client, store, POINTER, {"release": release.key, "previous": previous,
                                               "updated": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    return PushResult(store, release, uploaded, kept, previous)


def _verified(client: Minio, store: Store, key: str, f: RepoFile) -> bool:
    """True when the object at `key` holds exactly the file `f` (False when it is missing)."""
    try:
        stat = client.stat_object(store.bucket, key)
    except S3Error as e:
        if e.code in ("NoSuchKey", "NoSuchObject", "ResourceNotFound"):
            return False
        raise
    if stat.size != f.size:
        return False
    if stat.etag == f.etag:
        return True
    # Not the ETag of our part size (another client's parts, SSE-KMS): compare the bytes themselves.
    sha = hashlib.sha256()
    response = client.get_object(store.bucket, key)
    try:
        for chunk in response.stream(PART_SIZE):
            sha.update(chunk)
    finally:
        response.close()
        response.release_conn()
    return sha.hexdigest() == f.sha256


def _remove_strays(client: Minio, store: Store, release: Release) -> None:
    """Objects under the release prefix that are not the repository's (put there by hand): Triton would
    read them as part of the repository."""
    expected = {store.key(release.key, f.path) for f in release.files}
    strays = [o.object_name for o in client.list_objects(store.bucket, prefix=store.key(release.key) + "/",
                                                         recursive=True) if o.object_name not in expected]
    for error in client.remove_objects(store.bucket, [DeleteObject(k) for k in strays]):
        raise TritonizeError(f"cannot remove {store.uri(error.name)} from the release: {error.message}")
    if strays:
        say(f"  removed {len(strays)} object(s) that are not in the repository: {', '.join(strays[:3])}")


def _put_json(client: Minio, store: Store, key: str, document: dict) -> None:
    data = (json.dumps(document, indent=1) + "\n").encode()
    client.put_object(store.bucket, store.key(key), io.BytesIO(data), len(data), content_type="application/json")
    sent = RepoFile(key, len(data), hashlib.sha256(data).hexdigest(), hashlib.md5(data).hexdigest())
    if not _verified(client, store, store.key(key), sent):
        raise TritonizeError(f"{store.uri(key)} differs from what was sent; run the push again")


def current_release(store: Store, client: Minio | None = None) -> str | None:
    """The release CURRENT names ("releases/<id>"), None before the first push."""
    client = client or store.client()
    with store_errors(store, "reading the pointer of"):
        try:
            response = client.get_object(store.bucket, store.key(POINTER))
        except S3Error as e:
            if e.code == "NoSuchKey":
                return None
            raise
        try:
            document = json.loads(response.data)
        finally:
            response.close()
            response.release_conn()
    release = document.get("release") if isinstance(document, dict) else None
    if not isinstance(release, str) or not release.startswith(f"{RELEASES}/"):
        raise TritonizeError(f"{store.uri(POINTER)} is not a tritonize pointer; push again to rewrite it")
    return release
