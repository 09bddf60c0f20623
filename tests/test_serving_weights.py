"""Weights: manifest format, import of a snapshot into S3, and staging onto the node, all offline (moto S3)."""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
from collections import namedtuple

import pytest

from pdkit.pods import staging, weights_manifest
from pdkit.pods.staging import MARKER, Progress, StagingError
from pdkit.pods.weights_manifest import FileEntry, Manifest, ManifestError, import_snapshot, load_manifest, verify_bucket
from tests.fixtures.weights import BUCKET, FILES, PREFIX, REGION, run_stage, sha

# snapshot_dir, s3 (moto), imported
pytest_plugins = ["tests.fixtures.weights_fixtures"]

# --- manifest -------------------------------------------------------------------------------------


def test_manifest_lists_every_model_file_with_size_and_sha256(snapshot_dir):
    manifest = weights_manifest.scan_snapshot(snapshot_dir, model="zai-org/GLM-5.1-FP8", revision="abc123")
    assert {f.path: (f.size, f.sha256) for f in manifest.files} == {rel: (len(d), sha(d)) for rel, d in FILES.items()}
    assert manifest.total_bytes == sum(len(d) for d in FILES.values())


def test_manifest_round_trips_and_its_digest_is_stable(s3, imported):
    """The digest staging records is the sha256 of the manifest object as stored (what `sha256sum` of
    `aws s3 cp s3://.../manifest.json -` prints), whatever the order of the files; any file's hash changes it."""
    stored = s3.get_object(Bucket=BUCKET, Key=PREFIX + weights_manifest.MANIFEST_NAME)["Body"].read()
    assert imported.digest() == hashlib.sha256(stored).hexdigest()
    again = Manifest.from_json(stored)
    assert again == Manifest(model=imported.model, revision=imported.revision, files=tuple(sorted(imported.files, key=lambda f: f.path)))
    reordered = Manifest(model=imported.model, revision=imported.revision, files=tuple(reversed(imported.files)))
    assert reordered.digest() == imported.digest()
    first, *rest = again.files
    changed = Manifest(model=again.model, revision=again.revision, files=(FileEntry(first.path, first.size, "f" * 64), *rest))
    assert changed.digest() != imported.digest()


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ([{"path": "../etc/passwd", "size": 1, "sha256": "0" * 64}], "plain relative path"),
        ([{"path": "/abs", "size": 1, "sha256": "0" * 64}], "plain relative path"),
        ([{"path": "a", "size": -1, "sha256": "0" * 64}], "byte count"),
        ([{"path": "a", "size": 1, "sha256": "XYZ"}], "64 lowercase hex"),
        ([{"path": "a", "size": 1, "sha256": "0" * 64}] * 2, "listed twice"),
        ([], "lists no files"),
    ],
)
def test_an_untrustworthy_manifest_is_refused(files, message):
    body = {"format": weights_manifest.FORMAT, "model": "m", "revision": "r", "files": files, "total_bytes": sum(f["size"] for f in files)}
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(json.dumps(body))


def test_a_manifest_whose_total_does_not_add_up_is_refused():
    body = {"format": weights_manifest.FORMAT, "files": [{"path": "a", "size": 1, "sha256": "0" * 64}], "total_bytes": 2}
    with pytest.raises(ManifestError, match="does not add up"):
        Manifest.from_json(json.dumps(body))


# --- import ---------------------------------------------------------------------------------------


def test_import_uploads_files_with_their_checksum_then_the_manifest(s3, imported):
    for rel, data in FILES.items():
        head = s3.head_object(Bucket=BUCKET, Key=PREFIX + rel)
        assert head["ContentLength"] == len(data)
        assert head["Metadata"]["sha256"] == sha(data)
    assert load_manifest(s3, BUCKET, PREFIX) == Manifest.from_json(imported.to_json())
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert not any(".cache" in k or ".gitattributes" in k for k in keys)


def test_import_resumes_without_uploading_again(s3, snapshot_dir, imported, monkeypatch):
    calls = []
    monkeypatch.setattr(s3.client, "upload_file", lambda *a, **k: calls.append(a))
    import_snapshot(snapshot_dir, s3=s3, bucket=BUCKET, prefix=PREFIX, model="zai-org/GLM-5.1-FP8", revision="abc123")
    assert calls == []


