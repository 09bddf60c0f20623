"""What a GPU launch template carries when `ami.source: custom`: the promoted AMI id and the full nodeadm
bootstrap, since EKS merges no bootstrap of its own into the user data of a launch template that names an
image. https://docs.aws.amazon.com/eks/latest/userguide/launch-templates.html
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from pdkit.model.plan import Plan, RolePlan
from pdkit.render import ami


@dataclass(frozen=True)
class NodeImage:
    image_id: str
    user_data: str  # base64, for LaunchTemplateData.UserData


def custom_node_image(scope: Construct, *, plan: Plan, cluster: eks.ICluster, service_cidr: str, role: RolePlan | None) -> NodeImage:
    """The promoted image (read from SSM at each deploy of the stack, so promotion is explicit) and its bootstrap.

    With `role`, the kubelet registers with that role's labels and taint; without, only the GPU labels
    (EKS then applies the node group's labels and taints after registration).
    """
    # A CloudFormation parameter of type AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>: no context lookup.
    image_id = ec2.MachineImage.from_ssm_parameter(ami.image_parameter(plan.name)).get_image(scope).image_id
    details = ami.ClusterDetails(
        name=cluster.cluster_name,
        api_server_endpoint=cluster.cluster_endpoint,
        certificate_authority=cluster.cluster_certificate_authority_data,
        service_cidr=service_cidr,
    )
    labels: dict[str, str] = dict(plan.gpu_node_labels)
    taints: list[dict[str, str]] = []
    if role is not None:
        labels, taints = ami.role_kubelet_identity(plan, role)
    return NodeImage(image_id=image_id, user_data=cdk.Fn.base64(ami.custom_user_data(details, labels=labels, taints=taints)))
