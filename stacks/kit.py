"""Build every stack of the kit from a plan. app.py and the tests both call this."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import aws_cdk as cdk

from pdkit.model.plan import PURCHASE_STACK, Plan
from stacks.ami_stack import AmiStack
from stacks.capacity_stack import CapacityStack
from stacks.cluster_stack import ClusterStack
from stacks.images_stack import ImagesStack
from stacks.key_policy import GrantsOnlyForAwsResources
from stacks.network_stack import NetworkStack
from stacks.observability_stack import ObservabilityStack
from stacks.policy import attach
from stacks.purchase_stack import PurchaseStack
from stacks.serving_stack import ServingStack

S = TypeVar("S", bound=cdk.Stack)


def build_kit(app: cdk.App, plan: Plan, *, with_policy: bool = True) -> dict[str, cdk.Stack]:
    env = cdk.Environment(account=plan.account, region=plan.region)
    cdk.Tags.of(app).add("pdkit:deployment", plan.name)
    cdk.Aspects.of(app).add(GrantsOnlyForAwsResources())

    def stack(kind: Callable[..., S], key: str, what: str, **inputs: Any) -> S:
        return kind(app, plan.stack_names[key], plan=plan, env=env, description=f"{plan.name}: {what}", **inputs)

    network = stack(NetworkStack, "network", "VPC, NAT, endpoints, flow logs")
    # capacity.purchase: the block is bought in a stack of its own that needs only the network, deployed first.
    purchase = (
        stack(PurchaseStack, PURCHASE_STACK, f"Capacity Block bought from offering {plan.purchase.offering_id}", vpc=network.vpc)
        if plan.purchase
        else None
    )
    cluster = stack(ClusterStack, "cluster", "EKS cluster, add-ons, system nodes, access host", vpc=network.vpc)
    capacity = stack(
        CapacityStack,
        "capacity",
        f"GPU node groups on Capacity Block {plan.reservation_label}, guard, lifecycle automation"
        if plan.market == "capacity-block"
        else f"on-demand GPU node groups (rehearsal of {plan.rehearses or 'a block profile'})",
        vpc=network.vpc,
        cluster=cluster.cluster,
        reservation_id=purchase.reservation_id if purchase else plan.reservation_id,
    )
    images = stack(ImagesStack, "images", "ECR repositories and the in-region image build", vpc=network.vpc)
    serving = stack(ServingStack, "serving", "weights bucket, serving identity, DisaggregatedSet and router", cluster=cluster.cluster)
    serving.add_stack_dependency(images, reason="pods pull the images the images stack names")
    observability = stack(
        ObservabilityStack,
        "observability",
        "Prometheus scraper, dashboards, alarms, Capacity Block clock",
        vpc=network.vpc,
        cluster=cluster.cluster,
        reservation_id=capacity.reservation_id,
        topic=capacity.lifecycle.topic,
    )
    ami = stack(AmiStack, "ami", "GPU node image pipeline (EC2 Image Builder, ami/)", vpc=network.vpc)
    stacks: dict[str, cdk.Stack] = {
        "network": network,
        "cluster": cluster,
        "capacity": capacity,
        "images": images,
        "serving": serving,
        "observability": observability,
        "ami": ami,
        **({PURCHASE_STACK: purchase} if purchase else {}),
    }
    if with_policy:
        attach(app)
    return stacks
