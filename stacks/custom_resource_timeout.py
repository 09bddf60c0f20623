"""How long CloudFormation waits for a custom resource: as long as its handler can take, not an hour.

Without `ServiceTimeout` CloudFormation waits 3600 s for a response that a crashed or timed-out handler
never sends, and the stack sits in CREATE/UPDATE/DELETE_IN_PROGRESS the whole hour (1-3600 s:
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudformation-customresource.html).
The aspect gives every custom resource of a kit stack (the kit's own and those CDK generates: the kubectl
provider's Helm charts and manifests, CfnJson, the default security group restriction, ...) the worst
case of whatever answers it, plus a minute for the response to arrive:

- a Lambda function as the service token answers itself: its own timeout;
- a CDK provider framework (aws-cdk-lib custom-resources/lib/provider-framework/provider.js) answers from
  its onEvent function, which calls the user handler synchronously: that function's timeout (15 min,
  FRAMEWORK_HANDLER_TIMEOUT). A provider with an isComplete handler polls for up to its totalTimeout
  instead; none is used here, and the aspect refuses one rather than guess its wait.

A resource that already sets ServiceTimeout keeps it (tests/test_custom_resources.py holds it to the same bound).
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_lambda as lambda_
from aws_cdk import custom_resources as cr
from constructs import IConstruct

MAX_SECONDS = 3600
MARGIN_SECONDS = 60  # the handler's response travels through S3 after its last moment
LAMBDA_DEFAULT_TIMEOUT = 3  # seconds, when a function sets none (AWS::Lambda::Function Timeout)


def is_custom_resource(resource: cdk.CfnResource) -> bool:
    kind = resource.cfn_resource_type
    return kind.startswith("Custom::") or kind == "AWS::CloudFormation::CustomResource"


def _props(resource: cdk.CfnResource) -> dict[str, Any]:
    return dict(resource._cfn_properties or {})


def _function_timeout(function: cdk.CfnResource) -> int:
    if isinstance(function, lambda_.CfnFunction):
        return int(function.timeout or LAMBDA_DEFAULT_TIMEOUT)
    return int(_props(function).get("Timeout", LAMBDA_DEFAULT_TIMEOUT))


def worst_case_seconds(resource: cdk.CfnResource) -> int:
    """The longest the service token's function can take before CloudFormation has its answer."""
    props = _props(resource)
    token = props.get("ServiceToken", props.get("serviceToken"))
    reference = cdk.Tokenization.reverse(token) if isinstance(token, str) else None
    function = reference.target if isinstance(reference, cdk.Reference) else None
    if not isinstance(function, cdk.CfnResource) or function.cfn_resource_type != "AWS::Lambda::Function":
        raise ValueError(
            f"{resource.node.path}: its service token is not a Lambda function of this app, so its worst case is unknown. "
            "Fix: give the custom resource an explicit ServiceTimeout (cdk.CustomResource(service_timeout=...))"
        )
    provider = function.node.scope.node.scope if function.node.scope else None
    if isinstance(provider, cr.Provider) and provider.is_complete_handler is not None:
        raise ValueError(
            f"{resource.node.path}: a provider framework with an isComplete handler waits up to its totalTimeout. "
            "Fix: give the custom resource an explicit ServiceTimeout of that totalTimeout plus a minute"
        )
    return _function_timeout(function)


def service_timeout(resource: cdk.CfnResource) -> int:
    return min(MAX_SECONDS, worst_case_seconds(resource) + MARGIN_SECONDS)


@jsii.implements(cdk.IAspect)
class ServiceTimeoutFromHandler:
    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, cdk.CfnResource) or not is_custom_resource(node):
            return
        props = _props(node)
        if "ServiceTimeout" in props or "serviceTimeout" in props:
            return
        node.add_property_override("ServiceTimeout", str(service_timeout(node)))
