"""No placeholder account in anything a command writes: `pdkit render`, `validate --render`, `bench --render`
and `weights import --render` refuse with one line naming the flag, and write real values when given them.

An ECR private registry is `aws_account_id.dkr.ecr.region.amazonaws.com`
(https://docs.aws.amazon.com/AmazonECR/latest/userguide/Registries.html) and S3 bucket names are global
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html): a manifest naming account
000000000000 applies cleanly and fails later at image pull or at the first S3 read, far from its cause.
"""

from __future__ import annotations

import pytest

from pdkit.cli.main import main
from pdkit.ops import kube
from tests.fixtures.cmd_support import profile

pytest_plugins = ["tests.fixtures.cmd_fixtures"]

PLACEHOLDER = "000000000000"
REGISTRY = "123456789012.dkr.ecr.eu-south-2.amazonaws.com"
BUCKET = "glm51-2p2d-weights-123456789012-eu-south-2"


def one_line_naming(capsys: pytest.CaptureFixture[str], flag: str) -> str:
    captured = capsys.readouterr()
    assert PLACEHOLDER not in captured.out, "nothing was written to stdout"
    err = captured.err
    assert err.count("\n") == 1, err
    assert err.startswith("pdkit: error: ")
    assert f"Fix: pass {flag} " in err
    assert "aws.account" in err
    return err


def test_render_refuses_without_a_registry(tmp_path, capsys):
    """The default profile sets no aws.account; the serving image would be 000000000000.dkr.ecr...."""
    out = tmp_path / "serving"
    assert main(["render", "--out", str(out)]) == 2
    err = one_line_naming(capsys, "--registry")
    assert "<account>.dkr.ecr.eu-south-2.amazonaws.com" in err
    assert not list(out.glob("*.yaml")), "no manifest is written before the refusal"
    # With aws.account in the profile the default registry and bucket are real: no flag needed.
    path = profile(tmp_path, aws__account="123456789012")
    assert main(["render", "--profile", path, "--out", str(out)]) == 0
    assert not [f for f in out.glob("*.yaml") if PLACEHOLDER in f.read_text()]


def test_render_refuses_without_a_weights_bucket_and_writes_real_values_with_it(tmp_path, capsys):
    """With the registry given, the weights bucket (glm51-2p2d-weights-<account>-<region>) still holds the placeholder."""
    assert main(["render", "--out", str(tmp_path), "--registry", REGISTRY]) == 2
    err = one_line_naming(capsys, "--weights-bucket")
    assert "serving stack output WeightsBucket" in err
    assert main(["render", "--out", str(tmp_path), "--registry", REGISTRY, "--weights-bucket", BUCKET]) == 0
    texts = [f.read_text() for f in tmp_path.glob("*.yaml")]
    assert texts
    assert not [t for t in texts if PLACEHOLDER in t]
    assert any(f"{REGISTRY}/glm51-2p2d/sglang-efa:" in t for t in texts)
    assert any(BUCKET in t for t in texts)
    assert PLACEHOLDER not in capsys.readouterr().out


@pytest.mark.parametrize("command", [["validate", "--render"], ["bench", "--render"]])
def test_job_renders_refuse_without_a_registry(command, capsys):
    assert main(command) == 2
    one_line_naming(capsys, "--registry")
    assert main([*command, "--registry", REGISTRY]) == 0
    out = capsys.readouterr().out
    assert PLACEHOLDER not in out
    assert f"image: {REGISTRY}/glm51-2p2d/" in out


def test_weights_import_render_refuses_without_registry_and_bucket(aws, monkeypatch, capsys):
    monkeypatch.setattr(kube, "connect", lambda context: pytest.fail("--render must not touch the cluster"))
    assert main(["weights", "import", "--render"]) == 2
    one_line_naming(capsys, "--registry")
    assert main(["weights", "import", "--render", "--registry", REGISTRY]) == 2
    one_line_naming(capsys, "--bucket")
    assert main(["weights", "import", "--render", "--registry", REGISTRY, "--bucket", BUCKET]) == 0
    out = capsys.readouterr().out
    assert PLACEHOLDER not in out
    assert f"{REGISTRY}/glm51-2p2d/sglang-efa:" in out
    assert BUCKET in out
    assert aws.requested == [], "--render calls no AWS API"


# --- where render writes, and names the services refuse ------------------------------------------------------


def test_render_onto_a_file_is_one_line(tmp_path, capsys):
    """`--out` naming an existing file: mkdir raised FileExistsError, a traceback; and a path below a file (whose
    mkdir fails with NotADirectoryError even as root, where a read-only directory would not stop anyone)."""
    target = tmp_path / "serving.yaml"
    target.write_text("not a directory\n")
    for out in (target, target / "sub"):
        code = main(["render", "--out", str(out), "--registry", REGISTRY, "--weights-bucket", BUCKET])
        err = capsys.readouterr().err
        assert code == 2
        assert err.count("\n") == 1, err
        assert err.startswith(f"pdkit: error: cannot write the manifests into --out {out}")
        assert "Fix: --out DIR, a directory you can write" in err
    assert target.read_text() == "not a directory\n"


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        # S3's own rules: https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html
        ("--weights-bucket", "Glm51-Weights", "lowercase letters, digits, dots or hyphens"),
        ("--weights-bucket", "ab", "3-63"),
        ("--weights-bucket", "glm51..weights", "two adjacent periods"),
        ("--weights-bucket", "192.168.5.4", "formatted as an IP address"),
        ("--weights-bucket", "xn--weights", "'xn--', which S3 reserves"),
        ("--weights-bucket", "weights-s3alias", "'-s3alias', which S3 reserves"),
        # The reference grammar runtimes parse (distribution/reference, reference.go).
        ("--registry", "https://123456789012.dkr.ecr.eu-south-2.amazonaws.com", "URL scheme"),
        ("--registry", "registry.example.com/Team", "lowercase path components"),
        ("--image", "registry.example.com/pdkit/SGLang:1", "repository in lowercase"),
        ("--router-image", "registry.example.com/pdkit/router:bad tag", "not an image reference"),
    ],
)
def test_render_refuses_names_the_service_would_refuse(tmp_path, capsys, flag, value, words):
    """Refused before anything is written: a manifest naming such a bucket or image applies and then fails at the first
    S3 read or image pull."""
    args = {"--registry": REGISTRY, "--weights-bucket": BUCKET, flag: value}
    out = tmp_path / "serving"
    assert main(["render", "--out", str(out), *[x for kv in args.items() for x in kv]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"pdkit: error: {flag} {value!r} ")
    assert words in err
    assert not out.exists()


@pytest.mark.parametrize(
    "reference",
    [
        "123456789012.dkr.ecr.eu-south-2.amazonaws.com/pdkit/sglang-efa:0.5.23-abc123",
        "localhost:5000/sglang",
        "registry.example.com/team/router@sha256:" + "a" * 64,
        "[::1]:5000/x/y:tag",
    ],
)
def test_render_accepts_what_runtimes_parse(tmp_path, capsys, reference):
    out = tmp_path / "serving"
    assert main(["render", "--out", str(out), "--image", reference, "--router-image", reference, "--weights-bucket", BUCKET]) == 0
    assert out.is_dir()
