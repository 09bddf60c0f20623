"""Every custom resource tells CloudFormation how long to wait: its handler's worst case, not an hour.

Without ServiceTimeout, CloudFormation waits 3600 s for an answer a crashed or timed-out handler never sends
(1-3600 s, https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudformation-customresource.html).
The worst case is the timeout of the Lambda function the service token names: the kit's own handlers answer
themselves, and aws-cdk-lib's provider framework answers from its onEvent function, which calls the user handler
synchronously with a 15-minute timeout (FRAMEWORK_HANDLER_TIMEOUT, aws-cdk-lib
custom-resources/lib/provider-framework/provider.js; no provider here has an isComplete handler). The rule lives
in stacks/custom_resource_timeout.py, an aspect of every kit stack.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_
from aws_cdk import custom_resources as cr
from aws_cdk.assertions import Template as CdkTemplate

from pdkit.model import profile_files
from stacks.kit_stack import KitStack
from tests.fixtures.templates import Template, profiles, templates_of, templates_of_kit

LAMBDA_DEFAULT_TIMEOUT = 3  # AWS::Lambda::Function Timeout when absent (seconds)
SLACK = 120
ELSEWHERE = "arn:aws:lambda:eu-south-2:123456789012:function:elsewhere"  # a function outside the app  # "not far beyond": at most two minutes past the handler's own limit


def _custom(kind: str) -> bool:
    return kind.startswith("Custom::") or kind == "AWS::CloudFormation::CustomResource"


def _handler(token: Any, template: Template) -> tuple[Template, dict[str, Any]] | None:
    """The Lambda function a service token names, in this template or (Fn::GetStackOutput) the producing one."""
    if isinstance(token, dict) and "Fn::GetStackOutput" in token:
        ref = token["Fn::GetStackOutput"]
        producer = next(t for t in templates_of_kit(template.kit, template.profile) if t.stack_name == ref["StackName"])
        return _handler(producer.body["Outputs"][ref["OutputName"]]["Value"], producer)
    if isinstance(token, dict) and "Fn::GetAtt" in token:
        logical_id, attribute = token["Fn::GetAtt"]
        function = template.resources.get(logical_id)
        if attribute == "Arn" and function and function["Type"] == "AWS::Lambda::Function":
            return template, function
    return None


@pytest.mark.parametrize("profile", profiles())
def test_every_custom_resource_waits_as_long_as_its_handler_can_take(profile):
    """ServiceTimeout in 1..3600, at least the handler's Lambda timeout (else CloudFormation gives up on an answer
    still coming) and at most two minutes beyond it (else a dead handler holds the stack for the difference)."""
    seen, wrong = 0, []
    for template in templates_of(profile):
        for logical_id, resource in template.resources.items():
            if not _custom(resource["Type"]):
                continue
            seen += 1
            props = resource["Properties"]
            found = _handler(props["ServiceToken"], template)
            assert found, f"{template.where(logical_id)}: service token {props['ServiceToken']} names no Lambda function of the kit"
            worst = int(found[1]["Properties"].get("Timeout", LAMBDA_DEFAULT_TIMEOUT))
            timeout = props.get("ServiceTimeout")
            if timeout is None or not (1 <= int(timeout) <= 3600 and worst <= int(timeout) <= worst + SLACK):
                wrong.append(f"{template.where(logical_id)} {resource['Type']}: ServiceTimeout {timeout}, handler timeout {worst} s")
    assert not wrong, "\n".join(wrong)
    assert seen >= 5, "the kubectl provider's charts, the guard, the image build and the default-SG restriction at least"


def test_cdk_generated_resources_are_covered():
    """The ones the kit does not write itself: the kubectl provider's Helm charts and manifests (cluster and serving
    stacks), CfnJson and the VPC's default security group restriction."""
    kinds = {
        r["Type"]: r["Properties"].get("ServiceTimeout")
        for t in templates_of(profile_files.default_profile_name())
        for r in t.resources.values()
        if _custom(r["Type"])
    }
    for kind in (
        "Custom::AWSCDK-EKS-HelmChart",
        "Custom::AWSCDK-EKS-KubernetesResource",
        "Custom::AWSCDKCfnJson",
        "Custom::VpcRestrictDefaultSG",
    ):
        assert kinds.get(kind) is not None, kind


