"""Staging (the init container before SGLang, pdkit/pods/staging.py), property by property.

Its log lines are read by people following `kubectl logs` and by the start-up timeline (pdkit/ops/timeline/marks.py
matches "staging N files (", "already staged: N files" and "staged N files (X GB) in S s" on their exact text),
so the messages are asserted whole. Gigabyte figures need gigabyte files: `Checkpoint` below stands in for S3
with sparse files of the manifest's sizes (no disk used) and a digest table instead of hashing them; the
moto-backed tests (test_serving_weights.py) cover the real download and hash path.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import namedtuple
from pathlib import Path

import pytest

from pdkit.ops.timeline.marks import log_marks
from pdkit.pods import staging
from pdkit.pods.staging import MARKER, PARTIAL, Progress, StageResult, StagingError
from pdkit.pods.weights_manifest import FileEntry, Manifest, sha256_file
from tests.fixtures.weights import BUCKET, FILES, PREFIX, REGION, run_stage

# snapshot_dir, s3 (moto), imported
pytest_plugins = ["tests.fixtures.weights_fixtures"]

GB = 10**9
Usage = namedtuple("Usage", "total used free")


def messages(caplog, level=logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "pdkit.staging" and r.levelno >= level]


class Checkpoint:
    """An S3 prefix holding `sizes` (path -> bytes) as sparse objects: download_file writes a sparse file of the
    object's size, and sha256_file answers from a digest table for these paths (hashing 100 GB takes minutes)."""

    def __init__(self, monkeypatch, sizes: dict[str, int], *, delay: float = 0.0):
        self.files = tuple(FileEntry(path, size, f"{i + 1:064x}") for i, (path, size) in enumerate(sizes.items()))
        self.manifest = Manifest(model="zai-org/GLM-5.1-FP8", revision="abc123", files=self.files)
        self.digests = {f.path: f.sha256 for f in self.files}
        self.downloads: list[tuple[str, object]] = []
        self.delay = delay
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()
        monkeypatch.setattr(staging, "load_manifest", lambda client, bucket, prefix: self.manifest)
        monkeypatch.setattr(staging, "sha256_file", self.sha256_file)
        monkeypatch.setattr(staging.shutil, "disk_usage", lambda p: Usage(4000 * GB, 0, 4000 * GB))

    def _busy(self, seconds: float) -> None:
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(seconds)
        with self._lock:
            self.in_flight -= 1

    def sha256_file(self, path: Path) -> str:
        self._busy(self.delay)
        rel = path.name.removesuffix(PARTIAL)
        return next(digest for p, digest in self.digests.items() if p.endswith(rel))

    def download_file(self, Bucket, Key, Filename, ExtraArgs=None, Config=None):
        self.downloads.append((Key, Config))
        self._busy(self.delay)
        rel = Key.removeprefix(PREFIX)
        with open(Filename, "wb") as f:
            f.truncate(next(e.size for e in self.files if e.path == rel))

    def place(self, dest: Path, path: str) -> None:
        """The file already on the node at its size (a previous, interrupted run)."""
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        with open(dest / path, "wb") as f:
            f.truncate(next(e.size for e in self.files if e.path == path))


def stage_from(ckpt: Checkpoint, dest: Path, **kw) -> StageResult:
    return staging.stage(s3=ckpt, bucket=BUCKET, prefix=PREFIX, dest=dest, **{"workers": 4, "progress_interval": 0, **kw})


SHARDS = {"model-00001-of-00002.safetensors": 120_340_000_000, "model-00002-of-00002.safetensors": 30_560_000_000}


# --- what staging logs and returns ----------------------------------------------------------------


def test_a_partly_staged_node_logs_what_it_verifies_fetches_and_took(monkeypatch, tmp_path, caplog):
    """The second shard survived an interrupted run: it is hashed and kept, the first is fetched; each line gives
    the figures of its own part (the verified GB are the checkpoint minus what is fetched)."""
    ckpt = Checkpoint(monkeypatch, SHARDS)
    dest = tmp_path / "glm"
    ckpt.place(dest, "model-00002-of-00002.safetensors")
    with caplog.at_level(logging.INFO, logger="pdkit.staging"):
        result = stage_from(ckpt, dest)
    lines = messages(caplog)
    assert lines[0] == "verifying 1 files already on disk (30.6 GB)"
    assert lines[1] == f"staging 1 files (120.3 GB) from s3://{BUCKET}/{PREFIX} to {dest}; 1 files (30.6 GB) already verified"
    assert re.fullmatch(r"staged 120\.3/120\.3 GB \(100%\), [\d.]+ GB/s, ETA 0\.0 min, 1/1 files", lines[2])
    assert re.fullmatch(r"staged 1 files \(120\.3 GB\) in \d s; 1 reused, 0 stray files removed", lines[3])
    assert len(lines) == 4
    assert result.skipped is False
    assert (result.fetched, result.reused, result.removed, result.bytes_fetched) == (1, 1, 0, 120_340_000_000)
    assert 0 <= result.seconds < 60


