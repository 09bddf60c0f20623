"""The weights manifest (every file of a checkpoint with its size and sha256), and the import of a
local Hugging Face snapshot directory into the weights bucket (`python -m pdkit.pods.weights_manifest
import DIR ...`, for a snapshot you already have). The in-region import Job (`pdkit weights import`)
streams from the Hub instead: pdkit/pods/weights_import.py, writing the same manifest.
Files go up first, each with its sha256 in the object metadata; the manifest goes up last, so a
manifest in the bucket means a complete upload. Staging (pdkit/pods/staging.py) verifies what it
downloads against the same manifest. Imports only the standard library and, for S3, boto3.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

FORMAT = "pdkit-weights-manifest/1"
MANIFEST_NAME = "pdkit-manifest.json"
SHA256_METADATA = "sha256"
HASH_CHUNK = 16 * 1024 * 1024
# Left out of a snapshot: huggingface_hub's own bookkeeping and git metadata, never model files.
SKIPPED_PARTS = (".cache", ".git")
SKIPPED_NAMES = (".gitattributes", MANIFEST_NAME)
_HEX64 = re.compile(r"^[0-9a-f]{64}$")

log = logging.getLogger("pdkit.weights")


class ManifestError(ValueError):
    """A manifest that cannot be trusted (wrong format, unsafe path, bad checksum field)."""


class S3Client(Protocol):
    """The S3 calls the kit makes (a boto3 S3 client satisfies it)."""

    def head_object(self, **kwargs: Any) -> dict[str, Any]: ...
    def get_object(self, **kwargs: Any) -> dict[str, Any]: ...
    def put_object(self, **kwargs: Any) -> dict[str, Any]: ...
    def upload_file(self, Filename: str, Bucket: str, Key: str, ExtraArgs: dict[str, Any] | None = ..., Config: Any = ...) -> None: ...
    def download_file(self, Bucket: str, Key: str, Filename: str, ExtraArgs: dict[str, Any] | None = ..., Config: Any = ...) -> None: ...


@dataclass(frozen=True)
class FileEntry:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    model: str
    revision: str
    files: tuple[FileEntry, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> str:
        body = {
            "format": FORMAT,
            "model": self.model,
            "revision": self.revision,
            "total_bytes": self.total_bytes,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in sorted(self.files, key=lambda f: f.path)],
        }
        return json.dumps(body, indent=1, sort_keys=True) + "\n"

    def digest(self) -> str:
        """Identity of the content: staged directories remember which manifest they match."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise ManifestError(f"not JSON ({exc})") from None
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise ManifestError(f"not a {FORMAT} manifest")
        files = []
        seen: set[str] = set()
        for raw in body.get("files", []):
            path, size, digest = raw.get("path"), raw.get("size"), raw.get("sha256")
            _check_relative(path)
            if not isinstance(size, int) or size < 0:
                raise ManifestError(f"{path}: size {size!r} is not a byte count")
            if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
                raise ManifestError(f"{path}: sha256 {digest!r} is not 64 lowercase hex digits")
            if path in seen:
                raise ManifestError(f"{path}: listed twice")
            seen.add(path)
            files.append(FileEntry(path=path, size=size, sha256=digest))
        if not files:
            raise ManifestError("lists no files")
        manifest = cls(model=str(body.get("model", "")), revision=str(body.get("revision", "")), files=tuple(files))
        if body.get("total_bytes") != manifest.total_bytes:
            raise ManifestError(f"total_bytes {body.get('total_bytes')!r} does not add up to {manifest.total_bytes}")
        return manifest


def _check_relative(path: Any) -> None:
    """A manifest path must stay inside the staging directory."""
    if not isinstance(path, str) or not path:
        raise ManifestError(f"file path {path!r} is not a string")
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or "\\" in path or path != pure.as_posix():
        raise ManifestError(f"file path {path!r} is not a plain relative path")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def snapshot_files(src: Path) -> list[str]:
    """Relative paths of the model files in a snapshot directory (symlinks into the HF cache followed)."""
    found = []
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if any(part in SKIPPED_PARTS for part in rel.parts) or rel.name in SKIPPED_NAMES or not path.is_file():
            continue
        found.append(rel.as_posix())
    return found


def scan_snapshot(src: Path, *, model: str, revision: str, workers: int = 8) -> Manifest:
    paths = snapshot_files(src)
    if not paths:
        raise ManifestError(f"{src} holds no model files")

    def entry(rel: str) -> FileEntry:
        path = src / rel
        return FileEntry(path=rel, size=path.stat().st_size, sha256=sha256_file(path))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return Manifest(model=model, revision=revision, files=tuple(pool.map(entry, paths)))


def object_key(prefix: str, rel: str) -> str:
    return f"{prefix}{rel}"


def remote_sha256(s3: S3Client, bucket: str, key: str) -> tuple[int, str] | None:
    """(size, sha256 metadata) of an object, or None when it does not exist."""
    try:
        head = s3.head_object(Bucket=bucket, Key=key)
    except Exception as exc:
        if _is_missing(exc):
            return None
        raise
    return int(head["ContentLength"]), str(head.get("Metadata", {}).get(SHA256_METADATA, ""))


