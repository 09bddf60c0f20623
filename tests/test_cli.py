"""The pdkit CLI: fast start (no aws_cdk, no boto3 for local commands), text and JSON plans."""

from __future__ import annotations

import json
import subprocess
import sys

from pdkit.cli.main import main


def test_plan_text_names_what_an_operator_checks(capsys):
    assert main(["plan"]) == 0
    out = capsys.readouterr().out
    for words in ("4 x p5en.48xlarge in eu-south-2a", "16 EFA devices", "150 cross-node MoE messages per token", "placeholder"):
        assert words in out


def test_plan_json(capsys):
    assert main(["plan", "--output", "json", "--profile", "glm51-fp8-4p4d"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["instance_count"] == 8


def test_cli_never_imports_cdk_or_boto3_for_local_commands():
    """`pdkit` must start fast: aws_cdk (jsii + Node) costs seconds, boto3 ~0.3 s."""
    code = "import sys; from pdkit.cli.main import main; main(['plan']); print(sorted(m for m in ('aws_cdk', 'boto3', 'jsii') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("[]")


def test_profile_is_accepted_before_or_after_the_command(capsys):
    assert main(["--profile", "glm51-fp8-4p4d", "plan", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["instance_count"] == 8
    assert main(["plan", "--profile", "glm51-fp8-4p4d", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["instance_count"] == 8
    assert main(["--profile", "glm51-fp8-4p4d", "plan", "--profile", "glm51-fp8-2p2d", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["instance_count"] == 4, "the command's own option wins"
