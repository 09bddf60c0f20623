"""The GPU launch template: one per instance type, shared by the prefill and decode node groups."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from pdkit.model.plan import Plan, RolePlan
from pdkit.render import node_config
from stacks.ami_node_image import custom_node_image
from stacks.node_launch_template import ROOT_DEVICE, detailed_monitoring, metadata_options

L = ec2.CfnLaunchTemplate


class GpuLaunchTemplate(Construct):
    """With `ami.source: eks-optimized` one template serves both roles and EKS adds its bootstrap; with a
    custom image the template names the image and carries the full nodeadm bootstrap, one per role so the
    kubelet registers with the role's taint before any pod can land (stacks/ami_node_image.py)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        plan: Plan,
        cluster: eks.ICluster,
        cluster_security_group_id: str,
        efa_security_group: ec2.ISecurityGroup,
        placement_group: str | None,
        reservation_id: str,
        role: RolePlan | None = None,
    ) -> None:
        super().__init__(scope, id_)
        efa = efa_security_group.security_group_id
        interfaces = [
            L.NetworkInterfaceProperty(
                network_card_index=nic.card,
                device_index=nic.device,
                interface_type=nic.kind,
                # Only the primary carries IPs and so pod traffic: it also needs the cluster security group.
                groups=[cluster_security_group_id, efa] if nic.carries_ips else [efa],
                delete_on_termination=True,
                # Said explicitly for AWS Control Tower (CT.EC2.PR.9). Only `true` is refused with several interfaces;
                # Karpenter sets false on every EFA interface (aws/karpenter-provider-aws launchtemplate.go).
                associate_public_ip_address=False,
            )
            for nic in plan.network_interfaces
        ]
        # On-demand (a rehearsal) launches without a reservation: no market options, no reservation target; the rest
        # of the template (interfaces, security groups, user data, root volume, placement) is the block's.
        block = plan.market == "capacity-block"
        image_id: str | None = None
        user_data = cdk.Fn.base64(node_config.user_data())
        if plan.custom_ami:
            custom = custom_node_image(self, plan=plan, cluster=cluster, service_cidr=plan.service_cidr, role=role)
            image_id, user_data = custom.image_id, custom.user_data
        self.template = L(
            self,
            "Resource",
            launch_template_data=L.LaunchTemplateDataProperty(
                # ML Capacity Blocks need the instance type in the launch template, not on the node group.
                instance_type=plan.instance.name,
                image_id=image_id,
                instance_market_options=L.InstanceMarketOptionsProperty(market_type="capacity-block") if block else None,
                capacity_reservation_specification=L.CapacityReservationSpecificationProperty(
                    capacity_reservation_target=L.CapacityReservationTargetProperty(capacity_reservation_id=reservation_id)
                )
                if block
                else None,
                metadata_options=metadata_options(),
                monitoring=detailed_monitoring(),
                block_device_mappings=[gpu_root_volume(plan)],
                # With interfaces in the template, security groups go on each interface, never on the template.
                network_interfaces=interfaces,
                placement=L.PlacementProperty(group_name=placement_group) if placement_group else None,
                user_data=user_data,
            ),
        )


def gpu_root_volume(plan: Plan) -> L.BlockDeviceMappingProperty:
    """The plan's GPU root volume. With the custom AMI the pre-pulled serving image is on it, so EBS fetches the whole
    snapshot at the provisioned rate instead of block by block on first read (EC2 LaunchTemplateEbsBlockDeviceRequest:
    VolumeInitializationRate 100-300 MiB/s, only for volumes created from snapshots, which an AMI's root always is)."""
    root = plan.gpu_root_volume
    return L.BlockDeviceMappingProperty(
        device_name=ROOT_DEVICE,
        ebs=L.EbsProperty(
            volume_size=root.size_gib,
            volume_type="gp3",
            throughput=root.throughput_mibps,
            volume_initialization_rate=root.initialization_mibps,
            encrypted=True,
            delete_on_termination=True,
        ),
    )
