"""Deploy-time guard: refuses the deploy before any GPU node group exists when the reservation is the
placeholder, unknown, expired or cancelled, or differs from the profile; lets a rollback restore the
previous reservation id; waits for a block the stack's purchase resource just bought to become visible
(pdkit/functions/reservation_guard.py)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from pdkit.functions.reservation_guard import FROM_PURCHASE
from pdkit.model.plan import Plan
from stacks.kit_function import KitFunction
from stacks.policy import acknowledge


class ReservationGuard(Construct):
    def __init__(
        self, scope: Construct, id_: str, *, plan: Plan, reservation_id: str, vpc: ec2.IVpc, key: kms.IKey, log_retention_days: int
    ) -> None:
        super().__init__(scope, id_)
        self.function = KitFunction(
            self,
            "Function",
            handler="pdkit.functions.reservation_guard.handler",
            modules=("model/reservation.py", "functions/cfn_response.py", "functions/reservation_guard.py"),
            description=f"{plan.name}: refuse deploys onto a wrong or stale Capacity Block",
            vpc=vpc,
            key=key,
            log_retention_days=log_retention_days,
            reserved_concurrency=plan.function_concurrency.per_function,
        )
        describe = self.function.allow(
            "DescribeReservations", iam.PolicyStatement(actions=["ec2:DescribeCapacityReservations"], resources=["*"])
        )
        acknowledge(
            describe,
            {
                "AwsSolutions-IAM5[Resource::*]": "ec2:DescribeCapacityReservations supports no resource-level permissions; the guard only reads."
            },
        )
        # A failed check is let through while this stack rolls back (pdkit/functions/reservation_guard.py):
        # the guard reads the status of its own stack and of no other.
        self.function.allow(
            "ReadOwnStack",
            iam.PolicyStatement(actions=["cloudformation:DescribeStacks"], resources=[cdk.Stack.of(self).stack_id]),
        )
        self.check = cdk.CustomResource(
            self,
            "Check",
            service_token=self.function.function.function_arn,
            resource_type="Custom::CapacityBlockGuard",
            properties={
                "ReservationId": reservation_id,
                "InstanceType": plan.instance.name,
                "InstanceCount": str(plan.instance_count),
                "AvailabilityZone": plan.block_az,
                # The id comes from the purchase resource beside it: the guard waits for EC2 to show a block
                # bought moments ago instead of refusing it (pdkit/functions/reservation_guard.py).
                **({"ReservationFrom": FROM_PURCHASE} if plan.purchase else {}),
            },
        )