def test_an_already_staged_node_logs_the_shortcut_and_returns_its_counts(monkeypatch, tmp_path, caplog):
    ckpt = Checkpoint(monkeypatch, SHARDS)
    dest = tmp_path / "glm"
    stage_from(ckpt, dest)
    ckpt.downloads.clear()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pdkit.staging"):
        result = stage_from(ckpt, dest)
    assert messages(caplog) == [
        f"already staged: 2 files, 150.9 GB match manifest {ckpt.manifest.digest()[:12]} in {dest}; nothing to download"
    ]
    assert ckpt.downloads == []
    assert (result.skipped, result.fetched, result.reused, result.removed, result.bytes_fetched) == (True, 0, 2, 0, 0)
    assert 0 <= result.seconds < 60


def test_the_start_up_timeline_finds_the_stagers_lines(monkeypatch, tmp_path, caplog):
    """pdkit/ops/timeline/marks.py reads "staging", "staged ... in S s" and "already staged" from the pod's log
    (each line prefixed by the time Kubernetes recorded): a reworded line would drop the staging span."""
    ckpt = Checkpoint(monkeypatch, SHARDS)
    dest = tmp_path / "glm"
    with caplog.at_level(logging.INFO, logger="pdkit.staging"):
        stage_from(ckpt, dest)
        stage_from(ckpt, dest)
    logged = [f"2026-12-01T10:00:{i:02d}.000000000Z {m}" for i, m in enumerate(messages(caplog))]
    assert [m.kind for m in log_marks(logged)] == ["stage_begin", "stage_end", "stage_skip"]


def test_the_largest_files_are_fetched_first(monkeypatch, tmp_path):
    """The biggest shard started last would be the long tail of the whole init container."""
    sizes = {
        "small.json": 10,
        "model-00002-of-00003.safetensors": 5 * GB,
        "model-00001-of-00003.safetensors": 9 * GB,
        "tokenizer.json": 100,
    }
    ckpt = Checkpoint(monkeypatch, sizes)
    stage_from(ckpt, tmp_path / "glm", workers=1)
    assert [key.removeprefix(PREFIX) for key, _ in ckpt.downloads] == [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "tokenizer.json",
        "small.json",
    ]


def test_workers_bound_the_downloads_in_flight(monkeypatch, tmp_path):
    """--workers is the number of files fetched at once (each with its own ranged parts): one means one."""
    ckpt = Checkpoint(monkeypatch, {f"model-0000{i}-of-00004.safetensors": GB for i in range(1, 5)}, delay=0.05)
    stage_from(ckpt, tmp_path / "glm", workers=1)
    assert ckpt.most_in_flight == 1
    assert len(ckpt.downloads) == 4


def test_workers_bound_the_hashing_of_files_already_there(monkeypatch, tmp_path):
    ckpt = Checkpoint(monkeypatch, {f"model-0000{i}-of-00004.safetensors": GB for i in range(1, 5)}, delay=0.05)
    dest = tmp_path / "glm"
    for entry in ckpt.files:
        ckpt.place(dest, entry.path)
    result = stage_from(ckpt, dest, workers=1)
    assert result.reused == 4
    assert ckpt.most_in_flight == 1


def test_every_download_uses_the_transfer_config(monkeypatch, tmp_path):
    """The TransferConfig carries the part size and the ranged GETs per file (the >= 5 GB/s design target)."""
    ckpt = Checkpoint(monkeypatch, SHARDS)
    config = object()
    stage_from(ckpt, tmp_path / "glm", transfer_config=config)
    assert [c for _, c in ckpt.downloads] == [config, config]


def test_progress_is_logged_every_ten_seconds_by_default(monkeypatch, tmp_path):
    """main() passes no interval: the init container's log shows a progress line every 10 s."""
    made = []

    class Recorded(Progress):
        def __init__(self, total, files, *, interval, **kw):
            made.append((total, files, interval))
            super().__init__(total, files, interval=interval, **kw)

    monkeypatch.setattr(staging, "Progress", Recorded)
    ckpt = Checkpoint(monkeypatch, SHARDS)
    staging.stage(s3=ckpt, bucket=BUCKET, prefix=PREFIX, dest=tmp_path / "glm", workers=2)
    assert made == [(150_900_000_000, 2, 10.0)]


