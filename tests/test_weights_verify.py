"""`python -m pdkit.pods.weights_manifest verify` (runbooks/02-serve.md): the hash check, not only the size.

The import writes each object's sha256 into its user metadata (`x-amz-meta-sha256`), which S3 returns on
HeadObject as `Metadata` (S3 API reference, HeadObject: "Metadata: A map of metadata to store with the object
in S3"; user metadata is set only by the PUT that writes the object, so a re-written object carries the
writer's digest or none). A file replaced by one of the same size must fail on the digest alone.
"""

from __future__ import annotations

import json
import logging

import pytest
from botocore.exceptions import ClientError

from pdkit.pods import weights_manifest
from tests.fixtures.weights import BUCKET, FILES, PREFIX, REGION, sha

# snapshot_dir, s3 (moto), imported
pytest_plugins = ["tests.fixtures.weights_fixtures"]

SHARD = "model-00001-of-00002.safetensors"


def _verify(s3, capsys) -> tuple[int, str]:
    code = weights_manifest.main(["verify", "--bucket", BUCKET, "--prefix", PREFIX, "--region", REGION], s3_factory=lambda r, n: s3)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("metadata", ["own digest", "no digest"])
def test_verify_fails_on_a_tampered_file_of_the_right_size(s3, imported, capsys, metadata):
    original = FILES[SHARD]
    tampered = bytes(reversed(original))
    assert len(tampered) == len(original)
    assert tampered != original
    extra = {"Metadata": {"sha256": sha(tampered)}} if metadata == "own digest" else {}
    s3.put_object(Bucket=BUCKET, Key=PREFIX + SHARD, Body=tampered, **extra)

    code, err = _verify(s3, capsys)

    assert code == 1
    shown = sha(tampered) if metadata == "own digest" else "(none)"
    assert err.splitlines() == [f"pdkit weights: {SHARD}: sha256 metadata {shown} differs from the manifest"]


def test_verify_passes_an_untouched_bucket_and_names_the_manifest(s3, imported, capsys):
    code = weights_manifest.main(["verify", "--bucket", BUCKET, "--prefix", PREFIX, "--region", REGION], s3_factory=lambda r, n: s3)
    out = capsys.readouterr().out
    total = sum(len(data) for data in FILES.values())
    assert code == 0
    assert out.splitlines()[-1] == f"pdkit weights: {len(FILES)} files, {total / 1e9:.1f} GB match manifest {imported.digest()[:12]}"


def test_import_from_the_command_line_uploads_the_snapshot_and_its_manifest(s3, snapshot_dir, capsys, caplog):
    """`python -m pdkit.pods.weights_manifest import DIR --model --revision --bucket --prefix` (runbooks/02-serve.md)."""
    caplog.set_level(logging.INFO)
    made = []

    def factory(region, connections):
        made.append((region, connections))
        return s3

    argv = ["import", str(snapshot_dir), "--model", "zai-org/GLM-5.1-FP8", "--revision", "abc123", "--bucket", BUCKET, "--prefix", PREFIX]
    assert weights_manifest.main([*argv, "--region", REGION, "--workers", "3"], s3_factory=factory) == 0
    assert made == [(REGION, 12)], "one client, with a connection pool of 4 per worker"
    manifest = weights_manifest.load_manifest(s3, BUCKET, PREFIX)
    assert (manifest.model, manifest.revision) == ("zai-org/GLM-5.1-FP8", "abc123")
    assert {f.path for f in manifest.files} == set(FILES)
    head = s3.head_object(Bucket=BUCKET, Key=PREFIX + weights_manifest.MANIFEST_NAME)
    assert head["ContentType"] == "application/json"
    assert weights_manifest.main(["verify", "--bucket", BUCKET, "--prefix", PREFIX], s3_factory=factory) == 0
    total = sum(len(data) for data in FILES.values())
    assert f"import: {len(FILES)} files, {total / 1e9:.1f} GB from {snapshot_dir} to s3://{BUCKET}/{PREFIX}" in caplog.messages
    assert f"import: {len(FILES)} files uploaded, 0 already there; manifest {manifest.digest()[:12]}" in caplog.messages
    caplog.clear()
    assert weights_manifest.main([*argv, "--region", REGION], s3_factory=factory) == 0
    assert f"import: 0 files uploaded, {len(FILES)} already there; manifest {manifest.digest()[:12]}" in caplog.messages


