"""Every `aws` line of the runbooks and README works as typed: its service, operation and every option exist.

An operator copies these lines while the block bills; a misspelled operation or option (`--capacity-reservation-id`
for `--capacity-reservation-ids`, a doc typo the peer harvest found in the EC2 guide itself) costs a round of reading.
Checked against botocore's service models, as the AWS CLI builds its commands from them: an operation is the model's
operation name in dashes, an option a member of its input in dashes (botocore.xform_name with "-", the CLI's own
conversion); the CLI's hand-written commands (aws-cli awscli/customizations) are listed with their options.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import botocore.session
import pytest
from botocore import xform_name

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "runbooks").glob("*.md")), ROOT / "README.md"]

# The AWS CLI's global options (aws help, "GLOBAL OPTIONS").
GLOBAL = {
    "--region",
    "--profile",
    "--output",
    "--query",
    "--no-cli-pager",
    "--endpoint-url",
    "--no-verify-ssl",
    "--debug",
    "--no-paginate",
    "--color",
    "--no-sign-request",
    "--ca-bundle",
    "--cli-read-timeout",
    "--cli-connect-timeout",
    "--cli-input-json",
    "--cli-input-yaml",
    "--generate-cli-skeleton",
    "--cli-binary-format",
    # Pagination options the CLI adds to paginated operations.
    "--max-items",
    "--starting-token",
    "--page-size",
}
# Commands the AWS CLI writes by hand (not in the models), with the options the kit's pages use
# (aws-cli: awscli/customizations/sessionmanager.py, eks/update_kubeconfig.py, logs/tail.py, s3/, ecr.py).
CUSTOM = {
    ("ssm", "start-session"): {"--target", "--document-name", "--parameters", "--reason"},
    ("eks", "update-kubeconfig"): {"--name", "--alias", "--role-arn", "--kubeconfig", "--user-alias"},
    ("logs", "tail"): {"--since", "--follow", "--format", "--filter-pattern", "--log-stream-names"},
    ("ecr", "get-login-password"): set(),
    ("s3", "cp"): {"--recursive", "--exclude", "--include"},
    ("s3", "ls"): {"--recursive", "--summarize", "--human-readable"},
    ("s3", "rm"): {"--recursive", "--exclude", "--include"},
    ("s3", "sync"): {"--delete", "--exclude", "--include"},
}
# Boolean members also take a --no- form (the CLI's negation for structure booleans).
SESSION = botocore.session.get_session()


def aws_commands(text: str) -> list[list[str]]:
    """Each `aws ...` command in the page's shell blocks and inline code, continuation lines joined, split at shell
    operators; placeholders and variables stay as words."""
    chunks = re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, re.S) + re.findall(r"`(aws [^`\n]+)`", text)
    found = []
    for chunk in chunks:
        joined = re.sub(r"\\\n\s*", " ", chunk)
        for line in joined.splitlines():
            line = line.split(" #")[0]
            for part in re.split(r"\|\||&&|[|;]|\$\(|\bdo\b|\bthen\b", line):
                part = part.strip().lstrip("(")
                if part.startswith("aws "):
                    try:
                        found.append(shlex.split(part))
                    except ValueError:
                        found.append(part.split())
    return found


def problems(words: list[str]) -> list[str]:
    if len(words) < 3 or words[1].startswith("-"):
        return []
    service, operation = words[1], words[2]
    options = {w.split("=")[0] for w in words[3:] if w.startswith("--")}
    if (service, operation) in CUSTOM:
        unknown = options - CUSTOM[(service, operation)] - GLOBAL
        return [f"aws {service} {operation}: no option {o}" for o in sorted(unknown)]
    # `aws s3api` is the CLI's name for the s3 model (`aws s3` is its hand-written commands, above).
    model_name = "s3" if service == "s3api" else service
    if model_name not in SESSION.get_available_services():
        return [f"aws {service}: no such service"]
    model = SESSION.get_service_model(model_name)
    names = {xform_name(name, "-"): name for name in model.operation_names}
    if operation not in names:
        return [f"aws {service} {operation}: no such operation"]
    shape = model.operation_model(names[operation]).input_shape
    members = {f"--{xform_name(m, '-')}" for m in (shape.members if shape else {})}
    members |= {f"--no-{m[2:]}" for m in members}
    unknown = options - members - GLOBAL
    return [f"aws {service} {operation}: no option {o}" for o in sorted(unknown)]


COMMANDS = [(page.name, words) for page in PAGES for words in aws_commands(page.read_text())]


def test_the_pages_hold_aws_lines_to_check():
    assert len(COMMANDS) > 30


@pytest.mark.parametrize(("page", "words"), COMMANDS, ids=[f"{p}:{' '.join(w[:3])}" for p, w in COMMANDS])
def test_every_aws_line_names_a_real_operation_and_options(page, words):
    assert problems(words) == [], f"{page}: {' '.join(words)}"


def test_the_check_finds_a_misspelled_option_and_operation():
    """The EC2 guide's own typo (the harvest: `--capacity-reservation-id`, singular) and an operation that does not exist."""
    assert problems(["aws", "ec2", "describe-capacity-reservation-topology", "--capacity-reservation-id", "cr-1"]) == [
        "aws ec2 describe-capacity-reservation-topology: no option --capacity-reservation-id"
    ]
    assert problems(["aws", "ec2", "describe-capacity-block", "--region", "x"]) == ["aws ec2 describe-capacity-block: no such operation"]
    assert problems(["aws", "ec2", "describe-capacity-reservations", "--capacity-reservation-ids", "cr-1", "--region", "x"]) == []
