"""Policy packs run on every synth, and the one way this kit acknowledges a finding."""

from __future__ import annotations

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks, NagPack, NIST80053R5Checks
from constructs import IConstruct

MIN_REASON = 40


def packs(scope: IConstruct) -> list[NagPack]:
    return [AwsSolutionsChecks(scope), NIST80053R5Checks(scope)]


def attach(app: cdk.App) -> None:
    """Every `cdk synth` of the kit runs both packs; unacknowledged errors fail the synth."""
    cdk.Validations.of(app).add_plugins(*packs(app))


def acknowledge(scope: IConstruct, reasons: dict[str, str]) -> None:
    """Acknowledge findings on one construct, each with a reason a reviewer can check.

    Rule ids are granular and plain (`AwsSolutions-IAM5[Resource::*]`, not `AwsSolutions::...`):
    the prefixed form silences `cdk synth` but not `validate_scope` (see README, Policy checks).
    """
    for rule, reason in reasons.items():
        if len(reason) < MIN_REASON:
            raise ValueError(f"acknowledgment of {rule} needs a real reason (>= {MIN_REASON} characters): {reason!r}")
        cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=rule, reason=reason))


NAMED_AZS = (
    "AZ names are written on purpose: they come from the profile so synth needs no AZ lookup (and no credentials), "
    "and the GPU node groups must land in the named AZ of the Capacity Block."
)


def named_az(resource: IConstruct) -> None:
    """Accept that this resource names its AZ, for CDK's CloudFormation validation and for cfn-lint (W3010)."""
    acknowledge(resource, {"CloudFormation-Validate::W3010": NAMED_AZS})
    cfn = resource if isinstance(resource, cdk.CfnResource) else resource.node.default_child
    assert isinstance(cfn, cdk.CfnResource)
    cfn.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3010"]}})
