"""The launch-template pieces for `ami.source: custom`: the promoted AMI id from SSM and the full bootstrap."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template

from stacks.ami_node_image import custom_node_image
from tests.conftest import new_app, plan_of

SERVICE_CIDR = "172.20.0.0/16"


def _template(role: str | None) -> dict[str, Any]:
    plan = plan_of()
    app = new_app()
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(region=plan.region))
    # Cross-stack values, as the capacity stack sees the cluster stack's: tokens until deploy.
    cluster = eks.Cluster.from_cluster_attributes(
        stack,
        "Cluster",
        cluster_name=plan.cluster_name,
        cluster_endpoint=cdk.Fn.import_value("ClusterEndpoint"),
        cluster_certificate_authority_data=cdk.Fn.import_value("ClusterCa"),
    )
    image = custom_node_image(stack, plan=plan, cluster=cluster, service_cidr=SERVICE_CIDR, role=plan.roles[role] if role else None)
    ec2.CfnLaunchTemplate(
        stack,
        "Template",
        launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(image_id=image.image_id, user_data=image.user_data),
    )
    return Template.from_stack(stack).to_json()


def _user_data(template: dict[str, Any]) -> str:
    (lt,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::LaunchTemplate"]
    return json.dumps(lt["Properties"]["LaunchTemplateData"]["UserData"])


def test_user_data_carries_the_cluster_coordinates_from_the_cluster():
    user_data = _user_data(_template("decode"))
    assert '"Fn::Base64"' in user_data
    assert '"Fn::ImportValue": "ClusterEndpoint"' in user_data
    assert '"Fn::ImportValue": "ClusterCa"' in user_data
    assert f"cidr: {SERVICE_CIDR}" in user_data
    assert "apiServerEndpoint: " in user_data
    assert "application/node.eks.aws" in user_data


def test_role_launch_template_registers_with_the_role_taint():
    assert "--register-with-taints=pdkit/role=prefill:NoSchedule" in _user_data(_template("prefill"))


def test_shared_launch_template_registers_without_a_role():
    user_data = _user_data(_template(None))
    assert "register-with-taints" not in user_data
    assert "pdkit/role" not in user_data
    assert "nvidia.com/gpu.present=true" in user_data
