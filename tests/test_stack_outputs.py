"""Every stack's Outputs by name, for the default profile: the names deployed stacks and operators depend on.

A stack reads a sibling's value through Fn::GetStackOutput of a named output (weak cross-stack references,
cdk.json "@aws-cdk/core:defaultCrossStackReferences"), and each such name carries the logical id of what it
publishes (PublishOutputRefVpc8378EB38...). A changed name means a renamed, so replaced, resource (a new
VPC, a new cluster) or a consumer that no longer finds its input: the deployed kit no longer updates in
place. The plain outputs (AccessHostId, WeightsBucket, ...) are what runbooks and `pdkit` read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pdkit.model.plan import PURCHASE_STACK, STACKS

WHY = (
    "deployed stacks read these names (Fn::GetStackOutput, runbooks, pdkit), and a PublishOutput name changes only "
    "when the logical id it publishes does: keep the construct ids, or plan the migration and update this list"
)

OUTPUTS = {
    "network": [
        "PrivateSubnetA",
        "PrivateSubnetB",
        "PrivateSubnetC",
        "PublishOutputRefVpc8378EB385002A76F",
        "PublishOutputRefVpcprivateSubnet1SubnetCEAD3716B32F8C97",
        "PublishOutputRefVpcprivateSubnet2Subnet2DE7549C5AB7D134",
        "PublishOutputRefVpcprivateSubnet3SubnetA5AC68D91D84903E",
        "VpcId",
    ],
    "cluster": [
        "AccessHostId",
        "ClusterEndpoint",
        "ClusterName",
        "PublishOutputFnGetAttClusterEB0386A7Arn0CAA3DA3",
        "PublishOutputFnGetAttClusterEB0386A7CertificateAuthorityDataF473DF92",
        "PublishOutputFnGetAttClusterEB0386A7ClusterSecurityGroupId57855648",
        "PublishOutputFnGetAttClusterEB0386A7EndpointBF334942",
        "PublishOutputFnGetAttClusterKubectlProviderframeworkonEvent68E0CF80Arn7CBE6899",
        "PublishOutputRefClusterEB0386A7D87642F6",
    ],
    "capacity": [
        "DecodeLaunchTemplateId",
        "NotificationsTopic",
        "PrefillLaunchTemplateId",
        "PublishOutputRefBlockLifecycleNotifications766CD0F3574B92A2",
    ],
    "images": ["BuildProject", "RouterImage", "SglangDeepepImage", "SglangEfaImage", "ValidationImage"],
    "serving": ["Namespace", "WeightsBucket", "WeightsPrefix"],
    "observability": ["InfrastructureDashboard", "PrometheusQueryEndpoint", "ServingDashboard"],
    "ami": ["CandidateParameter", "ImageParameter", "PipelineArn"],
}
# The purchase stack, only with capacity.purchase (the `bought` kit): ReservationId is what `pdkit` reads
# (pdkit.ops.capacity.RESERVATION_OUTPUT); the PublishOutput is what the capacity and observability stacks read.
PURCHASE_OUTPUTS = ["PublishOutputFnGetAttPurchaseBlock51AE2C65ReservationId444FC661", "ReservationId"]


def _stack_outputs(value: Any) -> Iterator[dict[str, str]]:
    """Every Fn::GetStackOutput in a template."""
    if isinstance(value, dict):
        if "Fn::GetStackOutput" in value:
            yield value["Fn::GetStackOutput"]
        for child in value.values():
            yield from _stack_outputs(child)
    elif isinstance(value, list):
        for child in value:
            yield from _stack_outputs(child)


def test_every_stack_is_listed():
    assert sorted(OUTPUTS) == sorted(STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_outputs_keep_their_names(kit, stack):
    names = set(kit.template_json(stack).get("Outputs", {}))
    expected = set(OUTPUTS[stack])
    assert names == expected, f"{stack} stack outputs: new {sorted(names - expected)}, gone {sorted(expected - names)}; {WHY}"


@pytest.mark.parametrize("stack", STACKS)
def test_no_output_is_an_export(kit, stack):
    """An Export (a strong reference) would lock the producer: CloudFormation refuses to change or delete an
    export that another stack imports, so the kit's stacks could no longer be updated one at a time."""
    exports = {name: o["Export"] for name, o in kit.template_json(stack).get("Outputs", {}).items() if "Export" in o}
    assert exports == {}, f"{stack} stack exports {exports}: cross-stack references must stay weak (cdk.json)"


@pytest.mark.parametrize("stack", STACKS)
def test_every_cross_stack_read_names_a_listed_output(kit, stack):
    """What a stack reads from a sibling is among that sibling's listed outputs, so the list above covers it."""
    by_name = {s.stack_name: key for key, s in kit.stacks.items()}
    reads = list(_stack_outputs(kit.template_json(stack)))
    for read in reads:
        producer = by_name[read["StackName"]]
        assert read["OutputName"] in OUTPUTS[producer], f"{stack} reads {producer} output {read['OutputName']}, not listed; {WHY}"
    if stack != "network":
        assert reads, f"{stack} reads nothing from a sibling stack: this test has lost its subject"


def test_the_purchase_stack_outputs_keep_their_names(bought):
    """A renamed purchase resource would publish another output name: the capacity stack would lose the bought id, and
    a new logical id would be a new resource (its Create adopts the block by tag, but the rename is still a migration)."""
    names = set(bought.template_json(PURCHASE_STACK).get("Outputs", {}))
    assert names == set(PURCHASE_OUTPUTS), f"purchase stack outputs: new {sorted(names - set(PURCHASE_OUTPUTS))}; {WHY}"


@pytest.mark.parametrize("stack", [*STACKS, PURCHASE_STACK])
def test_with_a_purchase_every_cross_stack_read_names_a_listed_output(bought, stack):
    """With capacity.purchase, too, what a stack reads from a sibling is a listed output, and every output is listed."""
    listed = {**OUTPUTS, PURCHASE_STACK: PURCHASE_OUTPUTS}
    by_name = {s.stack_name: key for key, s in bought.stacks.items()}
    for read in _stack_outputs(bought.template_json(stack)):
        producer = by_name[read["StackName"]]
        assert read["OutputName"] in listed[producer], f"{stack} reads {producer} output {read['OutputName']}, not listed; {WHY}"
    assert set(bought.template_json(stack).get("Outputs", {})) == set(listed[stack]), f"{stack}: {WHY}"
