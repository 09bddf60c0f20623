"""The purchase stack: the Capacity Block bought by `cdk deploy` (capacity.purchase), and nothing else.

It depends only on the network (its function runs in the VPC's private subnets like every kit function), not on
the cluster, so `make deploy` deploys it first, right after the operator typed the fee: the offering is bought
minutes after it was confirmed, not after the 20-40 minutes the cluster takes, while it could sell out. The capacity
stack, the guard, the lifecycle automation and the block clock read the bought id from its ReservationId
(a weak cross-stack reference, Fn::GetStackOutput); `pdkit` reads the ReservationId output, and when the stack is
gone (a failed first create rolled it back) the reservation's own purchase tag (pdkit/ops/capacity.py).

It exists only when the profile buys at deploy time (pdkit.model.plan.PURCHASE_STACK says why).
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from pdkit.model.plan import Plan
from pdkit.ops.capacity import RESERVATION_OUTPUT
from stacks.capacity_purchase import CapacityPurchase
from stacks.encrypted_log_group import logs_key
from stacks.kit_stack import KitStack


class PurchaseStack(KitStack):
    def __init__(self, scope: Construct, id_: str, *, plan: Plan, vpc: ec2.IVpc, **kwargs: Any) -> None:
        super().__init__(scope, id_, zones=plan.availability_zones, **kwargs)
        if plan.purchase is None:
            raise ValueError("the purchase stack exists only with capacity.purchase (pdkit.model.plan.PURCHASE_STACK)")
        key = logs_key(self, "OpsKey", description=f"{plan.name}: Capacity Block purchase (logs, dead letters)")
        self.purchase = CapacityPurchase(
            self, "Purchase", plan=plan, purchase=plan.purchase, vpc=vpc, key=key, log_retention_days=plan.log_retention_days
        )
        self.reservation_id = self.purchase.reservation_id
        cdk.CfnOutput(self, RESERVATION_OUTPUT, value=self.reservation_id, description="The Capacity Block this stack bought")
