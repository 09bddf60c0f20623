"""`pdkit --help` and every command's help start fast: no boto3, botocore, kubernetes or rich imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pdkit.cli.commands import MODULES
from pdkit.cli.main import main

HEAVY = ("boto3", "botocore", "kubernetes", "rich", "aws_cdk")


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["capacity", "--help"],
        ["capacity", "buy", "--help"],
        ["preflight", "--help"],
        ["topology", "--help"],
        ["nodes", "up", "--help"],
        ["status", "--help"],
        ["smoke", "--help"],
    ],
)
def test_help_imports_no_aws_or_kubernetes_client(argv):
    """Help is what an operator runs first; boto3 alone costs ~0.3 s and kubernetes more."""
    code = (
        "import sys\nfrom pdkit.cli.main import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_operator_commands_are_registered_after_plan_in_workflow_order():
    mine = ("capacity", "preflight", "topology", "nodes", "status", "smoke")
    positions = [MODULES.index(name) for name in mine]
    assert positions == sorted(positions)
    assert positions[0] > MODULES.index("plan")


def test_every_command_takes_the_deployment_and_credential_profiles(capsys):
    """--profile is the deployment profile, --aws-profile the credentials, --region overrides the profile's region."""
    for argv in (["capacity", "offerings"], ["capacity", "status"], ["preflight"], ["topology"], ["nodes", "down"], ["status"], ["smoke"]):
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        text = capsys.readouterr().out
        for flag in ("--profile NAME|PATH", "--aws-profile NAME", "--region"):
            assert flag in text, argv
