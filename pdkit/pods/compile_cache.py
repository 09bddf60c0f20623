"""SGLang's compile cache (SGLANG_CACHE_DIR: DeepGEMM, Triton, inductor, FlashInfer JIT) across blocks.

    python -m pdkit.pods.compile_cache warm --bucket B --key K --dir D --timeout S -- <compile argv>
    python -m pdkit.pods.compile_cache save --bucket B --key K --dir D

`warm` runs as an init container on every node of a group, before SGLang starts:
- the cache directory is on the node's NVMe (a PersistentVolume), so a restarted group finds it warm;
- when it is cold (no marker for this key), it restores the archive a previous block saved to the
  weights bucket, if there is one;
- when it is still cold, it runs SGLang's DeepGEMM precompile (`python -m sglang.compile_deep_gemm` with
  the role's own server arguments, so on every node of the group at the full EP size), writes the
  marker, and the group's leader saves the archive at once;
- a precompile that fails or runs out of time is logged and skipped: the server then compiles the same
  kernels itself, inside the first-boot budget of its start-up probe.

`save` is the serving container's preStop hook on the leader: the end-of-block drain deletes the pods
(pdkit/render/serving/drain.py), and kubelet runs preStop before it stops the container. It uploads only when
the cache changed since it was restored or last saved (kernels SGLang JIT-compiled while serving).

The key (pdkit/render/serving/manifests.py) hashes the SGLang version, the image and the role's command line:
a cache is only ever reused by the exact server that built it.

Imports only the standard library and boto3, so the serving image needs nothing else from pdkit.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

# The node-local cache volume inside the pod; each role's SGLANG_CACHE_DIR is a directory under it.
CACHE_ROOT = "/var/cache/pdkit"
MARKER_PREFIX = ".pdkit-precompiled-"
SAVED_PREFIX = ".pdkit-saved-"
# LeaderWorkerSet's index of this pod in its group; the leader (0) is the only one that uploads.
WORKER_INDEX_ENV = "LWS_WORKER_INDEX"

log = logging.getLogger("pdkit.compile_cache")


class CacheS3(Protocol):
    """The S3 calls this module makes (a boto3 S3 client satisfies it)."""

    def head_object(self, **kwargs: Any) -> dict[str, Any]: ...
    def upload_file(self, Filename: str, Bucket: str, Key: str, ExtraArgs: dict[str, Any] | None = ..., Config: Any = ...) -> None: ...
    def download_file(self, Bucket: str, Key: str, Filename: str, ExtraArgs: dict[str, Any] | None = ..., Config: Any = ...) -> None: ...


def role_cache_dir(role: str) -> str:
    """SGLANG_CACHE_DIR of a role's pods (Triton, inductor, DeepGEMM and FlashInfer JIT follow it)."""
    return f"{CACHE_ROOT}/{role}"


def cache_key(*parts: str) -> str:
    """A short, stable hash of what produced the cache (SGLang version, image, command line)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def marker(cache_dir: Path, key: str) -> Path:
    return cache_dir / f"{MARKER_PREFIX}{key}"


def is_warm(cache_dir: Path, key: str) -> bool:
    return marker(cache_dir, key).is_file()


def fingerprint(cache_dir: Path) -> str:
    """Names, sizes and mtimes of every file except the kit's own bookkeeping: changes when SGLang adds a kernel."""
    h = hashlib.sha256()
    for path in sorted(p for p in cache_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(cache_dir).as_posix()
        if rel.startswith(SAVED_PREFIX):
            continue
        st = path.stat()
        h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _record_saved(cache_dir: Path, key: str) -> None:
    (cache_dir / f"{SAVED_PREFIX}{key}").write_text(fingerprint(cache_dir) + "\n")


def _unchanged_since_saved(cache_dir: Path, key: str) -> bool:
    try:
        return (cache_dir / f"{SAVED_PREFIX}{key}").read_text().strip() == fingerprint(cache_dir)
    except OSError:
        return False


def _not_found(exc: Exception) -> bool:
    response = getattr(exc, "response", None)
    code = str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""
    return code in {"404", "NoSuchKey", "NotFound"}


def restore(s3: CacheS3, bucket: str, key: str, cache_dir: Path, object_key: str) -> bool:
    """Fetch and unpack a saved archive into cache_dir; False when there is none yet (first block)."""
    try:
        s3.head_object(Bucket=bucket, Key=object_key)
    except Exception as exc:
        if _not_found(exc):
            log.info("no saved compile cache at s3://%s/%s: this is a first boot", bucket, object_key)
            return False
        raise
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir.parent) as tmp:
        archive = Path(tmp) / "cache.tar"
        s3.download_file(bucket, object_key, str(archive))
        with tarfile.open(archive) as tar:
            # "data" refuses absolute paths, links out of the directory and device files.
            tar.extractall(cache_dir, filter="data")
    _record_saved(cache_dir, key)
    log.info("restored the compile cache from s3://%s/%s into %s", bucket, object_key, cache_dir)
    return is_warm(cache_dir, key)