def _stack() -> cdk.Stack:
    return KitStack(cdk.App(), "Timeouts", zones=["eu-south-2a"])


def _function(stack: cdk.Stack, id_: str, minutes: int) -> lambda_.Function:
    return lambda_.Function(
        stack,
        id_,
        runtime=lambda_.Runtime.PYTHON_3_14,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context): pass"),
        timeout=cdk.Duration.minutes(minutes),
    )


def _service_timeout(stack: cdk.Stack) -> str:
    (resource,) = CdkTemplate.from_stack(stack).find_resources("Custom::Thing").values()
    return str(resource["Properties"]["ServiceTimeout"])


def test_a_function_backed_resource_waits_its_function_timeout_and_a_minute():
    stack = _stack()
    cdk.CustomResource(stack, "Thing", service_token=_function(stack, "Handler", 5).function_arn, resource_type="Custom::Thing")
    assert _service_timeout(stack) == "360"


def test_a_provider_framework_resource_waits_the_framework_timeout():
    """The framework's onEvent function (15 min) is what answers CloudFormation, whatever the user handler's timeout."""
    stack = _stack()
    provider = cr.Provider(stack, "Provider", on_event_handler=_function(stack, "Handler", 2))
    cdk.CustomResource(stack, "Thing", service_token=provider.service_token, resource_type="Custom::Thing")
    assert _service_timeout(stack) == "960"


def test_an_explicit_service_timeout_is_kept():
    stack = _stack()
    cdk.CustomResource(
        stack,
        "Thing",
        service_token=_function(stack, "Handler", 5).function_arn,
        resource_type="Custom::Thing",
        service_timeout=cdk.Duration.seconds(330),
    )
    assert _service_timeout(stack) == "330"


def test_a_waiting_provider_is_refused_with_the_fix():
    """A provider with an isComplete handler polls for its totalTimeout: the aspect does not guess it."""
    stack = _stack()
    provider = cr.Provider(
        stack, "Provider", on_event_handler=_function(stack, "Handler", 2), is_complete_handler=_function(stack, "Done", 2)
    )
    cdk.CustomResource(stack, "Thing", service_token=provider.service_token, resource_type="Custom::Thing")
    with pytest.raises(Exception, match=r"isComplete handler.*Fix: give the custom resource an explicit ServiceTimeout"):
        cdk.App.of(stack).synth()


def test_a_token_naming_no_function_of_the_app_is_refused_with_the_fix():
    stack = _stack()
    cdk.CustomResource(stack, "Thing", service_token=ELSEWHERE, resource_type="Custom::Thing")
    with pytest.raises(Exception, match=r"worst case is unknown.*Fix: give the custom resource an explicit ServiceTimeout"):
        cdk.App.of(stack).synth()


def test_the_purchase_resource_waits_as_long_as_its_handler_can_take(bought):
    """The kit that buys its block (capacity.purchase) adds the purchase custom resource: held to the same bound."""
    templates = templates_of_kit(bought, "bought")
    purchase = [(t, r) for t in templates for r in t.resources.values() if _custom(r["Type"]) and "Purchase" in r["Type"]]
    assert purchase
    for template, resource in purchase:
        found = _handler(resource["Properties"]["ServiceToken"], template)
        assert found
        worst = int(found[1]["Properties"].get("Timeout", LAMBDA_DEFAULT_TIMEOUT))
        assert worst <= int(resource["Properties"]["ServiceTimeout"]) <= worst + SLACK
