"""Import a model from the Hugging Face Hub into the weights bucket, streaming: no local copy.

    python -m pdkit.serving.weights_import --model zai-org/GLM-5.1-FP8 --revision main \\
        --bucket B --prefix models/zai-org/GLM-5.1-FP8/main/ --region R [--hf-token-secret-arn ARN]

Run by the in-region import Job (pdkit/serving/weights_job.py, `pdkit weights import`) on a system
node, whose 50 GiB root volume could never hold the ~760 GB checkpoint. Each file goes from an HTTP
stream of the Hub straight into an S3 multipart upload, part by part (64 MiB, two parts in flight
per file), so memory is bounded (files x 3 parts) and nothing touches the disk:

- the revision is resolved to one commit first and every file is read at that commit, so the
  manifest describes one consistent snapshot even if the branch moves during the import;
- large files are stored with Git LFS/Xet on the Hub, which publishes their sha256 before the
  download: the object is created with that sha256 in its metadata and the multipart upload is
  completed only if the streamed bytes hash to it (otherwise aborted: no object, nothing half
  written). Small files live in git; they are read into memory and checked against their git
  blob id;
- resumable: an object already in the bucket with the Hub's size and sha256 is not downloaded again,
  so a retried pod (the Job's backoffLimit) continues where the last one stopped;
- the manifest (pdkit/serving/weights_manifest.py) goes up last; a manifest of another commit under
  the prefix is deleted first, so staging never mixes two revisions;
- the Hub token, for gated models, is read from AWS Secrets Manager with the pod's own Pod Identity
  role: it never passes through the operator's machine or a Kubernetes Secret.

Exit codes: 0 done; 1 failed, worth retrying (network, a mismatching stream); 3 failed, a retry
cannot help (gated model without access, unknown repository or revision, S3 access denied): the Job's
podFailurePolicy stops at once. Imports only the standard library, boto3 (on use) and the manifest
module: the Hub is reached over its public HTTP API (HfHub), so huggingface_hub's version does not
matter.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from pdkit.serving.weights_manifest import (
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


class MultipartS3(S3Client, Protocol):
    def create_multipart_upload(self, **kwargs: Any) -> dict[str, Any]: ...
    def upload_part(self, **kwargs: Any) -> dict[str, Any]: ...
    def complete_multipart_upload(self, **kwargs: Any) -> dict[str, Any]: ...
    def abort_multipart_upload(self, **kwargs: Any) -> dict[str, Any]: ...
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


def _small(source: Readable, f: HubFile, s3: MultipartS3, bucket: str, key: str) -> str:
    data = _read_full(source, f.size + 1)
    if len(data) != f.size:
        raise ImportFailed(f"{f.path}: the Hub sent {len(data)} bytes, its listing says {f.size}")
    digest = hashlib.sha256(data).hexdigest()
    if f.sha256 is not None and digest != f.sha256:
        raise ImportFailed(f"{f.path}: sha256 {digest} differs from the Hub's {f.sha256}")
    if f.sha256 is None and f.blob_id is not None and git_blob_id(data) != f.blob_id:
        raise ImportFailed(f"{f.path}: git blob id {git_blob_id(data)} differs from the Hub's {f.blob_id}")
    s3.put_object(Bucket=bucket, Key=key, Body=data, Metadata={SHA256_METADATA: digest})
    return digest


def _multipart(source: Readable, f: HubFile, s3: MultipartS3, bucket: str, key: str, part_bytes: int, progress: Progress) -> str:
    """Stream into a multipart upload that is completed only when the bytes hash to the Hub's sha256."""
    assert f.sha256 is not None
    part = _part_size(f.size, part_bytes)
    # CRC32 per part, declared at creation and listed at completion as s3transfer does: S3 refuses part
    # checksums an upload was not created for, and botocore >= 1.36 adds them by default.
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key, Metadata={SHA256_METADATA: f.sha256}, ChecksumAlgorithm="CRC32")[
        "UploadId"
    ]
    digest = hashlib.sha256()
    total = 0
    try:
        parts: list[dict[str, Any]] = []
        in_flight: deque[Future[dict[str, Any]]] = deque()

        def upload(number: int, body: bytes) -> dict[str, Any]:
            done = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body, ChecksumAlgorithm="CRC32")
            part = {"ETag": done["ETag"], "PartNumber": number}
            if "ChecksumCRC32" in done:
                part["ChecksumCRC32"] = done["ChecksumCRC32"]
            return part

        # At most PARTS_IN_FLIGHT parts uploading plus the one being read: memory stays bounded.
        with ThreadPoolExecutor(max_workers=PARTS_IN_FLIGHT, thread_name_prefix="part") as pool:
            number = 0
            while chunk := _read_full(source, part):
                total += len(chunk)
                if total > f.size:
                    raise ImportFailed(f"{f.path}: the Hub sent more than the {f.size} bytes its listing says")
                digest.update(chunk)
                progress.add(len(chunk))
                number += 1
                while len(in_flight) >= PARTS_IN_FLIGHT:
                    parts.append(in_flight.popleft().result())
                in_flight.append(pool.submit(upload, number, chunk))
                del chunk
            while in_flight:
                parts.append(in_flight.popleft().result())
        if total != f.size:
            raise ImportFailed(f"{f.path}: the Hub sent {total} bytes, its listing says {f.size}")
        if digest.hexdigest() != f.sha256:
            raise ImportFailed(f"{f.path}: sha256 {digest.hexdigest()} differs from the Hub's {f.sha256}")
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts})
    except BaseException:
        progress.add(-total)
        try:
            s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        except Exception as exc:  # the bucket's AbortIncompleteMultipartUpload rule removes what is left
            log.warning("%s: could not abort multipart upload %s (%s)", f.path, upload_id, exc)
        raise
    return f.sha256


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
    hub: Hub, snapshot: HubSnapshot, f: HubFile, *, s3: MultipartS3, bucket: str, prefix: str, part_bytes: int, progress: Progress
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
            if f.size <= part_bytes:
                digest = _small(source, f, s3, bucket, key)
                progress.add(f.size)
            else:
                digest = _multipart(source, f, s3, bucket, key, part_bytes, progress)
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


