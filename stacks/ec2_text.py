"""Security-group descriptions EC2 accepts, checked at synth: a refused one fails the stack's first create.

EC2 allows up to 255 characters of `a-zA-Z0-9. _-:/()#,@[]+=&;{}!$*` in a group's description and in each rule's
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_IpRange.html, API_CreateSecurityGroup.html); cfn-lint
checks only the group's, so an apostrophe in a rule's description reaches CloudFormation and fails there, after
the stacks before it were created. The aspect refuses it at `cdk synth`, naming the construct and the characters.
"""

from __future__ import annotations

import re
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_ec2 as ec2
from constructs import IConstruct

EC2_TEXT = re.compile(r"[a-zA-Z0-9. _\-:/()#,@\[\]+=&;{}!$*]{0,255}")


def refused(text: str) -> str | None:
    """Why EC2 refuses this description, or None."""
    if len(text) > 255:
        return f"{len(text)} characters (at most 255)"
    bad = sorted({c for c in text if not EC2_TEXT.fullmatch(c)})
    return f"characters EC2 refuses: {''.join(bad)!r}" if bad else None


def _descriptions(node: cdk.CfnResource) -> list[Any]:
    stack = cdk.Stack.of(node)
    if isinstance(node, ec2.CfnSecurityGroup):
        rules = [*(stack.resolve(node.security_group_ingress) or []), *(stack.resolve(node.security_group_egress) or [])]
        return [node.group_description, *(r.get("description") for r in rules if isinstance(r, dict))]
    if isinstance(node, ec2.CfnSecurityGroupIngress | ec2.CfnSecurityGroupEgress):
        return [node.description]
    return []


@jsii.implements(cdk.IAspect)
class Ec2DescriptionsAccepted:
    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, cdk.CfnResource):
            return
        for text in _descriptions(node):
            if isinstance(text, str) and not cdk.Token.is_unresolved(text) and (why := refused(text)):
                raise ValueError(
                    f"{node.node.path}: security-group description {text!r} has {why}. "
                    "Fix: use only a-zA-Z0-9. _-:/()#,@[]+=&;{}!$* (EC2 API_IpRange)"
                )
