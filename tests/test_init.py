"""`pdkit init`: a profile of the operator's own in deployments/ (untracked), never an edit of the tracked config/.

Before, `capacity buy` told the operator to edit config/glm51-fp8-2p2d.yaml: a tracked file whose every `git pull`
then conflicts, and whose name every teammate shares.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from pdkit.cli.main import main
from pdkit.model import profile_files

ARN = "arn:aws:iam::123456789012:role/Admin"


@pytest.fixture
def own_dir(tmp_path, monkeypatch):
    folder = tmp_path / "deployments"
    monkeypatch.setattr(profile_files, "OWN_DIR", folder)
    return folder


def test_init_copies_a_shipped_profile_with_the_operators_values(own_dir, capsys):
    argv = ["init", "my-2p2d", "--from", "glm51-fp8-2p2d", "--account", "123456789012", "--az", "eu-south-2b", "--admin-arn", ARN]
    assert main(argv) == 0
    written = own_dir / "my-2p2d.yaml"
    text = written.read_text()
    raw = yaml.safe_load(text)
    assert raw["name"] == "my-2p2d"
    assert raw["aws"] == {"account": "123456789012", "region": "eu-south-2", "availability_zone": "eu-south-2b"}
    assert raw["cluster"]["admin_principal_arns"] == [ARN]
    # The shipped file's own words stay: its comments, its roles, its blank lines between sections.
    shipped = (profile_files.CONFIG_DIR / "glm51-fp8-2p2d.yaml").read_text()
    assert raw["roles"] == yaml.safe_load(shipped)["roles"]
    assert "# The seed deployment" in text
    assert "\n\ncapacity:" in text
    assert "Use it with --profile my-2p2d" in capsys.readouterr().out


def test_a_name_finds_the_operators_profile_before_the_shipped_ones(own_dir, capsys):
    assert main(["init", "my-2p2d", "--from", "glm51-fp8-2p2d", "--az", "eu-south-2c"]) == 0
    assert profile_files.resolve("my-2p2d") == own_dir / "my-2p2d.yaml"
    assert profile_files.resolve("glm51-fp8-2p2d") == profile_files.CONFIG_DIR / "glm51-fp8-2p2d.yaml"
    capsys.readouterr()
    assert main(["plan", "--profile", "my-2p2d", "--output", "json"]) == 0
    assert '"block_az": "eu-south-2c"' in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["init", "glm51-fp8-2p2d", "--from", "glm51-fp8-2p2d"], "yours would hide it"),
        (["init", "my-2p2d", "--from", "nosuch"], "is not a shipped profile"),
        (["init", "my-2p2d", "--from", "glm51-fp8-2p2d", "--az", "us-east-1a"], "aws.availability_zone"),
        (["init", "my-2p2d", "--from", "glm51-fp8-2p2d", "--account", "1234"], "12-digit"),
        (["init", "my-2p2d", "--from", "glm51-fp8-2p2d", "--admin-arn", "alice"], "not an IAM role or user ARN"),
    ],
)
def test_a_copy_that_would_not_deploy_is_refused_in_one_line_and_nothing_is_written(own_dir, capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert words in err
    assert not own_dir.exists()


def test_an_existing_profile_of_ones_own_is_never_overwritten(own_dir, capsys):
    own_dir.mkdir()
    (own_dir / "my-2p2d.yaml").write_text("mine\n")
    assert main(["init", "my-2p2d", "--from", "glm51-fp8-2p2d"]) == 2
    assert "exists already; it is not overwritten" in capsys.readouterr().err
    assert (own_dir / "my-2p2d.yaml").read_text() == "mine\n"


def test_deployments_are_not_tracked():
    """git itself says so: the operator's account ids and ARNs stay out of commits and pulls."""
    ignored = subprocess.run(["git", "check-ignore", "-q", "deployments/x.yaml"], cwd=profile_files.ROOT, check=False)
    assert ignored.returncode == 0


def test_a_printed_init_command_carries_no_deployment_flags():
    """init takes no --profile/--aws-profile/--region (it writes a new profile): a fix that names it runs as printed."""
    import argparse

    from pdkit.cli.context import pdkit_command

    args = argparse.Namespace(profile="glm51-fp8-2p2d", aws_profile="ops", region="eu-south-2")
    assert pdkit_command(args, "init NAME --from PROFILE") == "pdkit init NAME --from PROFILE"
    assert pdkit_command(args, "plan") == "pdkit plan --profile glm51-fp8-2p2d --aws-profile ops --region eu-south-2"
