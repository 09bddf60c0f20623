"""One statement every customer-managed key of the kit carries: grants only for AWS resources.

AWS Control Tower's proactive control CT.KMS.PR.3 rejects a key whose policy lacks it. Services that encrypt
on the kit's behalf (EBS through EC2 and Auto Scaling, EKS secrets, Image Builder) create their grants with
`kms:GrantIsForAWSResource` true, and service principals with `aws:PrincipalIsAWSService` true, so the Deny
stops only a person or a role handing out a grant by hand.
https://docs.aws.amazon.com/controltower/latest/controlreference/ct-kms-pr-3.html
https://docs.aws.amazon.com/kms/latest/developerguide/grant-authorization.html
"""

from __future__ import annotations

import aws_cdk as cdk
import jsii
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import IConstruct

SID = "GrantsOnlyForAwsResources"


def grants_only_for_aws_resources() -> iam.PolicyStatement:
    return iam.PolicyStatement(
        sid=SID,
        effect=iam.Effect.DENY,
        principals=[iam.AnyPrincipal()],
        actions=["kms:CreateGrant"],
        resources=["*"],
        conditions={"BoolIfExists": {"kms:GrantIsForAWSResource": "false", "aws:PrincipalIsAWSService": "false"}},
    )


@jsii.implements(cdk.IAspect)
class GrantsOnlyForAwsResources:
    """Adds the statement to every kms.Key in scope, including keys added by later changes."""

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, kms.Key):
            node.add_to_resource_policy(grants_only_for_aws_resources())
