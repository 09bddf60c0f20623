"""Stage the checkpoint from S3 onto the node's NVMe before SGLang starts (an init container).

    python -m pdkit.pods.staging --bucket B --prefix P --dest /models/<model> --region R

- reads the manifest the import wrote (sizes + sha256 of every file);
- skips everything when the directory already holds that manifest's content (a marker written only
  after a full verification, plus every file at its size), so a group restart costs seconds;
- otherwise hashes what is already there, re-fetches what is missing or corrupted, downloads in
  parallel (files x ranged parts), verifies every download, and fails loudly when a file still does
  not match after a second fetch;
- logs progress (GB, GB/s, ETA) every few seconds.

Imports only the standard library, boto3 and the manifest module, so the serving image needs
nothing else from pdkit.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdkit.pods.weights_manifest import FileEntry, Manifest, ManifestError, S3Client, load_manifest, object_key, sha256_file

MARKER = ".pdkit-staged.json"
LOCK = ".pdkit-staging.lock"
PARTIAL = ".pdkit-partial"
# Kept free on the volume beyond the checkpoint (logs, caches, other pods' emptyDirs on the same RAID).
FREE_SPACE_MARGIN = 20 * 10**9
FETCH_ATTEMPTS = 2

log = logging.getLogger("pdkit.staging")


class StagingError(RuntimeError):
    """Staging cannot finish; the message says what to do."""


@dataclass(frozen=True)
class StageResult:
    skipped: bool
    fetched: int
    reused: int
    removed: int
    bytes_fetched: int
    seconds: float


class Progress:
    """Bytes done against a total, logged at most every `interval` seconds from any thread."""

    def __init__(self, total: int, files: int, *, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.files, self.interval, self.clock = total, files, interval, clock
        self.done = 0
        self.files_done = 0
        self.start = clock()
        self._last = self.start
        self._lock = threading.Lock()

    def add(self, n: int, *, file_done: bool = False) -> None:
        with self._lock:
            self.done += n
            self.files_done += int(file_done)
            now = self.clock()
            if now - self._last >= self.interval or self.files_done == self.files:
                self._last = now
                log.info("%s", self.line(now))

    def line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta_text = f"{eta / 60:.1f} min" if eta != float("inf") else "?"
        return (
            f"staged {self.done / 1e9:.1f}/{self.total / 1e9:.1f} GB ({pct:.0f}%), "
            f"{rate / 1e9:.2f} GB/s, ETA {eta_text}, {self.files_done}/{self.files} files"
        )


def stage(
    *,
    s3: S3Client,
    bucket: str,
    prefix: str,
    dest: Path,
    workers: int = 16,
    reverify: bool = False,
    transfer_config: Any = None,
    progress_interval: float = 10.0,
) -> StageResult:
    started = time.monotonic()
    manifest = load_manifest(s3, bucket, prefix)
    dest.mkdir(parents=True, exist_ok=True)
    with _exclusive(dest / LOCK):
        if not reverify and _already_staged(dest, manifest):
            log.info(
                "already staged: %d files, %.1f GB match manifest %s in %s; nothing to download",
                len(manifest.files),
                manifest.total_bytes / 1e9,
                manifest.digest()[:12],
                dest,
            )
            return StageResult(True, 0, len(manifest.files), 0, 0, time.monotonic() - started)
        (dest / MARKER).unlink(missing_ok=True)
        removed = _remove_strays(dest, manifest)
        present = [f for f in manifest.files if _has_size(dest / f.path, f.size)]
        reused = _verify_present(dest, present, workers=workers)
        to_fetch = [f for f in manifest.files if f.path not in reused]
        need = sum(f.size for f in to_fetch)
        _check_space(dest, need)
        log.info(
            "staging %d files (%.1f GB) from s3://%s/%s to %s; %d files (%.1f GB) already verified",
            len(to_fetch),
            need / 1e9,
            bucket,
            prefix,
            dest,
            len(reused),
            (manifest.total_bytes - need) / 1e9,
        )
        progress = Progress(need, len(to_fetch), interval=progress_interval)

        def fetch(entry: FileEntry) -> None:
            _fetch_verified(s3, bucket, prefix, dest, entry, transfer_config)
            progress.add(entry.size, file_done=True)

        with ThreadPoolExecutor(max_workers=workers) as pool:
            for _ in pool.map(fetch, sorted(to_fetch, key=lambda f: -f.size)):
                pass
        _write_marker(dest, manifest)
    seconds = time.monotonic() - started
    log.info(
        "staged %d files (%.1f GB) in %.0f s; %d reused, %d stray files removed", len(to_fetch), need / 1e9, seconds, len(reused), removed
    )
    return StageResult(False, len(to_fetch), len(reused), removed, need, seconds)


@contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """One stager per directory, even if two pods ever share a node."""
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _has_size(path: Path, size: int) -> bool:
    return path.is_file() and path.stat().st_size == size


def _already_staged(dest: Path, manifest: Manifest) -> bool:
    try:
        marker = json.loads((dest / MARKER).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("manifest_sha256") != manifest.digest():
        return False
    return all(_has_size(dest / f.path, f.size) for f in manifest.files)


def _remove_strays(dest: Path, manifest: Manifest) -> int:
    """Files of an older revision or interrupted downloads would be loaded or fill the disk."""
    keep = {f.path for f in manifest.files} | {MARKER, LOCK}
    removed = 0
    for path in sorted(dest.rglob("*"), reverse=True):
        rel = path.relative_to(dest).as_posix()
        if path.is_file() and rel not in keep:
            log.info("removing %s (not in the manifest)", rel)
            path.unlink()
            removed += 1
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    return removed


def _verify_present(dest: Path, present: list[FileEntry], *, workers: int) -> set[str]:
    """Hash files already at their size; the ones that match are kept, the others re-fetched."""
    if not present:
        return set()
    log.info("verifying %d files already on disk (%.1f GB)", len(present), sum(f.size for f in present) / 1e9)

    def good(entry: FileEntry) -> bool:
        if sha256_file(dest / entry.path) == entry.sha256:
            return True
        log.warning("%s: sha256 differs from the manifest (corrupted); fetching it again", entry.path)
        return False

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return {entry.path for entry, ok in zip(present, pool.map(good, present), strict=True) if ok}


def _check_space(dest: Path, need: int) -> None:
    free = shutil.disk_usage(dest).free
    if free < need + FREE_SPACE_MARGIN:
        raise StagingError(
            f"{dest} has {free / 1e9:.0f} GB free but the checkpoint needs {need / 1e9:.0f} GB more (+{FREE_SPACE_MARGIN / 1e9:.0f} GB margin). "
            "Fix: check that the node's NVMe RAID0 is mounted at /mnt/k8s-disks/0 (nodeadm localStorage strategy RAID0)"
        )


def _fetch_verified(s3: S3Client, bucket: str, prefix: str, dest: Path, entry: FileEntry, transfer_config: Any) -> None:
    final = dest / entry.path
    partial = final.with_name(final.name + PARTIAL)
    final.parent.mkdir(parents=True, exist_ok=True)
    key = object_key(prefix, entry.path)
    for attempt in range(1, FETCH_ATTEMPTS + 1):
        partial.unlink(missing_ok=True)
        s3.download_file(bucket, key, str(partial), Config=transfer_config)
        size = partial.stat().st_size
        digest = sha256_file(partial) if size == entry.size else ""
        if digest == entry.sha256:
            os.replace(partial, final)
            return
        log.warning(
            "%s: downloaded %d bytes with sha256 %s, manifest says %d / %s (attempt %d)",
            entry.path,
            size,
            digest or "-",
            entry.size,
            entry.sha256,
            attempt,
        )
    partial.unlink(missing_ok=True)
    raise StagingError(
        f"s3://{bucket}/{key} does not match the manifest after {FETCH_ATTEMPTS} downloads. "
        f"Fix: run `pdkit weights verify`; if the bucket object is wrong, re-run `pdkit weights import`"
    )


def _write_marker(dest: Path, manifest: Manifest) -> None:
    body = {"manifest_sha256": manifest.digest(), "model": manifest.model, "revision": manifest.revision, "files": len(manifest.files)}
    tmp = dest / (MARKER + ".tmp")
    tmp.write_text(json.dumps(body, sort_keys=True) + "\n")
    os.replace(tmp, dest / MARKER)


def open_to_all(path: Path) -> None:
    """kubelet creates a hostPath volume's directory as root, mode 0755. The serving container runs as the
    image's user and writes its compile cache there; the stager is root without CAP_CHOWN (it cannot give
    the directory away) but owns it, so it can open it like /tmp: writable by all, sticky."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o1777)