def test_verify_finds_missing_and_altered_objects(s3, imported):
    assert verify_bucket(imported, s3=s3, bucket=BUCKET, prefix=PREFIX) == []
    s3.delete_object(Bucket=BUCKET, Key=PREFIX + "config.json")
    s3.put_object(Bucket=BUCKET, Key=PREFIX + "tokenizer/tokenizer.json", Body=b"tampered", Metadata={"sha256": "0" * 64})
    problems = verify_bucket(imported, s3=s3, bucket=BUCKET, prefix=PREFIX)
    assert problems == ["config.json: missing", "tokenizer/tokenizer.json: 8 bytes in the bucket, 13 in the manifest"]


def test_weights_cli_verify_exit_codes(s3, imported, capsys):
    argv = ["verify", "--bucket", BUCKET, "--prefix", PREFIX, "--region", REGION]
    assert weights_manifest.main(argv, s3_factory=lambda region, n: s3) == 0
    assert "match manifest" in capsys.readouterr().out
    assert weights_manifest.main(["verify", "--bucket", BUCKET, "--prefix", "nothing/"], s3_factory=lambda r, n: s3) == 1
    assert "run `pdkit weights import` first" in capsys.readouterr().err


# --- staging --------------------------------------------------------------------------------------


def test_stage_downloads_and_verifies_every_file(s3, imported, tmp_path):
    dest = tmp_path / "models" / "glm"
    result = run_stage(s3, dest)
    assert not result.skipped
    assert result.fetched == len(FILES)
    for rel, data in FILES.items():
        assert (dest / rel).read_bytes() == data
    assert json.loads((dest / MARKER).read_text())["manifest_sha256"] == imported.digest()
    assert not list(dest.rglob("*" + staging.PARTIAL))


def test_stage_is_skipped_when_already_staged(s3, imported, tmp_path, caplog):
    dest = tmp_path / "glm"
    run_stage(s3, dest)
    s3.downloads.clear()
    with caplog.at_level(logging.INFO, logger="pdkit.staging"):
        result = run_stage(s3, dest)
    assert result.skipped
    assert s3.downloads == []
    assert "already staged" in caplog.text


def test_a_truncated_file_invalidates_the_shortcut_and_is_fetched_again(s3, imported, tmp_path):
    dest = tmp_path / "glm"
    run_stage(s3, dest)
    s3.downloads.clear()
    (dest / "model-00002-of-00002.safetensors").write_bytes(b"\x07" * 10)
    result = run_stage(s3, dest)
    assert not result.skipped
    assert s3.downloads == [PREFIX + "model-00002-of-00002.safetensors"]
    assert (dest / "model-00002-of-00002.safetensors").read_bytes() == FILES["model-00002-of-00002.safetensors"]


def test_a_corrupted_file_of_the_right_size_is_detected_and_fetched_again(s3, imported, tmp_path, caplog):
    """Interrupted run (no marker): files already at their size are hashed, the bad one re-fetched."""
    dest = tmp_path / "glm"
    run_stage(s3, dest)
    (dest / MARKER).unlink()
    good = FILES["model-00001-of-00002.safetensors"]
    (dest / "model-00001-of-00002.safetensors").write_bytes(b"\xff" + good[1:])
    s3.downloads.clear()
    with caplog.at_level(logging.WARNING, logger="pdkit.staging"):
        result = run_stage(s3, dest)
    assert s3.downloads == [PREFIX + "model-00001-of-00002.safetensors"]
    assert result.reused == len(FILES) - 1
    assert (dest / "model-00001-of-00002.safetensors").read_bytes() == good
    assert "corrupted" in caplog.text


def test_reverify_hashes_even_when_the_marker_matches(s3, imported, tmp_path):
    dest = tmp_path / "glm"
    run_stage(s3, dest)
    (dest / "config.json").write_bytes(b"x" * len(FILES["config.json"]))  # same size, wrong bytes
    s3.downloads.clear()
    assert run_stage(s3, dest).skipped
    assert not run_stage(s3, dest, reverify=True).skipped
    assert s3.downloads == [PREFIX + "config.json"]


def test_a_bad_object_in_the_bucket_fails_loudly_and_leaves_nothing_half_written(s3, imported, tmp_path):
    s3.put_object(Bucket=BUCKET, Key=PREFIX + "config.json", Body=b"{not the imported file}xx")
    dest = tmp_path / "glm"
    with pytest.raises(StagingError, match="does not match the manifest after 2 downloads"):
        run_stage(s3, dest)
    assert not (dest / "config.json").exists()
    assert not (dest / MARKER).exists()
    assert s3.downloads.count(PREFIX + "config.json") == staging.FETCH_ATTEMPTS


