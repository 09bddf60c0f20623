"""What every command starts from: the plan of the chosen profile, and AWS clients for it."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pdkit.errors import KitError

if TYPE_CHECKING:
    from pdkit.model.plan import Plan


def load_plan(ref: str | None) -> Plan:
    from pdkit import deployment

    return deployment.load(ref)


# --- follow-up commands ---------------------------------------------------------------------------------

# The invocation's context that every follow-up must repeat: without it the next command reads another
# profile (cdk.json's default), other credentials or another region than the one just shown.
CONTEXT_FLAGS = (("--profile", "profile"), ("--aws-profile", "aws_profile"), ("--region", "region"))
_BACKTICKED_PDKIT = re.compile(r"`(pdkit [^`]+)`")


def pdkit_command(args: argparse.Namespace, rest: str) -> str:
    """`pdkit <rest>` with the --profile, --aws-profile and --region this command was run with.

    A flag `rest` already names is not repeated, so rendering a rendered command changes nothing.
    """
    if rest.split()[:1] == ["init"]:  # init writes a new profile: it takes no deployment, credentials or region
        return f"pdkit {rest}"
    given = set(rest.split())
    flags = [f"{flag} {shlex.quote(value)}" for flag, attr in CONTEXT_FLAGS if (value := getattr(args, attr, None)) and flag not in given]
    return " ".join(["pdkit", rest, *flags])


def make_command(args: argparse.Namespace, target: str) -> str:
    """`make <target>` for the same deployment profile and credentials (the stacks deploy to the profile's region)."""
    profile, aws_profile = getattr(args, "profile", None), getattr(args, "aws_profile", None)
    env = f"AWS_PROFILE={shlex.quote(aws_profile)} " if aws_profile else ""
    return f"{env}make {target}" + (f" PROFILE={shlex.quote(profile)}" if profile else "")


def in_context(args: argparse.Namespace, text: str) -> str:
    """A hint with every `pdkit ...` command in backticks rendered by `pdkit_command`, so it runs as shown."""
    return _BACKTICKED_PDKIT.sub(lambda m: f"`{pdkit_command(args, m.group(1).removeprefix('pdkit '))}`", text)


# --- no placeholder account in what a command writes ----------------------------------------------------


def refuse_placeholders(plan: Plan, command: str, written: Sequence[tuple[str, str]]) -> None:
    """Refuse to write an image URI or bucket name that holds the synth placeholder account.

    `written` pairs each value a command is about to write with the flag that sets it. A manifest
    naming account 000000000000 applies cleanly and then fails at image pull or at the first S3
    read, far from its cause; the flag is the fix. Offline commands stay offline (no credentials, no
    CloudFormation read): the value is the operator's account, one `aws sts` call away.
    """
    from pdkit.render.serving.inputs import PLACEHOLDER_ACCOUNT

    for value, flag in written:
        if PLACEHOLDER_ACCOUNT not in value:
            continue
        example = (
            plan.weights.bucket("<account>") + " (serving stack output WeightsBucket)"
            if "bucket" in flag
            else f"<account>.dkr.ecr.{plan.region}.amazonaws.com"
        )
        raise KitError(
            f"{command}: the profile sets no aws.account, so {value} would name the placeholder account {PLACEHOLDER_ACCOUNT}. "
            f"Fix: pass {flag} {example}, or set aws.account in {plan.profile_path or 'the profile'} "
            "(your account: `aws sts get-caller-identity --query Account --output text`)"
        )
