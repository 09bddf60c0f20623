"""The Capacity Block bought by `cdk deploy` (opt-in: capacity.purchase): a custom resource that purchases
once on Create, never on Update, and keeps the block on Delete (pdkit/functions/capacity_purchase.py).

`reservation_id` is a token for its ReservationId attribute; every consumer of the reservation id in the
kit takes it from here (through the purchase stack's output) when the profile buys at deploy time.

What the function may buy is synthesized into its environment, not read from the request: a direct invoke with
other properties buys nothing (pdkit/functions/capacity_purchase.py, `foreign` and `_create`).
"""

from __future__ import annotations

import json

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from pdkit.functions import capacity_purchase as handler
from pdkit.model.plan import Plan, PurchasePlan
from pdkit.ops.purchase import PURCHASE_TAG
from stacks.kit_function import KitFunction
from stacks.policy import acknowledge

# A handler that times out never answers, and CloudFormation then waits an hour for the custom resource. The
# worst case: reads (51 s each at worst, pdkit.ops.client_config.READS), the dry run and the purchase (70 s each,
# PURCHASE), the lookup after an unclear answer, and up to a minute waiting for the new block to be visible.
TIMEOUT_MINUTES = 10
# How long CloudFormation waits for the answer (1-3600 s; the default is an hour): the function's timeout, plus a
# minute for Lambda's asynchronous queue, so a handler that answers in time is never cut off and one that dies
# is reported within minutes, not an hour
# (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudformation-customresource.html).
SERVICE_TIMEOUT_MINUTES = TIMEOUT_MINUTES + 1


class CapacityPurchase(Construct):
    def __init__(
        self, scope: Construct, id_: str, *, plan: Plan, purchase: PurchasePlan, vpc: ec2.IVpc, key: kms.IKey, log_retention_days: int
    ) -> None:
        super().__init__(scope, id_)
        stack = cdk.Stack.of(self)
        self.function = KitFunction(
            self,
            "Function",
            handler="pdkit.functions.capacity_purchase.handler",
            modules=(
                "errors.py",
                "ops/aws_errors.py",
                "ops/client_config.py",
                "ops/capacity.py",
                "ops/purchase.py",
                "model/reservation.py",
                "functions/cfn_response.py",
                "functions/reservation_guard.py",
                "functions/capacity_purchase.py",
            ),
            description=f"{plan.name}: buy Capacity Block offering {purchase.offering_id} once, at the fee the profile confirms",
            vpc=vpc,
            key=key,
            log_retention_days=log_retention_days,
            timeout_minutes=TIMEOUT_MINUTES,
            environment={
                handler.ENV_PURCHASE: json.dumps(purchase.resource_properties(), sort_keys=True),
                handler.ENV_PURCHASE_ID: purchase.purchase_id,
                # The stack's own id: a stack created again gets a new one, and this function with it.
                handler.ENV_STACK_ID: stack.stack_id,
            },
        )
        # Lambda retries a failed asynchronous invocation twice by default; a purchase is never re-run by a
        # retry (the handler also adopts a block already carrying its tag). Throttled or system-error events are
        # still retried for up to 6 hours: an event older than a minute is dropped instead, so a Create that waited in
        # Lambda's queue never buys after CloudFormation has given up on it and rolled back (60 s is the minimum).
        # https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html
        self.function.function.configure_async_invoke(retry_attempts=0, max_event_age=cdk.Duration.seconds(60))
        reservations = stack.format_arn(service="ec2", resource="capacity-reservation", resource_name="*")
        read = self.function.allow(
            "Read",
            # Neither action supports resource-level permissions (Service Authorization Reference, Amazon EC2).
            iam.PolicyStatement(actions=["ec2:DescribeCapacityBlockOfferings", "ec2:DescribeCapacityReservations"], resources=["*"]),
        )
        acknowledge(
            read,
            {
                "AwsSolutions-IAM5[Resource::*]": "ec2:DescribeCapacityBlockOfferings and ec2:DescribeCapacityReservations support no "
                "resource-level permissions; both only read."
            },
        )
        buy = self.function.allow(
            "Buy",
            # Only a purchase that carries this deployment's purchase tag, creating Capacity Reservations in this account
            # and region (aws:RequestedRegion is supported by every EC2 action: EC2 User Guide, ExamplePolicies_EC2).
            iam.PolicyStatement(
                actions=["ec2:PurchaseCapacityBlock"],
                resources=[reservations],
                conditions={
                    "StringEquals": {f"aws:RequestTag/{PURCHASE_TAG}": purchase.purchase_id, "aws:RequestedRegion": plan.region},
                    "ForAllValues:StringEquals": {"aws:TagKeys": [PURCHASE_TAG]},
                },
            ),
            # Tags only as part of that purchase (TagSpecifications), never on an existing resource.
            iam.PolicyStatement(
                actions=["ec2:CreateTags"],
                resources=[reservations],
                conditions={
                    "StringEquals": {"ec2:CreateAction": "PurchaseCapacityBlock", f"aws:RequestTag/{PURCHASE_TAG}": purchase.purchase_id}
                },
            ),
            # The Update handler tells a rollback from a deploy by its own stack's status (as the reservation guard does).
            iam.PolicyStatement(actions=["cloudformation:DescribeStacks"], resources=[stack.stack_id]),
        )
        acknowledge(
            buy,
            {
                f"AwsSolutions-IAM5[Resource::arn:aws:ec2:{plan.region}:{plan.account or '<AWS::AccountId>'}:capacity-reservation/*]": "The "
                "reservation's cr- id is assigned by the purchase itself; the wildcard is that id, in this account and region, and the "
                "statements also require the kit's purchase tag (PurchaseCapacityBlock) or the purchase as the creating action (CreateTags).",
            },
        )
        self.resource = cdk.CustomResource(
            self,
            "Block",
            service_token=self.function.function.function_arn,
            resource_type="Custom::CapacityBlockPurchase",
            # No RETAIN: the Delete must reach the handler, which keeps the block and names it in the stack events.
            properties=purchase.resource_properties(),
            service_timeout=cdk.Duration.minutes(SERVICE_TIMEOUT_MINUTES),
        )
        # The function acts only on requests for this resource (its logical id is known only once the resource exists).
        resource = self.resource.node.default_child
        assert isinstance(resource, cdk.CfnResource), "aws-cdk-lib's CustomResource wraps one CfnResource"
        self.function.function.add_environment(handler.ENV_RESOURCE_ID, stack.get_logical_id(resource))
        self.reservation_id = self.resource.get_att_string("ReservationId")
        self.start = self.resource.get_att_string("StartDate")
        self.end = self.resource.get_att_string("EndDate")