def test_files_of_an_older_revision_are_removed(s3, imported, tmp_path):
    dest = tmp_path / "glm"
    (dest / "old").mkdir(parents=True)
    (dest / "old" / "model-00001-of-00009.safetensors").write_bytes(b"old")
    (dest / "config.json.pdkit-partial").write_bytes(b"interrupted")
    result = run_stage(s3, dest)
    assert result.removed == 2
    assert not (dest / "old").exists()


def test_staging_refuses_to_start_without_room_on_the_node(s3, imported, tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(staging.shutil, "disk_usage", lambda p: usage(100 * 10**9, 90 * 10**9, 10 * 10**9))
    with pytest.raises(StagingError, match="RAID0 is mounted at /mnt/k8s-disks/0"):
        run_stage(s3, tmp_path / "glm")
    assert s3.downloads == []


def test_progress_reports_gigabytes_rate_and_eta(caplog):
    now = [0.0]
    progress = Progress(total=760 * 10**9, files=152, interval=10, clock=lambda: now[0])
    now[0] = 60.0
    with caplog.at_level(logging.INFO, logger="pdkit.staging"):
        progress.add(300 * 10**9, file_done=True)
    assert "staged 300.0/760.0 GB (39%), 5.00 GB/s, ETA 1.5 min, 1/152 files" in caplog.text


def test_staging_entrypoint_runs_like_the_init_container(s3, imported, tmp_path, capsys):
    dest = tmp_path / "glm"
    argv = ["--bucket", BUCKET, "--prefix", PREFIX, "--dest", str(dest), "--region", REGION, "--workers", "2"]
    assert staging.main(argv, s3_factory=lambda region, n: s3) == 0
    assert (dest / MARKER).exists()
    assert staging.main([*argv[:3], "missing/", *argv[4:]], s3_factory=lambda region, n: s3) == 1
    assert "pdkit staging: error:" in capsys.readouterr().err


def test_staging_module_needs_nothing_from_pdkit_but_the_manifest():
    """The init container runs it from the serving image: no pydantic, no plan, no CDK."""
    probe = "import sys, pdkit.pods.staging; print(sorted(m for m in sys.modules if m.split('.')[0] in ('pdkit', 'pydantic', 'yaml', 'aws_cdk')))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == str(["pdkit", "pdkit.pods", "pdkit.pods.staging", "pdkit.pods.weights_manifest"])


def test_file_entry_paths_stay_inside_the_staging_directory():
    with pytest.raises(ManifestError):
        Manifest.from_json(Manifest(model="m", revision="r", files=(FileEntry("a/../../b", 1, "0" * 64),)).to_json())


def test_shared_dir_is_opened_to_the_serving_user_like_tmp(tmp_path):
    """kubelet creates a hostPath PersistentVolume's directory as root 0755 (DirectoryOrCreate); the serving
    user must write its compile cache there. chmod needs ownership, not CAP_CHOWN or CAP_FOWNER (chmod(2))."""
    shared = tmp_path / "cache"
    shared.mkdir(mode=0o755)
    staging.open_to_all(shared)
    assert shared.stat().st_mode & 0o7777 == 0o1777


def test_staging_cli_opens_shared_dirs_before_it_stages(tmp_path, monkeypatch):
    shared = tmp_path / "cache"
    calls = []
    monkeypatch.setattr(staging, "stage", lambda **kw: calls.append(kw))
    code = staging.main(
        ["--bucket", BUCKET, "--prefix", PREFIX, "--dest", str(tmp_path / "m"), "--shared-dir", str(shared)], s3_factory=lambda r, c: None
    )
    assert code == 0
    assert calls
    assert shared.stat().st_mode & 0o7777 == 0o1777


@pytest.mark.parametrize("marker", ['{"manifest_sha256": "' + "0" * 64 + '"}', "[]", "{not json"])
def test_a_marker_of_another_manifest_or_garbage_is_no_shortcut(s3, imported, tmp_path, marker):
    """The shortcut trusts only a marker naming this manifest's digest (a new revision's manifest differs): any
    other marker, or one that is not a JSON object, makes staging hash what is there and re-fetch what differs."""
    dest = tmp_path / "glm"
    run_stage(s3, dest)
    (dest / "config.json").write_bytes(b"x" * len(FILES["config.json"]))  # same size, wrong bytes
    (dest / MARKER).write_text(marker)
    s3.downloads.clear()
    result = run_stage(s3, dest)
    assert not result.skipped
    assert s3.downloads == [PREFIX + "config.json"]
    assert json.loads((dest / MARKER).read_text())["manifest_sha256"] == imported.digest()
