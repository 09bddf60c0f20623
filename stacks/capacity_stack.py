"""GPU capacity on the Capacity Block: EFA security group, placement group, launch template, the
deploy-time guard, one managed node group per role, and the block lifecycle automation.

With `capacity.market: on-demand` (a rehearsal) the node groups are ON_DEMAND with the same launch template
minus its market options, and there is no block to guard or follow: no guard, no lifecycle function, only
the notifications topic the alarms publish to.

Desired size has one owner: it is 0 in this template, always, so a redeploy never shrinks a running
block; the lifecycle automation and `pdkit nodes` scale at run time.
https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from pdkit.model.plan import Plan, RolePlan
from stacks.block_lifecycle import BlockLifecycle
from stacks.cluster_stack import NODE_POLICIES
from stacks.encrypted_log_group import logs_key
from stacks.gpu_launch_template import GpuLaunchTemplate
from stacks.kit_stack import KitStack
from stacks.policy import acknowledge
from stacks.reservation_guard import ReservationGuard


class CapacityStack(KitStack):
    def __init__(
        self, scope: Construct, id_: str, *, plan: Plan, vpc: ec2.IVpc, cluster: eks.ICluster, reservation_id: str, **kwargs: Any
    ) -> None:
        super().__init__(scope, id_, zones=plan.availability_zones, **kwargs)
        retention = plan.log_retention_days
        key = logs_key(self, "OpsKey", description=f"{plan.name}: Capacity Block automation (logs, queues, notifications)")

        self.efa_security_group = ec2.SecurityGroup(
            self, "EfaSecurityGroup", vpc=vpc, allow_all_outbound=False, description="EFA: all traffic between the GPU nodes, nothing else"
        )
        self.efa_security_group.add_ingress_rule(self.efa_security_group, ec2.Port.all_traffic(), "EFA from GPU nodes")
        self.efa_security_group.add_egress_rule(self.efa_security_group, ec2.Port.all_traffic(), "EFA to GPU nodes")
        acknowledge(
            self.efa_security_group,
            {
                "NIST.800.53.R5-EC2RestrictedCommonPorts": "EFA needs all protocols between the GPU nodes, inbound and outbound, from this same security group (EC2 EFA user guide); the only peer is the group itself, never a CIDR.",
            },
        )

        # The profile's id, or with capacity.purchase the purchase stack's ReservationId (stacks/purchase_stack.py).
        self.reservation_id = reservation_id

        self.placement_group = (
            ec2.CfnPlacementGroup(self, "PlacementGroup", strategy="cluster") if plan.placement_group == "cluster" else None
        )
        custom_image = plan.custom_ami

        def launch_template(id_: str, role: RolePlan | None) -> ec2.CfnLaunchTemplate:
            return GpuLaunchTemplate(
                self,
                id_,
                plan=plan,
                cluster=cluster,
                cluster_security_group_id=cluster.cluster_security_group_id,
                efa_security_group=self.efa_security_group,
                placement_group=self.placement_group.ref if self.placement_group else None,
                role=role,
                reservation_id=self.reservation_id,
            ).template

        self.launch_templates: dict[str, ec2.CfnLaunchTemplate]
        if custom_image:
            self.launch_templates = {
                role.name: launch_template(f"{role.name.capitalize()}LaunchTemplate", role) for role in plan.roles.values()
            }
        else:
            shared = launch_template("GpuLaunchTemplate", None)
            self.launch_templates = {role.name: shared for role in plan.roles.values()}

        block = plan.market == "capacity-block"
        self.guard = (
            ReservationGuard(
                self, "ReservationGuard", plan=plan, reservation_id=self.reservation_id, vpc=vpc, key=key, log_retention_days=retention
            )
            if block
            else None
        )
        self.node_role = iam.Role(
            self,
            "GpuNodeRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(name) for name in NODE_POLICIES],
        )
        acknowledge(
            self.node_role,
            {
                f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{name}]": "AWS-managed policies every EKS managed node needs (kubelet registration, VPC CNI IP management, pulling EKS and ECR images); EKS documents these by name."
                for name in NODE_POLICIES
            },
        )
        block_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=[plan.block_az])
        self.node_groups: dict[str, eks.Nodegroup] = {}
        for role in plan.roles.values():
            group = eks.Nodegroup(
                self,
                f"{role.name.capitalize()}Nodes",
                cluster=cluster,
                nodegroup_name=role.node_group_name,
                capacity_type=eks.CapacityType.CAPACITY_BLOCK if block else eks.CapacityType.ON_DEMAND,
                # No instance_types: the type is in the launch template (aws-cdk-lib 2.275 also rejects P5-family
                # types with the NVIDIA AMI type there, AmiTypeDoesNotMatchInstanceArchitecture).
                launch_template_spec=eks.LaunchTemplateSpec(
                    id=self.launch_templates[role.name].ref, version=self.launch_templates[role.name].attr_latest_version_number
                ),
                # With a custom image id in the launch template EKS refuses an AMI type.
                ami_type=None if custom_image else eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
                node_role=self.node_role,
                subnets=block_subnets,
                min_size=0,
                desired_size=0,
                max_size=role.nodes,
                labels={**role.labels, **plan.gpu_node_labels},
                taints=[eks.TaintSpec(key=role.taint["key"], value=role.taint["value"], effect=eks.TaintEffect.NO_SCHEDULE)],
                enable_node_auto_repair=True,
            )
            self._repair(group, plan)
            if self.guard:
                group.node.add_dependency(self.guard.check)
            self.node_groups[role.name] = group

        self.lifecycle = BlockLifecycle(
            self,
            "BlockLifecycle",
            plan=plan,
            reservation_id=self.reservation_id,
            cluster=cluster,
            vpc=vpc,
            key=key,
            log_retention_days=retention,
        )
        for name, template in self.launch_templates.items():
            cdk.CfnOutput(self, f"{name.capitalize()}LaunchTemplateId", value=template.ref)

    @staticmethod
    def _repair(group: eks.Nodegroup, plan: Plan) -> None:
        """The plan's node auto repair on the node group's L1 (the L2 has only enable_node_auto_repair)."""
        repair = plan.gpu_node_repair
        cfn = group.node.default_child
        assert isinstance(cfn, eks.CfnNodegroup)
        cfn.node_repair_config = eks.CfnNodegroup.NodeRepairConfigProperty(
            enabled=True,
            max_parallel_nodes_repaired_count=repair.max_parallel_nodes,
            max_unhealthy_node_threshold_count=repair.max_unhealthy_nodes,
            node_repair_config_overrides=[
                eks.CfnNodegroup.NodeRepairConfigOverridesProperty(
                    node_monitoring_condition=o.condition,
                    node_unhealthy_reason=o.reason,
                    min_repair_wait_time_mins=o.wait_minutes,
                    repair_action=o.action,
                )
                for o in repair.overrides
            ],
        )
