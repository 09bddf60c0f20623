"""Build every stack of the kit from a plan. app.py and the tests both call this."""

from __future__ import annotations

import aws_cdk as cdk

from pdkit.model.plan import Plan
from stacks.ami_stack import AmiStack
from stacks.capacity_stack import CapacityStack
from stacks.cluster_stack import ClusterStack
from stacks.images_stack import ImagesStack
from stacks.key_policy import GrantsOnlyForAwsResources
from stacks.network_stack import NetworkStack
from stacks.observability_stack import ObservabilityStack
from stacks.policy import attach
from stacks.serving_stack import ServingStack


def build_kit(app: cdk.App, plan: Plan, *, with_policy: bool = True) -> dict[str, cdk.Stack]:
    env = cdk.Environment(account=plan.account, region=plan.region)
    cdk.Tags.of(app).add("pdkit:deployment", plan.name)
    cdk.Aspects.of(app).add(GrantsOnlyForAwsResources())
    network = NetworkStack(app, plan.stack_names["network"], plan=plan, env=env, description=f"{plan.name}: VPC, NAT, endpoints, flow logs")
    cluster = ClusterStack(
        app,
        plan.stack_names["cluster"],
        plan=plan,
        vpc=network.vpc,
        env=env,
        description=f"{plan.name}: EKS cluster, add-ons, system nodes, access host",
    )
    capacity = CapacityStack(
        app,
        plan.stack_names["capacity"],
        plan=plan,
        vpc=network.vpc,
        cluster=cluster.cluster,
        env=env,
        description=f"{plan.name}: GPU node groups on Capacity Block {plan.reservation_label}, guard, lifecycle automation"
        if plan.market == "capacity-block"
        else f"{plan.name}: on-demand GPU node groups (rehearsal of {plan.rehearses or 'a block profile'})",
    )
    images = ImagesStack(
        app,
        plan.stack_names["images"],
        plan=plan,
        vpc=network.vpc,
        env=env,
        description=f"{plan.name}: ECR repositories and the in-region image build",
    )
    serving = ServingStack(
        app,
        plan.stack_names["serving"],
        plan=plan,
        cluster=cluster.cluster,
        env=env,
        description=f"{plan.name}: weights bucket, serving identity, DisaggregatedSet and router",
    )
    serving.add_stack_dependency(images, reason="pods pull the images the images stack names")
    observability = ObservabilityStack(
        app,
        plan.stack_names["observability"],
        plan=plan,
        vpc=network.vpc,
        cluster=cluster.cluster,
        reservation_id=capacity.reservation_id,
        topic=capacity.lifecycle.topic,
        env=env,
        description=f"{plan.name}: Prometheus scraper, dashboards, alarms, Capacity Block clock",
    )
    ami = AmiStack(
        app,
        plan.stack_names["ami"],
        plan=plan,
        vpc=network.vpc,
        env=env,
        description=f"{plan.name}: GPU node image pipeline (EC2 Image Builder, ami/)",
    )
    stacks: dict[str, cdk.Stack] = {
        "network": network,
        "cluster": cluster,
        "capacity": capacity,
        "images": images,
        "serving": serving,
        "observability": observability,
        "ami": ami,
    }
    if with_policy:
        attach(app)
    return stacks