def save(s3: CacheS3, bucket: str, key: str, cache_dir: Path, object_key: str) -> bool:
    """Upload cache_dir as one archive; False (nothing uploaded) when it is cold or unchanged."""
    if not is_warm(cache_dir, key):
        log.info("%s holds no complete compile cache for %s; nothing to save", cache_dir, key)
        return False
    if _unchanged_since_saved(cache_dir, key):
        log.info("compile cache unchanged since it was restored or saved; nothing to upload")
        return False
    with tempfile.TemporaryDirectory(dir=cache_dir.parent) as tmp:
        archive = Path(tmp) / "cache.tar"
        with tarfile.open(archive, "w") as tar:
            for path in sorted(cache_dir.iterdir()):
                if not path.name.startswith(SAVED_PREFIX):
                    tar.add(path, arcname=path.name)
        s3.upload_file(str(archive), bucket, object_key)
    _record_saved(cache_dir, key)
    log.info("saved the compile cache to s3://%s/%s", bucket, object_key)
    return True


Runner = Callable[[Sequence[str], float], int]


def _run(argv: Sequence[str], timeout: float) -> int:
    try:
        return subprocess.run(list(argv), timeout=timeout, check=False).returncode  # noqa: S603 - the kit's own rendered command
    except subprocess.TimeoutExpired:
        return -1


def warm(
    s3: CacheS3,
    *,
    bucket: str,
    key: str,
    cache_dir: Path,
    object_key: str,
    compile_argv: Sequence[str],
    timeout: float,
    leader: bool,
    run: Runner = _run,
) -> str:
    """Make the cache warm for `key`; returns what happened: "warm", "restored", "compiled" or "cold"."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    if is_warm(cache_dir, key):
        log.info("compile cache %s is warm on this node; skipping the DeepGEMM precompile", key)
        return "warm"
    if restore(s3, bucket, key, cache_dir, object_key):
        return "restored"
    started = time.monotonic()
    log.info("cold compile cache: running the DeepGEMM precompile (up to %.0f min): %s", timeout / 60, " ".join(compile_argv))
    code = run(compile_argv, timeout)
    minutes = (time.monotonic() - started) / 60
    if code != 0:
        # Not fatal: SGLang compiles the same kernels at start-up (SGLANG_JIT_DEEPGEMM_PRECOMPILE), inside
        # the start-up probe's first-boot budget; failing here would only make LeaderWorkerSet retry the group.
        log.warning(
            "the DeepGEMM precompile %s after %.1f min; the server will compile at start-up instead",
            "timed out" if code == -1 else f"exited {code}",
            minutes,
        )
        return "cold"
    marker(cache_dir, key).write_text(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
    log.info("DeepGEMM precompile finished in %.1f min", minutes)
    if leader:
        save(s3, bucket, key, cache_dir, object_key)
    return "compiled"


def _s3_client(region: str | None) -> CacheS3:
    import boto3

    client: CacheS3 = boto3.client("s3", region_name=region)
    return client


def main(argv: Sequence[str] | None = None, *, s3_factory: Callable[[str | None], CacheS3] = _s3_client, run: Runner = _run) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdkit.pods.compile_cache", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["warm", "save"])
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--key", required=True, help="the role's cache key (SGLang version, image, command line)")
    parser.add_argument("--object-key", required=True, help="the archive's S3 key")
    parser.add_argument("--dir", required=True, type=Path, help="SGLANG_CACHE_DIR on the node-local volume")
    parser.add_argument("--region", default=os.environ.get("AWS_REGION"))
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds the precompile may take")
    parser.epilog = "warm: the precompile command follows --"
    given = list(sys.argv[1:] if argv is None else argv)
    split = given.index("--") if "--" in given else len(given)
    args = parser.parse_args(given[:split])
    compile_argv = given[split + 1 :]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout, force=True)
    leader = os.environ.get(WORKER_INDEX_ENV, "0") == "0"
    s3 = s3_factory(args.region)
    try:
        if args.action == "save":
            if leader:
                save(s3, args.bucket, args.key, args.dir, args.object_key)
            return 0
        if not compile_argv:
            print("pdkit compile_cache: error: warm needs the precompile command after --", file=sys.stderr)
            return 2
        warm(
            s3,
            bucket=args.bucket,
            key=args.key,
            cache_dir=args.dir,
            object_key=args.object_key,
            compile_argv=compile_argv,
            timeout=args.timeout,
            leader=leader,
            run=run,
        )
    except Exception as exc:
        # Any failure (S3, disk, archive): a cache problem must never keep SGLang from starting or stopping.
        print(f"pdkit compile_cache: {args.action} skipped: {exc}. SGLang will compile at start-up (slower first boot)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