@pytest.mark.parametrize("missing", ["--model", "--revision", "--bucket", "--prefix"])
def test_import_needs_every_location_and_identity_flag(tmp_path, missing, capsys):
    flags = {"--model": "m", "--revision": "r", "--bucket": BUCKET, "--prefix": PREFIX}
    argv = ["import", str(tmp_path)] + [x for k, v in flags.items() if k != missing for x in (k, v)]
    with pytest.raises(SystemExit) as exit_info:
        weights_manifest.main(argv, s3_factory=lambda r, n: pytest.fail("no client without the flags"))
    assert exit_info.value.code == 2
    assert f"the following arguments are required: {missing}" in capsys.readouterr().err


def test_a_command_is_required(capsys):
    with pytest.raises(SystemExit) as exit_info:
        weights_manifest.main([], s3_factory=lambda r, n: pytest.fail("no client without a command"))
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("usage: python -m pdkit.pods.weights_manifest [-h] {import,verify} ...")


def test_the_region_defaults_to_aws_region(monkeypatch, s3, imported):
    """The Job's pod gets AWS_REGION from EKS Pod Identity / the environment (boto3 reads it too)."""
    monkeypatch.setenv("AWS_REGION", "eu-south-2")
    made = []
    weights_manifest.main(["verify", "--bucket", BUCKET, "--prefix", PREFIX], s3_factory=lambda r, n: made.append((r, n)) or s3)
    assert made == [("eu-south-2", 64)], "16 workers by default, 4 connections each"


def test_the_s3_client_pools_a_connection_per_download_and_retries_adaptively():
    """botocore Config: max_pool_connections (default 10) would throttle 16 workers; retries mode adaptive with
    10 attempts rides out S3 503 SlowDown (https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html)."""
    client = weights_manifest._s3_client("eu-south-2", 64)
    assert client.meta.service_model.service_name == "s3"
    assert client.meta.region_name == "eu-south-2"
    assert client.meta.config.max_pool_connections == 64
    # botocore stores max_attempts (retries) as total_max_attempts = max_attempts + 1 (the first call counts).
    assert client.meta.config.retries == {"mode": "adaptive", "total_max_attempts": 11}


def test_a_problem_goes_to_stderr_and_the_summary_counts_gigabytes(s3, imported, capsys):
    s3.delete_object(Bucket=BUCKET, Key=PREFIX + "config.json")
    code, err = _verify(s3, capsys)
    assert (code, err) == (1, "pdkit weights: config.json: missing\n")


# --- the manifest's own checks, message by message (the staging init container refuses on these) ----------

ENTRY = {"path": "a.safetensors", "size": 3, "sha256": "0" * 64}


def _manifest_json(files, **body):
    return json.dumps({"format": weights_manifest.FORMAT, "model": "m", "revision": "r", "files": files} | body)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
        ("[]", f"not a {weights_manifest.FORMAT} manifest"),
        (json.dumps({"format": weights_manifest.FORMAT, "total_bytes": 0}), "lists no files"),
        (_manifest_json([ENTRY | {"path": 5}], total_bytes=3), "file path 5 is not a string"),
        (_manifest_json([ENTRY | {"path": ""}], total_bytes=3), "file path '' is not a string"),
        (_manifest_json([ENTRY | {"path": "a\\b"}], total_bytes=3), "file path 'a\\\\b' is not a plain relative path"),
        (_manifest_json([ENTRY | {"path": "a//b"}], total_bytes=3), "file path 'a//b' is not a plain relative path"),
    ],
    ids=["not-json", "not-an-object", "no-files-key", "path-not-string", "empty-path", "backslash", "double-slash"],
)
def test_a_broken_manifest_is_refused_with_its_reason(text, message):
    with pytest.raises(weights_manifest.ManifestError) as info:
        weights_manifest.Manifest.from_json(text)
    assert str(info.value) == message


