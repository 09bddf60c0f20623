"""Import a model from the Hugging Face Hub into the weights bucket, streaming: no local copy.

    python -m pdkit.pods.weights_import --model zai-org/GLM-5.1-FP8 --revision main \\
        --bucket B --prefix models/zai-org/GLM-5.1-FP8/main/ --region R [--hf-token-secret-arn ARN]

Run by the in-region import Job (pdkit/render/serving/weights_job.py, `pdkit weights import`) on a system
node, whose 50 GiB root volume could never hold the ~760 GB checkpoint. Each file is streamed from the
Hub with huggingface_hub's HfFileSystem into boto3's managed transfer (upload_fileobj; 64 MiB parts, two
in flight per file), one file per worker, so memory is bounded (files x 3 parts) and nothing touches
the disk (hf_hub_download would need a local copy of each ~5 GB shard per worker):

- the revision is resolved to one commit first and every file is read at that commit, so the
  manifest describes one consistent snapshot even if the branch moves during the import;
- large files are stored with Git LFS/Xet on the Hub, which publishes their sha256 before the
  download: the object is created with that sha256 in its metadata and the multipart upload is
  completed only if the streamed bytes hash to it (the stream raises at its end otherwise and
  s3transfer aborts the upload: no object, nothing half written). Small files live in git; they
  are read into memory and checked against their git blob id;
- resumable: an object already in the bucket with the Hub's size and sha256 is not downloaded again,
  so a retried pod (the Job's backoffLimit) continues where the last one stopped;
- the manifest (pdkit/pods/weights_manifest.py) goes up last; a manifest of another commit under
  the prefix is deleted first, so staging never mixes two revisions;
- the Hub token, for gated models, is read from AWS Secrets Manager with the pod's own Pod Identity
  role: it never passes through the operator's machine or a Kubernetes Secret.

Exit codes: 0 done; 1 failed, worth retrying (network, a mismatching stream); 3 failed, a retry
cannot help (gated model without access, unknown repository or revision, S3 access denied): the Job's
podFailurePolicy stops at once. Imports only the standard library and the manifest module; boto3 and
huggingface_hub (both in the serving image's lock) load on use.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from pdkit.pods.weights_manifest import (
    MANIFEST_NAME,
    SHA256_METADATA,
    SKIPPED_NAMES,
    SKIPPED_PARTS,
    FileEntry,
    Manifest,
    ManifestError,
    S3Client,
    object_key,
    remote_sha256,
)

MIB = 1024 * 1024
PART_BYTES = 64 * MIB
PARTS_IN_FLIGHT = 2
MAX_PARTS = 10_000  # S3's limit per multipart upload
FILE_ATTEMPTS = 3
EXIT_RETRY = 1
EXIT_NOT_RETRYABLE = 3
_DENIED = ("AccessDenied", "403", "Forbidden", "NoSuchBucket", "AllAccessDisabled", "InvalidAccessKeyId", "KMS.DisabledException")

log = logging.getLogger("pdkit.weights")


class ImportFailed(RuntimeError):
    """The import cannot finish now; retrying may help."""


class NotRetryable(RuntimeError):
    """The import cannot finish until an operator fixes something; the message says what."""


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    sha256: str | None  # LFS/Xet files: the Hub's sha256 of the content, known before the download
    blob_id: str | None  # files stored in git: their git object id (sha1 of "blob <size>\\0" + content)


@dataclass(frozen=True)
class HubSnapshot:
    model: str
    commit: str
    gated: bool
    files: tuple[HubFile, ...]


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...
    def close(self) -> None: ...


class Hub(Protocol):
    """What the import needs from the Hugging Face Hub (HfHub on the real one; tests pass a fake)."""

    def snapshot(self, model: str, revision: str) -> HubSnapshot: ...
    def open(self, model: str, commit: str, path: str) -> Readable: ...


class S3Transfer(S3Client, Protocol):
    def upload_fileobj(self, *args: Any, **kwargs: Any) -> None: ...
    def delete_object(self, **kwargs: Any) -> dict[str, Any]: ...


def model_files(snapshot: HubSnapshot) -> list[HubFile]:
    """The files to import: everything but git bookkeeping and a manifest of our own, largest first."""
    keep = []
    for f in snapshot.files:
        parts = f.path.split("/")
        if any(p in SKIPPED_PARTS for p in parts) or parts[-1] in SKIPPED_NAMES:
            continue
        keep.append(f)
    if not keep:
        raise NotRetryable(f"{snapshot.model}@{snapshot.commit} lists no files on the Hub")
    return sorted(keep, key=lambda f: (-f.size, f.path))


class Progress:
    """Bytes through the pipe against the total, logged at most every `interval` seconds."""

    def __init__(self, total: int, files: int, *, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.files, self.interval, self.clock = total, files, interval, clock
        self.done = self.files_done = self.skipped = 0
        self.start = self._last = clock()
        self._lock = threading.Lock()

    def add(self, n: int, *, file_done: bool = False, skipped: bool = False) -> None:
        with self._lock:
            self.done += n
            self.files_done += int(file_done)
            self.skipped += int(skipped)
            now = self.clock()
            if now - self._last >= self.interval or self.files_done == self.files:
                self._last = now
                log.info("%s", self.line(now))

    def line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        eta = f"{(self.total - self.done) / rate / 60:.1f} min" if rate > 0 else "?"
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return (
            f"imported {self.done / 1e9:.1f}/{self.total / 1e9:.1f} GB ({pct:.0f}%), {rate / 1e9:.2f} GB/s, ETA {eta}, "
            f"{self.files_done}/{self.files} files ({self.skipped} already in the bucket)"
        )


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()


def _read_full(source: Readable, n: int) -> bytes:
    """Up to n bytes: a stream may return less than asked before its end."""
    chunks, got = [], 0
    while got < n:
        chunk = source.read(n - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _part_size(size: int, part_bytes: int) -> int:
    """At least part_bytes, and large enough that the file fits S3's 10,000 parts."""
    return max(part_bytes, -(-size // MAX_PARTS))


class _Verified:
    """The Hub's stream as s3transfer reads it: counted, hashed, and refused at its end unless it is
    exactly the listed size with the Hub's sha256. s3transfer reads a non-seekable body part by part
    and, when a read raises, aborts the multipart upload instead of completing it (its failure cleanup,
    s3transfer/tasks.py CreateMultipartUploadTask), so a bad stream never becomes an object."""

    def __init__(self, source: Readable, f: HubFile, progress: Progress) -> None:
        self.source, self.f, self.progress = source, f, progress
        self.digest = hashlib.sha256()
        self.total = 0

    def read(self, size: int = -1, /) -> bytes:
        chunk = _read_full(self.source, size if size >= 0 else self.f.size + 1 - self.total)
        self.total += len(chunk)
        if self.total > self.f.size:
            raise ImportFailed(f"{self.f.path}: the Hub sent more than the {self.f.size} bytes its listing says")
        self.digest.update(chunk)
        self.progress.add(len(chunk))
        if len(chunk) < size or size < 0:  # the end of the stream
            if self.total != self.f.size:
                raise ImportFailed(f"{self.f.path}: the Hub sent {self.total} bytes, its listing says {self.f.size}")
            if self.digest.hexdigest() != self.f.sha256:
                raise ImportFailed(f"{self.f.path}: sha256 {self.digest.hexdigest()} differs from the Hub's {self.f.sha256}")
        return chunk


def _small(source: Readable, f: HubFile) -> bytes:
    """A file stored in git (no sha256 on the Hub): read whole and checked against its git blob id."""
    data = _read_full(source, f.size + 1)
    if len(data) != f.size:
        raise ImportFailed(f"{f.path}: the Hub sent {len(data)} bytes, its listing says {f.size}")
    if f.blob_id is not None and git_blob_id(data) != f.blob_id:
        raise ImportFailed(f"{f.path}: git blob id {git_blob_id(data)} differs from the Hub's {f.blob_id}")
    return data


def _upload(source: Readable, f: HubFile, s3: S3Transfer, bucket: str, key: str, part_bytes: int, progress: Progress) -> str:
    """One file into S3 with boto3's managed transfer, the object carrying the Hub's sha256."""
    from boto3.s3.transfer import TransferConfig

    part = _part_size(f.size, part_bytes)
    # At most PARTS_IN_FLIGHT parts uploading plus the one being read: memory stays bounded.
    config = TransferConfig(
        multipart_threshold=part, multipart_chunksize=part, max_concurrency=PARTS_IN_FLIGHT, max_io_queue=PARTS_IN_FLIGHT
    )
    config.max_in_memory_upload_chunks = PARTS_IN_FLIGHT + 1
    body: Any = None
    counted = 0
    try:
        if f.sha256 is None:
            data = _small(source, f)
            digest = hashlib.sha256(data).hexdigest()
            progress.add(len(data))
            counted = len(data)
            body = io.BytesIO(data)
        else:
            digest, body = f.sha256, _Verified(source, f, progress)
        s3.upload_fileobj(body, bucket, key, ExtraArgs={"Metadata": {SHA256_METADATA: digest}}, Config=config)
    except BaseException:
        progress.add(-(body.total if isinstance(body, _Verified) else counted))
        raise
    return digest


def _s3_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    return str((response or {}).get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def _not_retryable_s3(exc: BaseException, bucket: str) -> NotRetryable | None:
    code = _s3_code(exc)
    if code not in _DENIED:
        return None
    if code == "NoSuchBucket":
        return NotRetryable(f"bucket {bucket} does not exist. Fix: deploy the serving stack (it creates the bucket)")
    return NotRetryable(
        f"S3 refused {getattr(exc, 'operation_name', 'the call')} on s3://{bucket} ({code}). Fix: the pod's service account needs the "
        "weights-writer role: check the serving stack's Pod Identity association for it (runbooks/02-serve.md, Import the weights)"
    )


def _copy(
    hub: Hub, snapshot: HubSnapshot, f: HubFile, *, s3: S3Transfer, bucket: str, prefix: str, part_bytes: int, progress: Progress
) -> FileEntry:
    key = object_key(prefix, f.path)
    if f.sha256 is not None and remote_sha256(s3, bucket, key) == (f.size, f.sha256):
        progress.add(f.size, file_done=True, skipped=True)
        return FileEntry(path=f.path, size=f.size, sha256=f.sha256)
    if f.sha256 is None and f.size > part_bytes:
        raise NotRetryable(
            f"{f.path}: {f.size} bytes stored in git without an LFS sha256; the import streams only LFS/Xet files that large"
        )
    for attempt in range(1, FILE_ATTEMPTS + 1):
        source = hub.open(snapshot.model, snapshot.commit, f.path)
        try:
            digest = _upload(source, f, s3, bucket, key, part_bytes, progress)
        except NotRetryable:
            raise
        except Exception as exc:
            fatal = _not_retryable_s3(exc, bucket)
            if fatal is not None:
                raise fatal from None
            if attempt == FILE_ATTEMPTS:
                raise ImportFailed(f"{f.path}: {exc} (after {FILE_ATTEMPTS} attempts)") from exc
            log.warning("%s: %s; attempt %d of %d, trying again", f.path, exc, attempt, FILE_ATTEMPTS)
            continue
        finally:
            source.close()
        progress.add(0, file_done=True)
        return FileEntry(path=f.path, size=f.size, sha256=digest)
    raise AssertionError("unreachable")


def _retire_other_manifest(s3: S3Transfer, bucket: str, prefix: str, commit: str) -> None:
    """A manifest of another commit would let staging mix two revisions while files are replaced."""
    from pdkit.pods.weights_manifest import load_manifest

    try:
        current = load_manifest(s3, bucket, prefix)
    except ManifestError:
        return
    if current.revision != commit:
        log.info("the prefix holds the manifest of %s; removing it until %s is complete", current.revision or "another import", commit)
        s3.delete_object(Bucket=bucket, Key=object_key(prefix, MANIFEST_NAME))


def import_from_hub(
    hub: Hub,
    *,
    s3: S3Transfer,
    bucket: str,
    prefix: str,
    model: str,
    revision: str,
    have_token: bool,
    workers: int = 8,
    part_bytes: int = PART_BYTES,
    progress_interval: float = 15.0,
) -> Manifest:
    started = time.monotonic()
    snapshot = hub.snapshot(model, revision)
    if snapshot.gated and not have_token:
        raise NotRetryable(
            f"{model} is gated on the Hugging Face Hub. Fix: accept its terms with your Hub account, store a read token in AWS Secrets "
            "Manager and set model.hf_token_secret_arn in the profile (then deploy the serving stack)"
        )
    files = model_files(snapshot)
    total = sum(f.size for f in files)
    log.info(
        "import: %s@%s (revision %s), %d files, %.1f GB, to s3://%s/%s; %d files at a time",
        model,
        snapshot.commit,
        revision,
        len(files),
        total / 1e9,
        bucket,
        prefix,
        workers,
    )
    try:
        _retire_other_manifest(s3, bucket, prefix, snapshot.commit)
    except Exception as exc:
        raise (_not_retryable_s3(exc, bucket) or exc) from None
    progress = Progress(total, len(files), interval=progress_interval)

    def copy(f: HubFile) -> FileEntry:
        return _copy(hub, snapshot, f, s3=s3, bucket=bucket, prefix=prefix, part_bytes=part_bytes, progress=progress)

    entries: list[FileEntry] = []
    failures: list[str] = []
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="file") as pool:
        for f, future in [(f, pool.submit(copy, f)) for f in files]:
            try:
                entries.append(future.result())
            except NotRetryable:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
            except Exception as exc:
                failures.append(f"{f.path}: {exc}")
    if failures:
        for failure in failures:
            log.error("%s", failure)
        raise ImportFailed(f"{len(failures)} of {len(files)} files failed; the next attempt keeps the {len(entries)} already imported")
    manifest = Manifest(model=model, revision=snapshot.commit, files=tuple(entries))
    Manifest.from_json(manifest.to_json())  # the same checks staging applies, before anything trusts it
    s3.put_object(Bucket=bucket, Key=object_key(prefix, MANIFEST_NAME), Body=manifest.to_json().encode(), ContentType="application/json")
    log.info(
        "import complete: %d files, %.1f GB (%d already in the bucket) in %.0f s; manifest %s for %s@%s",
        len(entries),
        total / 1e9,
        progress.skipped,
        time.monotonic() - started,
        manifest.digest()[:12],
        model,
        snapshot.commit,
    )
    return manifest


# --- the real Hub and the token --------------------------------------------------------------------


class HfHub:
    """The Hugging Face Hub through huggingface_hub, the client the serving image already carries.

    The listing is `HfApi.model_info(files_metadata=True)` (GET /api/models/<repo>/revision/<rev>?blobs=true):
    the commit, the gated flag, and every file's size with its LFS sha256 or git blob id. A file is
    streamed with `HfFileSystem` (block_size=0: one GET of the resolve URL, resumed once with a Range
    request when it breaks), so nothing touches the pod's small disk; httpx follows the Hub's redirect
    to its CDN without the token. The Hub's refusals (gated, unknown repository or revision) are
    NotRetryable. HF_ENDPOINT and HTTPS_PROXY are honoured.
    """

    def __init__(self, token: str | None, *, endpoint: str | None = None) -> None:
        from huggingface_hub import HfApi, HfFileSystem

        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
        self.api = HfApi(endpoint=self.endpoint, token=token or False)
        self.fs = HfFileSystem(endpoint=self.endpoint, token=token or False, skip_instance_cache=True)

    def snapshot(self, model: str, revision: str) -> HubSnapshot:
        with _hub_errors(f"{model}@{revision}"):
            info = self.api.model_info(model, revision=revision, files_metadata=True)
        files = []
        for s in info.siblings or []:
            size = s.lfs.size if s.lfs else s.size
            if not isinstance(size, int):
                raise ImportFailed(f"the Hub listed {s.rfilename!r} without a size")
            files.append(HubFile(s.rfilename, size, s.lfs.sha256 if s.lfs else None, None if s.lfs else s.blob_id))
        if not info.sha:
            raise ImportFailed(f"the Hub did not resolve {model}@{revision} to a commit")
        return HubSnapshot(model=model, commit=info.sha, gated=bool(info.gated), files=tuple(files))

    def open(self, model: str, commit: str, path: str) -> Readable:
        with _hub_errors(f"{model}/{path}"):
            return _Stream(self.fs.open(f"{model}/{path}", "rb", revision=commit, block_size=0), f"{model}/{path}")


class _Stream:
    """A Hub file whose read errors say what they mean to the Job."""

    def __init__(self, file: Any, what: str) -> None:
        self.file, self.what = file, what

    def read(self, size: int = -1, /) -> bytes:
        with _hub_errors(self.what):
            data: bytes = self.file.read(size)
        return data

    def close(self) -> None:
        self.file.close()


@contextlib.contextmanager
def _hub_errors(what: str) -> Iterator[None]:
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        yield
    except GatedRepoError as err:
        raise NotRetryable(
            f"the Hub refused {what}: the model is gated and the token has no access ({err.server_message or err}). Fix: accept the "
            "model's terms on the Hub with the account whose token is in model.hf_token_secret_arn"
        ) from None
    except RepositoryNotFoundError as err:
        raise NotRetryable(
            f"the Hub does not show {what} to this token ({err.response.status_code} {err.server_message or ''}). Fix: check "
            "model.id; a private or gated model needs model.hf_token_secret_arn"
        ) from None
    except RevisionNotFoundError as err:
        raise NotRetryable(f"the Hub has no such revision for {what} ({err.server_message or err}). Fix: check model.revision") from None
    except HfHubHTTPError as err:
        raise ImportFailed(f"the Hub answered HTTP {err.response.status_code} for {what}; the Job retries") from None
    except Exception as err:
        import httpx

        if isinstance(err, (OSError, httpx.TransportError)):  # httpx's transport errors are not OSErrors
            raise ImportFailed(f"cannot reach the Hub for {what} ({err}). Fix: check the VPC's NAT gateway route") from None
        raise


def read_token(secrets: Any, secret_arn: str) -> str:
    """The Hub token from Secrets Manager: the secret string itself, or its "token" / "HF_TOKEN" key."""
    try:
        value = str(secrets.get_secret_value(SecretId=secret_arn).get("SecretString") or "")
    except Exception as exc:
        code = _s3_code(exc)
        if code in ("AccessDeniedException", "ResourceNotFoundException", "DecryptionFailure", "InvalidRequestException"):
            raise NotRetryable(
                f"cannot read the Hub token {secret_arn} ({code}). Fix: the secret must exist in this account and region, and the "
                "weights-writer role must allow secretsmanager:GetSecretValue on it (and kms:Decrypt on its key if it is not "
                "aws/secretsmanager); deploy the serving stack after setting model.hf_token_secret_arn"
            ) from None
        raise
    try:
        body = json.loads(value)
    except ValueError:
        body = None
    if isinstance(body, dict):
        value = str(body.get("token") or body.get("HF_TOKEN") or "")
    value = value.strip()
    if not value:
        raise NotRetryable(f"the secret {secret_arn} holds no token. Fix: store the token as the secret string (or under the key 'token')")
    return value


def _clients(region: str | None, connections: int, secrets_region: str | None) -> tuple[S3Transfer, Any]:
    import boto3
    from botocore.config import Config

    config = Config(max_pool_connections=connections, retries={"mode": "adaptive", "max_attempts": 10})
    return boto3.client("s3", region_name=region, config=config), boto3.client("secretsmanager", region_name=secrets_region, config=config)


def _arn_region(arn: str | None, default: str | None) -> str | None:
    """Secrets Manager answers for a secret only in its own region, which its ARN names."""
    parts = (arn or "").split(":")
    return parts[3] if len(parts) > 6 and parts[2] == "secretsmanager" and parts[3] else default


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pdkit.pods.weights_import", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="Hub repository, e.g. zai-org/GLM-5.1-FP8")
    parser.add_argument("--revision", required=True, help="branch, tag or commit; resolved to one commit")
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--prefix", required=True, help="the model's folder in the bucket, ending with /")
    parser.add_argument("--region", default=os.environ.get("AWS_REGION"))
    parser.add_argument("--hf-token-secret-arn", help="Secrets Manager secret holding a Hub read token (gated models)")
    parser.add_argument("--workers", type=int, default=8, help="files streamed at once")
    parser.add_argument("--part-mib", type=int, default=PART_BYTES // MIB, help="multipart part size (memory: workers x 3 parts)")
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    clients: Callable[[str | None, int, str | None], tuple[S3Transfer, Any]] = _clients,
    hub_factory: Callable[[str | None], Hub] = HfHub,
) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout, force=True)
    if not args.prefix.endswith("/"):
        print("pdkit weights import: error: --prefix must end with /", file=sys.stderr)
        return EXIT_NOT_RETRYABLE
    s3, secrets = clients(args.region, args.workers * (PARTS_IN_FLIGHT + 1) + 8, _arn_region(args.hf_token_secret_arn, args.region))
    try:
        token = read_token(secrets, args.hf_token_secret_arn) if args.hf_token_secret_arn else None
        import_from_hub(
            hub_factory(token),
            s3=s3,
            bucket=args.bucket,
            prefix=args.prefix,
            model=args.model,
            revision=args.revision,
            have_token=token is not None,
            workers=args.workers,
            part_bytes=args.part_mib * MIB,
        )
    except NotRetryable as exc:
        print(f"pdkit weights import: error: {exc}", file=sys.stderr)
        return EXIT_NOT_RETRYABLE
    except (ImportFailed, ManifestError) as exc:
        print(f"pdkit weights import: error: {exc}", file=sys.stderr)
        return EXIT_RETRY
    return 0


if __name__ == "__main__":
    sys.exit(main())