def _retire_other_manifest(s3: MultipartS3, bucket: str, prefix: str, commit: str) -> None:
    """A manifest of another commit would let staging mix two revisions while files are replaced."""
    from pdkit.serving.weights_manifest import load_manifest

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
    s3: MultipartS3,
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

HUB_ATTEMPTS = 6
HUB_TIMEOUT_SECONDS = 60
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class HfHub:
    """The Hugging Face Hub over its public HTTP API, with the standard library only.

    The listing is `GET /api/models/<repo>/revision/<rev>?blobs=true` (what huggingface_hub's
    `model_info(files_metadata=True)` calls): the commit, the gated flag, and every file's size with
    its LFS sha256 or git blob id. A file is `GET /<repo>/resolve/<commit>/<path>`, which redirects
    LFS/Xet files to the Hub's CDN (the token is not sent to another host). A stream that breaks
    resumes with a Range request; 429 and 5xx are retried with backoff; the Hub's refusals (gated,
    unknown repository or revision) are NotRetryable. HF_ENDPOINT and HTTPS_PROXY are honoured.
    Owning these ~100 lines keeps the import independent of huggingface_hub's version and lets the
    tests run it against a local HTTP server.
    """

    def __init__(self, token: str | None, *, endpoint: str | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        self.token = token
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
        self.sleep = sleep
        self.opener = urllib.request.build_opener(_SameHostAuthRedirects())

    def snapshot(self, model: str, revision: str) -> HubSnapshot:
        from urllib.parse import quote

        url = f"{self.endpoint}/api/models/{model}/revision/{quote(revision, safe='')}?blobs=true"
        with self.request(url, what=f"{model}@{revision}") as response:
            body = json.loads(response.read())
        files = []
        for s in body.get("siblings") or []:
            lfs = s.get("lfs") or None
            size = (lfs or {}).get("size", s.get("size"))
            if not isinstance(size, int):
                raise ImportFailed(f"the Hub listed {s.get('rfilename')!r} without a size")
            sha256 = lfs.get("sha256") if lfs else None
            files.append(HubFile(str(s["rfilename"]), size, sha256, None if lfs else s.get("blobId")))
        commit = body.get("sha")
        if not commit:
            raise ImportFailed(f"the Hub did not resolve {model}@{revision} to a commit")
        return HubSnapshot(model=model, commit=str(commit), gated=bool(body.get("gated")), files=tuple(files))

    def open(self, model: str, commit: str, path: str) -> Readable:
        from urllib.parse import quote

        return _HttpStream(self, f"{self.endpoint}/{model}/resolve/{quote(commit, safe='')}/{quote(path)}", what=f"{model}/{path}")

    def request(self, url: str, *, what: str, start: int = 0) -> Any:
        """An open response for url (from byte `start`), after retrying what is worth retrying."""
        headers = {"User-Agent": "pdkit-weights-import"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if start:
            headers["Range"] = f"bytes={start}-"
        for attempt in range(1, HUB_ATTEMPTS + 1):
            try:
                response = self.opener.open(urllib.request.Request(url, headers=headers), timeout=HUB_TIMEOUT_SECONDS)  # noqa: S310 - https (or HF_ENDPOINT)
            except urllib.error.HTTPError as err:
                if err.code not in _RETRY_STATUS or attempt == HUB_ATTEMPTS:
                    raise _hub_refusal(err, what) from None
                reason = f"HTTP {err.code}"
            except OSError as err:  # URLError, timeouts, resets
                if attempt == HUB_ATTEMPTS:
                    raise ImportFailed(f"cannot reach the Hub for {what} ({err}). Fix: check the VPC's NAT gateway route") from None
                reason = str(err)
            else:
                if start and response.status != 206:
                    response.close()
                    raise ImportFailed(f"the Hub ignored the Range request for {what}")
                return response
            log.warning("Hub: %s for %s; retrying (%d of %d)", reason, what, attempt, HUB_ATTEMPTS)
            self.sleep(min(2**attempt, 30))
        raise AssertionError("unreachable")


class _SameHostAuthRedirects(urllib.request.HTTPRedirectHandler):
    """Follow the Hub's redirects to its CDN without carrying the token to another host."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        from urllib.parse import urlsplit

        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urlsplit(newurl).netloc != urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


def _hub_refusal(err: Any, what: str) -> Exception:
    code = err.headers.get("X-Error-Code", "") if err.headers else ""
    message = (err.headers.get("X-Error-Message", "") if err.headers else "") or str(err.reason)
    if code == "GatedRepo" or (err.code == 403 and not code):
        return NotRetryable(
            f"the Hub refused {what}: the model is gated and the token has no access ({message}). Fix: accept the model's terms on the "
            "Hub with the account whose token is in model.hf_token_secret_arn"
        )
    if code == "RepoNotFound" or err.code == 401:
        return NotRetryable(
            f"the Hub does not show {what} to this token ({err.code} {code or message}). Fix: check model.id; a private or gated model "
            "needs model.hf_token_secret_arn"
        )
    if code == "RevisionNotFound":
        return NotRetryable(f"the Hub has no such revision for {what} ({message}). Fix: check model.revision")
    if err.code in _RETRY_STATUS:
        return ImportFailed(f"the Hub kept answering HTTP {err.code} for {what}; the Job retries")
    return NotRetryable(f"the Hub answered HTTP {err.code} {code} for {what} ({message})")


class _HttpStream:
    """One file from the Hub, resuming with a Range request when the connection breaks."""

    def __init__(self, hub: HfHub, url: str, *, what: str) -> None:
        self.hub, self.url, self.what = hub, url, what
        self.pos = 0
        self.response: Any = None
        self.breaks = 0

    def read(self, size: int = -1, /) -> bytes:
        import http.client

        while True:
            if self.response is None:
                self.response = self.hub.request(self.url, what=self.what, start=self.pos)
            try:
                data: bytes = self.response.read(size if size >= 0 else None)
                if not data and size != 0 and getattr(self.response, "length", None):
                    # http.client returns b"" when the connection ends before Content-Length.
                    raise http.client.IncompleteRead(b"", self.response.length)
            except (OSError, http.client.HTTPException) as err:
                self.close()
                self.breaks += 1
                if self.breaks >= HUB_ATTEMPTS:
                    raise ImportFailed(f"the download of {self.what} broke {self.breaks} times ({err})") from None
                log.warning("Hub: the download of %s broke at byte %d (%s); resuming", self.what, self.pos, err)
                continue
            self.pos += len(data)
            return data

    def close(self) -> None:
        if self.response is not None:
            self.response.close()
            self.response = None


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


def _clients(region: str | None, connections: int, secrets_region: str | None) -> tuple[MultipartS3, Any]:
    import boto3
    from botocore.config import Config

    config = Config(max_pool_connections=connections, retries={"mode": "adaptive", "max_attempts": 10})
    return boto3.client("s3", region_name=region, config=config), boto3.client("secretsmanager", region_name=secrets_region, config=config)


def _arn_region(arn: str | None, default: str | None) -> str | None:
    """Secrets Manager answers for a secret only in its own region, which its ARN names."""
    parts = (arn or "").split(":")
    return parts[3] if len(parts) > 6 and parts[2] == "secretsmanager" and parts[3] else default


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pdkit.serving.weights_import", description=__doc__.splitlines()[0])
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
    clients: Callable[[str | None, int, str | None], tuple[MultipartS3, Any]] = _clients,
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