def test_an_empty_file_is_a_valid_entry():
    """Checkpoints carry empty files (e.g. an empty added_tokens.json): size 0 is a byte count."""
    manifest = weights_manifest.Manifest.from_json(_manifest_json([ENTRY | {"size": 0}], total_bytes=0))
    assert manifest.files[0].size == 0


def test_a_snapshot_without_model_files_is_refused(tmp_path):
    (tmp_path / ".cache").mkdir()
    with pytest.raises(weights_manifest.ManifestError) as info:
        weights_manifest.scan_snapshot(tmp_path, model="m", revision="r")
    assert str(info.value) == f"{tmp_path} holds no model files"


@pytest.mark.parametrize(
    ("error", "missing"),
    [
        (ClientError({"Error": {"Code": "404", "Message": "Not Found"}}, "HeadObject"), True),
        (ClientError({"Error": {"Code": "NoSuchKey"}}, "GetObject"), True),
        (ClientError({"Error": {"Code": "NotFound"}}, "HeadObject"), True),
        (ClientError({"Error": {"Code": "AccessDenied"}}, "HeadObject"), False),
        (ClientError({"ResponseMetadata": {"HTTPStatusCode": 500}}, "HeadObject"), False),
        (ConnectionError("reset"), False),
    ],
    ids=["head-404", "get-nosuchkey", "notfound", "denied", "no-error-body", "not-an-aws-error"],
)
def test_only_a_missing_object_counts_as_missing(error, missing):
    """HeadObject answers a missing key with a bare 404 (no body, so botocore's code is "404"); GetObject with
    NoSuchKey (S3 API reference, HeadObject and GetObject); anything else is a real failure."""
    assert weights_manifest._is_missing(error) is missing


def test_a_manifest_without_model_or_revision_names_neither():
    manifest = weights_manifest.Manifest.from_json(json.dumps({"format": weights_manifest.FORMAT, "files": [ENTRY], "total_bytes": 3}))
    assert (manifest.model, manifest.revision) == ("", "")


def test_the_manifest_bytes_and_digest_stay_the_same_from_one_kit_version_to_the_next():
    """A staged NVMe directory remembers the digest of the manifest it matches (the sha256 of these bytes), and the
    bucket holds the manifest as written at import: if the serialization changed (key order, indentation), every
    warm node would see a new digest and stage the whole checkpoint again at the start of a paid block. The
    bytes are pinned here: sorted keys, one-space indentation, files by path, a final newline."""
    m = weights_manifest.Manifest(
        "org/model",
        "abc123",
        (weights_manifest.FileEntry("b.safetensors", 7, "b" * 64), weights_manifest.FileEntry("a.json", 3, "a" * 64)),
    )
    text = m.to_json()
    assert text.splitlines()[:3] == ["{", ' "files": [', "  {"]
    assert [line.strip().split(":")[0] for line in text.splitlines() if line.startswith(' "')] == [
        '"files"',
        '"format"',
        '"model"',
        '"revision"',
        '"total_bytes"',
    ]
    assert text.endswith("}\n")
    assert m.digest() == "1aa9a8f03cf998fe600b0d4d2048be942af13729e8a253f6c69735b6d51b176e"


def test_a_manifest_whose_total_does_not_add_up_names_both_numbers():
    """The refusal shows the total the file claims beside the sum of its entries, so an operator sees which is off."""
    body = json.loads(weights_manifest.Manifest("org/model", "abc123", (weights_manifest.FileEntry("a.json", 3, "a" * 64),)).to_json())
    body["total_bytes"] = 4
    with pytest.raises(weights_manifest.ManifestError, match=r"^total_bytes 4 does not add up to 3$"):
        weights_manifest.Manifest.from_json(json.dumps(body))