def test_a_file_deep_in_the_checkpoint_gets_its_directories(monkeypatch, tmp_path):
    """Manifest paths may nest (tokenizer/…, a sub-model's folder): the parents are made on the way."""
    ckpt = Checkpoint(monkeypatch, {"draft/tokenizer/vocab.json": 7, "config.json": 3})
    dest = tmp_path / "glm"
    stage_from(ckpt, dest)
    assert (dest / "draft" / "tokenizer" / "vocab.json").stat().st_size == 7


def test_the_marker_records_which_manifest_the_directory_holds(s3, imported, tmp_path):
    """A sorted, one-line JSON record an operator can read on the node (`cat .pdkit-staged.json`)."""
    dest = tmp_path / "glm"
    run_stage(s3, dest)
    body = {"files": len(FILES), "manifest_sha256": imported.digest(), "model": "zai-org/GLM-5.1-FP8", "revision": "abc123"}
    assert (dest / MARKER).read_text() == json.dumps(body) + "\n"
    assert sorted(p.name for p in dest.iterdir() if p.name.startswith(".pdkit")) == [MARKER, staging.LOCK]


def test_stray_files_are_named_as_they_are_removed(s3, imported, tmp_path, caplog):
    dest = tmp_path / "glm"
    (dest / "old").mkdir(parents=True)
    (dest / "old" / "model-00001-of-00009.safetensors").write_bytes(b"old")
    with caplog.at_level(logging.INFO, logger="pdkit.staging"):
        run_stage(s3, dest)
    assert "removing old/model-00001-of-00009.safetensors (not in the manifest)" in messages(caplog)


def test_a_corrupted_file_is_named_in_a_warning(s3, imported, tmp_path, caplog):
    dest = tmp_path / "glm"
    run_stage(s3, dest)
    (dest / MARKER).unlink()
    (dest / "config.json").write_bytes(b"x" * len(FILES["config.json"]))
    with caplog.at_level(logging.WARNING, logger="pdkit.staging"):
        run_stage(s3, dest)
    assert messages(caplog, logging.WARNING) == ["config.json: sha256 differs from the manifest (corrupted); fetching it again"]


@pytest.mark.parametrize("body", ["short", "same size"])
def test_a_bad_download_is_logged_with_both_sizes_and_digests(s3, imported, tmp_path, caplog, body):
    """A download of the wrong size is not hashed ("-"); one of the right size shows the digest it has."""
    good = FILES["config.json"]
    bad = b"{}" if body == "short" else bytes(reversed(good))
    s3.put_object(Bucket=BUCKET, Key=PREFIX + "config.json", Body=bad)
    expected = next(f for f in imported.files if f.path == "config.json").sha256
    shown = "-" if body == "short" else sha256_file_of(bad, tmp_path)
    with caplog.at_level(logging.WARNING, logger="pdkit.staging"), pytest.raises(StagingError):
        run_stage(s3, tmp_path / "glm")
    assert messages(caplog, logging.WARNING) == [
        f"config.json: downloaded {len(bad)} bytes with sha256 {shown}, manifest says {len(good)} / {expected} (attempt {n})"
        for n in (1, 2)
    ]


def sha256_file_of(data: bytes, tmp_path: Path) -> str:
    path = tmp_path / "probe"
    path.write_bytes(data)
    return sha256_file(path)


# --- free space -------------------------------------------------------------------------------------


def test_no_room_names_free_space_need_and_margin(monkeypatch, tmp_path):
    monkeypatch.setattr(staging.shutil, "disk_usage", lambda p: Usage(3840 * GB, 3000 * GB, 700 * GB))
    with pytest.raises(StagingError) as err:
        staging._check_space(tmp_path, 760 * GB)
    assert str(err.value) == (
        f"{tmp_path} has 700 GB free but the checkpoint needs 760 GB more (+20 GB margin). "
        "Fix: check that the node's NVMe RAID0 is mounted at /mnt/k8s-disks/0 (nodeadm localStorage strategy RAID0)"
    )


def test_exactly_the_checkpoint_plus_the_margin_is_room_enough(monkeypatch, tmp_path):
    monkeypatch.setattr(staging.shutil, "disk_usage", lambda p: Usage(3840 * GB, 0, 780 * GB))
    staging._check_space(tmp_path, 760 * GB)
    monkeypatch.setattr(staging.shutil, "disk_usage", lambda p: Usage(3840 * GB, 0, 780 * GB - 1))
    with pytest.raises(StagingError):
        staging._check_space(tmp_path, 760 * GB)


