"""SGLang's compile cache across restarts and blocks: restore, precompile once, save when it changed (moto S3)."""

from __future__ import annotations

import io
import tarfile

import boto3
import pytest
from moto import mock_aws

from pdkit.pods import compile_cache
from pdkit.pods.compile_cache import is_warm, marker, restore, save, warm

BUCKET = "glm51-2p2d-weights-000000000000-eu-south-2"
REGION = "eu-south-2"
KEY = "af077ec84ccce3dd"
OBJECT = f"compile-cache/glm51-2p2d/decode/{KEY}.tar"
ARGV = ["python3", "-m", "sglang.compile_deep_gemm", "--tp-size", "16"]


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
        yield client


class Precompile:
    """Stands in for `python -m sglang.compile_deep_gemm`: writes a kernel like DeepGEMM's JIT cache would."""

    def __init__(self, cache_dir, code=0):
        self.cache_dir, self.code, self.calls = cache_dir, code, []

    def __call__(self, argv, timeout):
        self.calls.append((list(argv), timeout))
        if self.code == 0:
            kernel = self.cache_dir / "deep_gemm" / "cache" / "kernel.cubin"
            kernel.parent.mkdir(parents=True, exist_ok=True)
            kernel.write_bytes(b"\x7fELF sm_90a")
        return self.code


def objects(s3):
    return [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]


def run_warm(s3, cache_dir, run, *, leader=True):
    return warm(s3, bucket=BUCKET, key=KEY, cache_dir=cache_dir, object_key=OBJECT, compile_argv=ARGV, timeout=60, leader=leader, run=run)


def test_a_cold_node_precompiles_marks_the_cache_and_the_leader_saves_it(s3, tmp_path):
    """First boot of a block: nothing on the node, nothing in S3 (HeadObject answers 404), so the role's
    DeepGEMM precompile runs (AWS recipe/serve-pd.sh `precompile`, before serving) and its result is kept."""
    cache = tmp_path / "decode"
    run = Precompile(cache)
    assert run_warm(s3, cache, run) == "compiled"
    assert run.calls == [(ARGV, 60)]
    assert is_warm(cache, KEY)
    assert objects(s3) == [OBJECT]


def test_only_the_leader_uploads(s3, tmp_path):
    """Every node of the group compiles the same shapes; one archive per role is enough and two would race."""
    cache = tmp_path / "decode"
    assert run_warm(s3, cache, Precompile(cache), leader=False) == "compiled"
    assert objects(s3) == []


def test_a_warm_node_skips_the_precompile(s3, tmp_path):
    """A restarted group finds its kernels on the node's NVMe: the precompile is idempotent and costs nothing."""
    cache = tmp_path / "decode"
    run_warm(s3, cache, Precompile(cache))
    again = Precompile(cache)
    assert run_warm(s3, cache, again) == "warm"
    assert again.calls == []


def test_the_next_block_restores_the_saved_cache_instead_of_compiling(s3, tmp_path):
    """Instance store does not survive the block: a new node gets the archive the last block saved."""
    first = tmp_path / "block1" / "decode"
    run_warm(s3, first, Precompile(first))
    fresh = tmp_path / "block2" / "decode"
    run = Precompile(fresh)
    assert run_warm(s3, fresh, run) == "restored"
    assert run.calls == []
    assert (fresh / "deep_gemm" / "cache" / "kernel.cubin").read_bytes() == b"\x7fELF sm_90a"


def test_a_failed_precompile_leaves_the_cache_cold_and_lets_serving_start(s3, tmp_path):
    """SGLang compiles at start-up anyway (SGLANG_JIT_DEEPGEMM_PRECOMPILE, default on in 0.5.23's
    sglang/srt/environ.py): a failed or timed-out precompile must not block the group, nor be marked warm."""
    cache = tmp_path / "decode"
    assert run_warm(s3, cache, Precompile(cache, code=-1)) == "cold"
    assert not is_warm(cache, KEY)
    assert objects(s3) == []


def test_save_uploads_only_when_serving_compiled_something_new(s3, tmp_path):
    """The drain's preStop save is a no-op for an unchanged cache and uploads kernels JIT-compiled while serving."""
    cache = tmp_path / "decode"
    run_warm(s3, cache, Precompile(cache))
    assert save(s3, BUCKET, KEY, cache, OBJECT) is False
    (cache / "triton" / "new.cubin").parent.mkdir(parents=True)
    (cache / "triton" / "new.cubin").write_bytes(b"x")
    assert save(s3, BUCKET, KEY, cache, OBJECT) is True
    fresh = tmp_path / "fresh"
    assert restore(s3, BUCKET, KEY, fresh, OBJECT)
    assert (fresh / "triton" / "new.cubin").read_bytes() == b"x"


def test_a_cold_cache_is_never_saved(s3, tmp_path):
    """A half-compiled cache saved to S3 would be restored as warm and skip the precompile next block."""
    cache = tmp_path / "decode"
    (cache / "triton").mkdir(parents=True)
    (cache / "triton" / "partial.cubin").write_bytes(b"x")
    assert save(s3, BUCKET, KEY, cache, OBJECT) is False
    assert objects(s3) == []


def test_restore_refuses_an_archive_that_writes_outside_the_cache(s3, tmp_path):
    """tarfile's "data" filter (Python docs, tarfile extraction filters) rejects absolute and ../ members."""
    payload = io.BytesIO()
    with tarfile.open(fileobj=payload, mode="w") as tar:
        info = tarfile.TarInfo("../escaped")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    s3.put_object(Bucket=BUCKET, Key=OBJECT, Body=payload.getvalue())
    with pytest.raises(tarfile.TarError):
        restore(s3, BUCKET, KEY, tmp_path / "decode", OBJECT)
    assert not (tmp_path / "escaped").exists()


def test_the_cli_never_fails_the_pod_over_the_cache(s3, tmp_path, capsys):
    """An S3 error (here: no such bucket) is reported in one line and the init container still exits 0."""
    cache = tmp_path / "decode"
    code = compile_cache.main(
        ["warm", "--bucket", "no-such-bucket", "--key", KEY, "--object-key", OBJECT, "--dir", str(cache), "--", *ARGV],
        s3_factory=lambda region: s3,
        run=Precompile(cache),
    )
    assert code == 0
    assert "warm skipped" in capsys.readouterr().err


def test_the_cli_saves_only_on_the_leader(s3, tmp_path, monkeypatch):
    """preStop runs on every pod of the group; LeaderWorkerSet's worker index 0 is the leader."""
    cache = tmp_path / "decode"
    cache.mkdir()
    marker(cache, KEY).write_text("x\n")
    args = ["save", "--bucket", BUCKET, "--key", KEY, "--object-key", OBJECT, "--dir", str(cache)]
    monkeypatch.setenv(compile_cache.WORKER_INDEX_ENV, "1")
    assert compile_cache.main(args, s3_factory=lambda region: s3) == 0
    assert objects(s3) == []
    monkeypatch.setenv(compile_cache.WORKER_INDEX_ENV, "0")
    assert compile_cache.main(args, s3_factory=lambda region: s3) == 0
    assert objects(s3) == [OBJECT]
