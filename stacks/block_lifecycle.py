"""Block lifecycle automation: scale GPU node groups up when the block is delivered and to 0 at
T-minus the drain lead (from the reservation's current end date), with notifications. Before the
node groups go to 0 it scales the DisaggregatedSet's roles to 0 through the Kubernetes API, so the serving
PodDisruptionBudgets never hold the drain (pdkit/render/serving/drain.py); at delivery it waits for the GPU
nodes to join, labels each with its role from the instance topology (pdkit/model/placement.py), then
restores them. The function reaches the private API endpoint from the VPC (cluster security group
ingress on 443) as the Kubernetes group of its access entry, which the serving objects bind to a
namespaced Role and a ClusterRole that may only label the Nodes (pdkit/render/serving/manifests.py).
Runtime code: pdkit/functions/block_lifecycle.py and pdkit/functions/kube_api.py."""

from __future__ import annotations

import json

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from pdkit.model import placement, reservation
from pdkit.model.plan import Plan
from pdkit.render.serving import drain
from stacks.kit_function import KitFunction
from stacks.policy import acknowledge

CHECK_EVERY = cdk.Duration.minutes(5)
# The pod wait (drain.POD_WAIT_MINUTES), or the node join wait (placement.JOIN_WAIT_MINUTES), plus the node
# group calls must fit in one invocation; the handler also bounds both by the time it has left.
TIMEOUT_MINUTES = 15


class BlockLifecycle(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        plan: Plan,
        reservation_id: str,
        cluster: eks.ICluster,
        vpc: ec2.IVpc,
        key: kms.IKey,
        log_retention_days: int,
    ) -> None:
        super().__init__(scope, id_)
        stack = cdk.Stack.of(self)
        self.topic = sns.Topic(self, "Notifications", display_name=f"{plan.name} Capacity Block", master_key=key, enforce_ssl=True)
        if plan.alarms.email:
            self.topic.add_subscription(subscriptions.EmailSubscription(plan.alarms.email))
        if plan.market == "on-demand":
            # A rehearsal has no block to start or drain: only the topic the alarms publish to.
            cdk.CfnOutput(scope, "NotificationsTopic", value=self.topic.topic_arn)
            return
        groups = {role.node_group_name: role.nodes for role in plan.roles.values()}
        self.function = KitFunction(
            self,
            "Function",
            handler="pdkit.functions.block_lifecycle.handler",
            modules=(
                "model/reservation.py",
                "model/topology.py",
                "model/placement.py",
                "render/serving/scale.py",
                "functions/block_lifecycle.py",
                "functions/kube_api.py",
            ),
            description=f"{plan.name}: scale GPU node groups at Capacity Block start and drain before its end",
            vpc=vpc,
            key=key,
            log_retention_days=log_retention_days,
            environment={
                "CLUSTER_NAME": plan.cluster_name,
                "RESERVATION_ID": reservation_id,
                # The handler ignores events from any other account (pdkit/functions/block_lifecycle.py foreign).
                "ACCOUNT_ID": stack.account,
                "NODE_GROUPS": json.dumps(groups, sort_keys=True),
                "DRAIN_LEAD_MINUTES": str(plan.drain_lead_minutes),
                "TOPIC_ARN": self.topic.topic_arn,
                "KUBE_ENDPOINT": cluster.cluster_endpoint,
                "KUBE_CA_DATA": cluster.cluster_certificate_authority_data,
                **drain.drain_plan(plan).lifecycle_environment(),
                **placement.lifecycle_environment(plan),
            },
            timeout_minutes=TIMEOUT_MINUTES,
            reserved_concurrency=plan.function_concurrency.per_function,
        )
        # Kubernetes identity: a group only, no EKS access policy; the serving objects' Role says what it may do.
        self.access_entry = eks_l1.CfnAccessEntry(
            self,
            "AccessEntry",
            cluster_name=cluster.cluster_name,
            principal_arn=self.function.role.role_arn,
            kubernetes_groups=[drain.LIFECYCLE_GROUP],
            type="STANDARD",
        )
        # In this stack, not on the cluster's security group object: that would make the cluster stack refer back here.
        self.api_ingress = ec2.CfnSecurityGroupIngress(
            self,
            "KubernetesApiIngress",
            group_id=cluster.cluster_security_group_id,
            source_security_group_id=self.function.security_group.security_group_id,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            description="Kubernetes API from the block lifecycle function",
        )
        nodegroups = [f"arn:{stack.partition}:eks:{stack.region}:{stack.account}:nodegroup/{plan.cluster_name}/{name}/*" for name in groups]
        scale = self.function.allow(
            "Scale",
            iam.PolicyStatement(actions=["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig"], resources=nodegroups),
            iam.PolicyStatement(actions=["ec2:DescribeCapacityReservations", "ec2:DescribeInstanceTopology"], resources=["*"]),
            iam.PolicyStatement(actions=["sns:Publish"], resources=[self.topic.topic_arn]),
            # The drain marker: a tag on this block only (ec2:CreateTags takes the capacity-reservation resource type).
            iam.PolicyStatement(
                actions=["ec2:CreateTags"],
                resources=[f"arn:{stack.partition}:ec2:{stack.region}:{stack.account}:capacity-reservation/{reservation_id}"],
            ),
        )
        acknowledge(
            scale,
            {
                "AwsSolutions-IAM5[Resource::*]": "ec2:DescribeCapacityReservations and ec2:DescribeInstanceTopology support no resource-level permissions "
                "(Service Authorization Reference, Amazon EC2: no resource type for either); the function only reads them.",
                **{
                    f"AwsSolutions-IAM5[Resource::arn:aws:eks:{plan.region}:{plan.account or '<AWS::AccountId>'}:nodegroup/{plan.cluster_name}/{name}/*]": "EKS node group ARNs end in an id assigned at creation; the wildcard covers only that suffix of this kit's own node groups."
                    for name in groups
                },
            },
        )
        self.events = self.function.rule(
            self,
            "BlockEvents",
            rule_name=f"{plan.name}-block-events",
            description=f"{reservation_id}: delivered and expiration-warning events",
            event_pattern=events.EventPattern(
                source=["aws.ec2"],
                detail_type=[*reservation.DELIVERED, *reservation.EXPIRING],
                detail={"capacity-reservation-id": [reservation_id]},
            ),
            retry_attempts=4,
        )
        self.clock = self.function.rule(
            self,
            "DrainCheck",
            rule_name=f"{plan.name}-drain-check",
            description=f"every {CHECK_EVERY.to_minutes()} min: drain GPU nodes {plan.drain_lead_minutes} min before the block ends",
            schedule=events.Schedule.rate(CHECK_EVERY),
            retry_attempts=2,
        )
        cdk.CfnOutput(scope, "NotificationsTopic", value=self.topic.topic_arn)