def _transfer_config(part_concurrency: int, part_mib: int) -> Any:
    from boto3.s3.transfer import TransferConfig

    # "auto" lets boto3 use the AWS CRT transfer client where it is installed and the instance is one
    # it is tuned for (p5-class), which is what reaches the >= 5 GB/s per node design target.
    return TransferConfig(
        max_concurrency=part_concurrency,
        multipart_chunksize=part_mib * 1024 * 1024,
        multipart_threshold=part_mib * 1024 * 1024,
        preferred_transfer_client="auto",
    )


def _s3_client(region: str | None, connections: int) -> S3Client:
    import boto3
    from botocore.config import Config

    client: S3Client = boto3.client(
        "s3", region_name=region, config=Config(max_pool_connections=connections, retries={"mode": "adaptive", "max_attempts": 10})
    )
    return client


def main(argv: Sequence[str] | None = None, *, s3_factory: Callable[[str | None, int], S3Client] = _s3_client) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdkit.pods.staging", description=__doc__.splitlines()[0])
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--prefix", required=True, help="the model's folder in the bucket, ending with /")
    parser.add_argument("--dest", required=True, type=Path, help="directory on the node-local volume")
    parser.add_argument("--region", default=os.environ.get("AWS_REGION"))
    parser.add_argument("--workers", type=int, default=16, help="files downloaded at once")
    parser.add_argument("--part-concurrency", type=int, default=8, help="ranged GETs per file")
    parser.add_argument("--part-mib", type=int, default=64)
    parser.add_argument("--reverify", action="store_true", help="hash every staged file even when the marker matches")
    parser.add_argument(
        "--shared-dir", type=Path, action="append", default=[], help="a node-local directory the serving user must write (mode 1777)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout, force=True)
    for shared in args.shared_dir:
        open_to_all(shared)
    s3 = s3_factory(args.region, args.workers * args.part_concurrency + 8)
    try:
        stage(
            s3=s3,
            bucket=args.bucket,
            prefix=args.prefix,
            dest=args.dest,
            workers=args.workers,
            reverify=args.reverify,
            transfer_config=_transfer_config(args.part_concurrency, args.part_mib),
        )
    except (StagingError, ManifestError) as exc:
        print(f"pdkit staging: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