# --- progress ---------------------------------------------------------------------------------------


def clocked(total: int, files: int, *, start: float = 100.0, interval: float = 10.0):
    now = [start]
    return Progress(total, files, interval=interval, clock=lambda: now[0]), now


def test_progress_counts_every_byte_and_file_added(caplog):
    progress, now = clocked(760 * GB, 152)
    now[0] = 110.0
    with caplog.at_level(logging.INFO, logger="pdkit.staging"):
        progress.add(3 * GB, file_done=True)
        now[0] = 120.0
        progress.add(2 * GB, file_done=True)
        now[0] = 130.0
        progress.add(GB)
    assert (progress.done, progress.files_done) == (6 * GB, 2)
    assert messages(caplog)[-1] == "staged 6.0/760.0 GB (1%), 0.20 GB/s, ETA 62.8 min, 2/152 files"


def test_progress_is_quiet_until_the_interval_has_passed(caplog):
    """One line every `interval` seconds (measured from the last line), whatever the clock's origin."""
    progress, now = clocked(760 * GB, 152)
    with caplog.at_level(logging.INFO, logger="pdkit.staging"):
        now[0] = 109.9
        progress.add(GB, file_done=True)
        assert messages(caplog) == []
        now[0] = 110.0
        progress.add(GB, file_done=True)
        assert len(messages(caplog)) == 1
        now[0] = 115.0
        progress.add(GB, file_done=True)
        assert len(messages(caplog)) == 1


def test_the_last_file_is_always_reported(caplog):
    progress, now = clocked(2 * GB, 2)
    with caplog.at_level(logging.INFO, logger="pdkit.staging"):
        now[0] = 101.0
        progress.add(GB, file_done=True)
        now[0] = 102.0
        progress.add(GB, file_done=True)
    assert messages(caplog) == ["staged 2.0/2.0 GB (100%), 1.00 GB/s, ETA 0.0 min, 2/2 files"]


@pytest.mark.parametrize(
    ("elapsed", "done", "line"),
    [
        (0.0, 0, "staged 0.0/760.0 GB (0%), 0.00 GB/s, ETA ?, 0/152 files"),  # nothing yet: no rate, no ETA
        (0.5, GB, "staged 1.0/760.0 GB (0%), 2.00 GB/s, ETA 6.3 min, 0/152 files"),  # under a second
        (10.0, 1, "staged 0.0/760.0 GB (0%), 0.00 GB/s, ETA 126666666666.5 min, 0/152 files"),  # a trickle still has an ETA
        (76.0, 380 * GB, "staged 380.0/760.0 GB (50%), 5.00 GB/s, ETA 1.3 min, 0/152 files"),
    ],
)
def test_progress_line_rate_and_eta(elapsed, done, line):
    progress, _ = clocked(760 * GB, 152)
    progress.done = done
    assert progress.line(100.0 + elapsed) == line


def test_progress_of_nothing_to_fetch_is_complete():
    progress, _ = clocked(0, 0)
    assert progress.line(100.0) == "staged 0.0/0.0 GB (100%), 0.00 GB/s, ETA ?, 0/0 files"


def test_eta_in_minutes():
    progress, _ = clocked(760 * GB, 152)
    progress.done = 160 * GB
    assert progress.line(100.0 + 160.0) == "staged 160.0/760.0 GB (21%), 1.00 GB/s, ETA 10.0 min, 0/152 files"


# --- the entry point ----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _root_logging():
    """main() configures the root logger for the pod's stdout; later tests must not log into a closed capture."""
    handlers, level = logging.root.handlers[:], logging.root.level
    yield
    logging.root.handlers[:], logging.root.level = handlers, level


@pytest.fixture
def staged(monkeypatch):
    """main() with stage() replaced: the arguments it receives, and those of the S3 client factory."""
    calls: dict[str, object] = {}
    monkeypatch.setattr(staging, "stage", lambda **kw: calls.update(kw))

    def factory(region, connections):
        calls["client"] = (region, connections)
        return "client"

    return calls, factory


