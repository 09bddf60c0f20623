"""Every impossible deployment is refused with one line: the field, the value and the fix."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from pdkit import plan, profile_files
from pdkit.errors import ProfileError

CASES = [
    # (id, changes, field named, words the problem or fix must contain)
    ("az-not-in-region", ("aws.availability_zone", "eu-west-1a"), "aws.availability_zone", "not an Availability Zone of eu-south-2"),
    ("unknown-region", ("aws.region", "xx-nowhere-1"), "aws.region", "set aws.availability_zones"),
    (
        "experts-not-divisible-by-ep",
        (
            "roles.prefill.nodes_per_replica",
            3,
            "roles.prefill.parallelism",
            {"tp": 24, "moe_a2a_backend": "deepep", "deepep_mode": "normal"},
        ),
        "roles.prefill.parallelism.tp",
        "does not divide the model's 256 experts",
    ),
    ("nodes-not-instance-count", ("capacity.instance_count", 6), "capacity.instance_count", "roles need 4 nodes"),
    ("unknown-instance-type", ("capacity.instance_type", "p4d.24xlarge"), "capacity.instance_type", "use one of p5en.48xlarge"),
    ("malformed-reservation", ("capacity.reservation_id", "cr-123"), "capacity.reservation_id", "17 lowercase hex digits"),
    (
        "prefill-cp-across-nodes",
        ("roles.prefill.parallelism", {"tp": 16, "attn_cp": 8, "deepep_mode": "normal"}),
        "roles.prefill.parallelism.attn_cp",
        "SGLang refuses cross-node CP",
    ),
    (
        "tp-pp-not-replica-gpus",
        ("roles.decode.parallelism.tp", 8),
        "roles.decode.parallelism.tp",
        "one replica has 2 node(s) x 8 GPUs = 16",
    ),
    (
        "weights-overflow-gpu",
        ("capacity.instance_type", "p5.48xlarge"),
        "roles.decode.mem_fraction_static",
        "weights need ~76.5 GB per GPU",
    ),
    ("missing-field", ("capacity.reservation_id", None), "capacity.reservation_id", "required field is missing"),
    ("wrong-type", ("capacity.instance_count", "four"), "capacity.instance_count", "expected a whole number"),
    ("typo-field", ("capacity.instance_cout", 4), "capacity.instance_cout", "did you mean 'instance_count'"),
    (
        "pp-more-than-nodes",
        ("roles.decode.parallelism", {"tp": 4, "pp": 4, "deepep_mode": "low_latency"}),
        "roles.decode.parallelism.pp",
        "more pipeline stages than nodes",
    ),
    ("attn-dp-not-divisor", ("roles.decode.parallelism.attn_dp", 6), "roles.decode.parallelism.attn_dp", "does not divide tp (16)"),
    (
        "cp-on-decode",
        ("roles.decode.parallelism.attn_dp", 1, "roles.decode.parallelism.attn_cp", 2),
        "roles.decode.parallelism.attn_cp",
        "prefill feature",
    ),
    (
        "deepep-mode-unpinned",
        ("roles.decode.parallelism.deepep_mode", None),
        "roles.decode.parallelism.deepep_mode",
        "set deepep_mode: low_latency",
    ),
    ("ep-not-tp-with-deepep", ("roles.decode.parallelism.ep", 8), "roles.decode.parallelism.ep", "forces ep = tp (16)"),
    ("kv-cannot-hold-context", ("roles.decode.mem_fraction_static", 0.55), "roles.decode.context_length", "cannot hold one request"),
    ("context-over-model", ("roles.decode.context_length", 300000), "roles.decode.context_length", "longer than the model's 202752"),
    (
        "public-endpoint-without-allow-list",
        ("cluster.endpoint_access", "public_and_private"),
        "cluster.public_access_cidrs",
        "needs an allow-list",
    ),
    ("cidrs-with-private-endpoint", ("cluster.public_access_cidrs", ["10.1.0.0/16"]), "cluster.public_access_cidrs", "endpoint is private"),
    (
        "api-open-to-internet",
        ("cluster.endpoint_access", "public_and_private", "cluster.public_access_cidrs", ["0.0.0.0/0"]),
        "cluster.public_access_cidrs",
        "whole internet",
    ),
    ("more-efa-than-instance", ("capacity.efa_devices", 32), "capacity.efa_devices", "has 16 EFA devices"),
    ("old-kubernetes", ("cluster.kubernetes_version", "1.29"), "cluster.kubernetes_version", "use one of 1.36"),
    ("bad-block-duration", ("capacity.duration_hours", 30), "capacity.duration_hours", "multiple of 24"),
    ("bad-placement-group", ("capacity.placement_group", "spread"), "capacity.placement_group", "'cluster' or 'none'"),
    ("bad-log-retention", ("network.flow_log_retention_days", 100), "network.flow_log_retention_days", "e.g. 90"),
    ("nat-more-than-azs", ("network.nat_gateways", 4), "network.nat_gateways", "use 1..3"),
    ("bad-admin-arn", ("cluster.admin_principal_arns", ["alice"]), "cluster.admin_principal_arns", "not an IAM role or user ARN"),
    ("unknown-model", ("model.id", "zai-org/GLM-4"), "model.id", "not in the kit's model table"),
    ("name-too-long-for-weights-bucket", ("name", "a" * 32), "name", "exceed S3's 63 characters"),
    (
        "mtp-on-decode-only",
        ("roles.decode.mtp", {"enabled": True}),
        "roles.prefill.mtp.enabled",
        "set roles.prefill.mtp to the decode settings",
    ),
]


def _error(raw: dict) -> ProfileError:
    with pytest.raises(ProfileError) as info:
        plan.build(profile_files.parse(raw, source="t.yaml"))
    return info.value


@pytest.mark.parametrize(("changes", "field", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_profile_is_refused_with_field_value_and_fix(raw_with, changes, field, words):
    """Each guard fires, and its message names the field, carries a fix, and fits on one line."""
    message = str(_error(raw_with(*changes)))
    assert f"{field} = " in message
    assert words in message
    assert "Fix: " in message
    assert "\n" not in message


def test_at_least_ten_distinct_guards():
    assert len({c[2] + c[3] for c in CASES}) >= 10


def test_default_profiles_are_valid():
    """The shipped profiles themselves pass every check (the error cases above start from the default)."""
    for name in profile_files.available_profiles():
        prof, path = profile_files.load(name)
        assert plan.build(prof, profile_path=path).name == prof.name


def _run(args: list[str], **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, check=False, **kw)


def test_cli_prints_one_line_and_no_traceback(tmp_path, raw_with):
    """An operator sees one line naming the problem and exit code 2, not a Python traceback."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw_with("capacity.instance_count", 6)))
    result = _run(["-m", "pdkit", "plan", "--profile", str(bad)])
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1
    assert "capacity.instance_count = 6" in result.stderr


def test_cdk_app_prints_one_line_and_no_traceback(tmp_path, raw_with):
    """`cdk synth -c profile=bad.yaml` fails the same way before any construct is built."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw_with("capacity.reservation_id", "cr-123")))
    env = {"CDK_CONTEXT_JSON": f'{{"profile": "{bad}"}}', "CDK_OUTDIR": str(tmp_path / "out"), "PATH": os.environ["PATH"]}
    result = _run(["app.py"], env=env, cwd=profile_files.ROOT)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "capacity.reservation_id = 'cr-123'" in result.stderr
    assert not list((tmp_path / "out").glob("*.template.json")), "nothing is synthesized from a bad profile"


def test_unknown_profile_name_suggests_the_closest(capsys):
    from pdkit.cli import main

    assert main(["plan", "--profile", "glm51-fp8-2p2"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'glm51-fp8-2p2d'" in err


def test_invalid_yaml_names_the_line(tmp_path, capsys):
    from pdkit.cli import main

    bad = tmp_path / "broken.yaml"
    bad.write_text("name: x\naws:\n  region: [unclosed\n")
    assert main(["plan", "--profile", str(bad)]) == 2
    assert "not valid YAML at line" in capsys.readouterr().err
