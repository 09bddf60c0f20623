"""What every command starts from: the plan of the chosen profile, and AWS clients for it."""

from __future__ import annotations

from typing import Any

from pdkit.errors import KitError
from pdkit.plan import Plan


def load_plan(ref: str | None) -> Plan:
    from pdkit import plan, profile_files

    profile, path = profile_files.load(ref)
    return plan.build(profile, profile_path=path)


def aws_session(*, aws_profile: str | None, region: str) -> Any:
    """A boto3 session for the operator's credentials (--aws-profile, else AWS_PROFILE / the SDK chain)."""
    import boto3
    import botocore.exceptions

    try:
        return boto3.Session(profile_name=aws_profile, region_name=region)
    except botocore.exceptions.ProfileNotFound:
        raise KitError(
            f"AWS credentials profile {aws_profile!r} not found. Fix: `aws configure list-profiles`, or drop --aws-profile to use AWS_PROFILE"
        ) from None