def test_the_init_container_defaults(staged, monkeypatch, tmp_path):
    """16 files at once, 8 ranged GETs of 64 MiB each, a connection pool for all of them plus 8, the region from
    AWS_REGION when no --region is given (EKS Pod Identity and IRSA set it in the pod)."""
    calls, factory = staged
    monkeypatch.setenv("AWS_REGION", "eu-south-2")
    assert staging.main(["--bucket", BUCKET, "--prefix", PREFIX, "--dest", str(tmp_path / "m")], s3_factory=factory) == 0
    config = calls.pop("transfer_config")
    assert calls == {
        "client": ("eu-south-2", 16 * 8 + 8),
        "s3": "client",
        "bucket": BUCKET,
        "prefix": PREFIX,
        "dest": tmp_path / "m",
        "workers": 16,
        "reverify": False,
    }
    assert (config.max_concurrency, config.multipart_chunksize, config.multipart_threshold) == (8, 64 * 2**20, 64 * 2**20)


def test_the_init_container_options(staged, tmp_path):
    calls, factory = staged
    argv = ["--bucket", BUCKET, "--prefix", PREFIX, "--dest", str(tmp_path / "m"), "--region", REGION]
    argv += ["--workers", "3", "--part-concurrency", "5", "--part-mib", "16", "--reverify"]
    assert staging.main(argv, s3_factory=factory) == 0
    config = calls["transfer_config"]
    assert calls["client"] == (REGION, 3 * 5 + 8)
    assert (calls["workers"], calls["reverify"]) == (3, True)
    assert (config.max_concurrency, config.multipart_chunksize, config.multipart_threshold) == (5, 16 * 2**20, 16 * 2**20)


@pytest.mark.parametrize("missing", ["--bucket", "--prefix", "--dest"])
def test_bucket_prefix_and_dest_are_required(staged, tmp_path, capsys, missing):
    calls, factory = staged
    args = {"--bucket": BUCKET, "--prefix": PREFIX, "--dest": str(tmp_path / "m")}
    argv = [part for flag, value in args.items() if flag != missing for part in (flag, value)]
    with pytest.raises(SystemExit) as exit_:
        staging.main(argv, s3_factory=factory)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m pdkit.pods.staging ")
    assert f"the following arguments are required: {missing}" in err
    assert calls == {}


def test_the_pod_log_gets_timestamped_info_lines_on_stdout(s3, imported, tmp_path, capsys):
    """kubectl logs shows the init container's stdout; the time on each line lets an operator read the rate.
    force=True: whatever configured the root logger before (here pytest), staging's lines still get out."""
    logging.root.setLevel(logging.WARNING)  # as in the init container's fresh interpreter
    argv = ["--bucket", BUCKET, "--prefix", PREFIX, "--dest", str(tmp_path / "glm"), "--region", REGION, "--workers", "2"]
    assert staging.main(argv, s3_factory=lambda region, n: s3) == 0
    out, err = capsys.readouterr()
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} "
    assert re.match(stamp + r"staging 5 files \(0\.0 GB\) from s3://", out)
    assert re.search(r"^" + stamp + r"staged 5 files \(0\.0 GB\) in \d+ s; 0 reused, 0 stray files removed$", out, re.M)
    assert "staging 5 files" not in err


def test_the_transfer_config_asks_for_the_crt_client_where_it_fits():
    """boto3 TransferConfig(preferred_transfer_client="auto") uses the AWS CRT S3 client when awscrt is installed
    and the instance type is one it is optimized for (boto3 docs, S3 transfers); "classic" would never."""
    config = staging._transfer_config(8, 64)
    assert config.preferred_transfer_client == "auto"
    assert (config.max_concurrency, config.multipart_chunksize, config.multipart_threshold) == (8, 64 * 2**20, 64 * 2**20)


def test_the_s3_client_pools_a_connection_per_part_and_retries_adaptively():
    """botocore Config: max_pool_connections (default 10) would throttle 16 files x 8 parts; retries mode adaptive
    with 10 attempts rides out S3 503 SlowDown (https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html)."""
    client = staging._s3_client("eu-south-2", 136)
    assert client.meta.service_model.service_name == "s3"
    assert client.meta.region_name == "eu-south-2"
    assert client.meta.config.max_pool_connections == 136
    # botocore stores max_attempts (retries) as total_max_attempts = max_attempts + 1 (the first call counts).
    assert client.meta.config.retries == {"mode": "adaptive", "total_max_attempts": 11}


def test_a_shared_dir_is_made_with_its_parents(tmp_path):
    """--shared-dir may name a cache below a directory kubelet has not created yet."""
    shared = tmp_path / "k8s-disks" / "0" / "cache"
    staging.open_to_all(shared)
    assert shared.stat().st_mode & 0o7777 == 0o1777