def _is_missing(exc: Exception) -> bool:
    response = getattr(exc, "response", None)
    code = str((response or {}).get("Error", {}).get("Code", ""))
    return code in ("404", "NoSuchKey", "NotFound")


def import_snapshot(
    src: Path,
    *,
    s3: S3Client,
    bucket: str,
    prefix: str,
    model: str,
    revision: str,
    workers: int = 8,
    transfer_config: Any = None,
) -> Manifest:
    """Hash the snapshot, upload what the bucket lacks (resumable), then the manifest."""
    manifest = scan_snapshot(src, model=model, revision=revision, workers=workers)
    log.info("import: %d files, %.1f GB from %s to s3://%s/%s", len(manifest.files), manifest.total_bytes / 1e9, src, bucket, prefix)

    def upload(entry: FileEntry) -> bool:
        key = object_key(prefix, entry.path)
        if remote_sha256(s3, bucket, key) == (entry.size, entry.sha256):
            return False
        extra = {"Metadata": {SHA256_METADATA: entry.sha256}}
        s3.upload_file(str(src / entry.path), bucket, key, ExtraArgs=extra, Config=transfer_config)
        return True

    with ThreadPoolExecutor(max_workers=workers) as pool:
        uploaded = sum(pool.map(upload, manifest.files))
    s3.put_object(Bucket=bucket, Key=object_key(prefix, MANIFEST_NAME), Body=manifest.to_json().encode(), ContentType="application/json")
    log.info("import: %d files uploaded, %d already there; manifest %s", uploaded, len(manifest.files) - uploaded, manifest.digest()[:12])
    return manifest


def load_manifest(s3: S3Client, bucket: str, prefix: str) -> Manifest:
    key = object_key(prefix, MANIFEST_NAME)
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception as exc:
        if _is_missing(exc):
            raise ManifestError(f"s3://{bucket}/{key} does not exist: run `pdkit weights import` first") from None
        raise
    return Manifest.from_json(body)


def verify_bucket(manifest: Manifest, *, s3: S3Client, bucket: str, prefix: str, workers: int = 16) -> list[str]:
    """Every file of the manifest is in the bucket with its size and recorded sha256; the problems found."""

    def check(entry: FileEntry) -> str | None:
        remote = remote_sha256(s3, bucket, object_key(prefix, entry.path))
        if remote is None:
            return f"{entry.path}: missing"
        size, digest = remote
        if size != entry.size:
            return f"{entry.path}: {size} bytes in the bucket, {entry.size} in the manifest"
        if digest != entry.sha256:
            return f"{entry.path}: sha256 metadata {digest or '(none)'} differs from the manifest"
        return None

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return [p for p in pool.map(check, manifest.files) if p]


def _s3_client(region: str | None, connections: int) -> S3Client:
    import boto3
    from botocore.config import Config

    client: S3Client = boto3.client(
        "s3", region_name=region, config=Config(max_pool_connections=connections, retries={"mode": "adaptive", "max_attempts": 10})
    )
    return client


def main(argv: Sequence[str] | None = None, *, s3_factory: Callable[[str | None, int], S3Client] = _s3_client) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdkit.pods.weights_manifest", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="hash a Hugging Face snapshot directory and upload it with its manifest")
    imp.add_argument("src", type=Path)
    imp.add_argument("--model", required=True)
    imp.add_argument("--revision", required=True, help="the commit the snapshot was downloaded at")
    ver = sub.add_parser("verify", help="check the bucket against its manifest")
    for p in (imp, ver):
        p.add_argument("--bucket", required=True)
        p.add_argument("--prefix", required=True, help="ends with /")
        p.add_argument("--region", default=os.environ.get("AWS_REGION"))
        p.add_argument("--workers", type=int, default=16)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    s3 = s3_factory(args.region, args.workers * 4)
    try:
        if args.command == "import":
            import_snapshot(
                args.src, s3=s3, bucket=args.bucket, prefix=args.prefix, model=args.model, revision=args.revision, workers=args.workers
            )
            return 0
        manifest = load_manifest(s3, args.bucket, args.prefix)
        problems = verify_bucket(manifest, s3=s3, bucket=args.bucket, prefix=args.prefix, workers=args.workers)
    except ManifestError as exc:
        print(f"pdkit weights: error: {exc}", file=sys.stderr)
        return 1
    _report(problems, manifest)
    return 1 if problems else 0


def _report(problems: Iterable[str], manifest: Manifest) -> None:
    problems = list(problems)
    for problem in problems:
        print(f"pdkit weights: {problem}", file=sys.stderr)
    if not problems:
        print(f"pdkit weights: {len(manifest.files)} files, {manifest.total_bytes / 1e9:.1f} GB match manifest {manifest.digest()[:12]}")


if __name__ == "__main__":
    sys.exit(main())
