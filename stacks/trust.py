"""Who may assume the kit's service roles: the service, on behalf of the kit's own resource only.

A service principal alone lets the service assume the role for anyone who can name it (the confused deputy,
https://docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html). Where a service documents the keys it
sets, the trust carries them; tests/test_policy.py lists the services that document none, with the source.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import IConstruct


def flow_logs_principal(scope: IConstruct) -> iam.IPrincipal:
    """VPC flow logs: "We recommend that you use the aws:SourceAccount and aws:SourceArn condition keys" with the
    flow log's ARN, a wildcard for its id when the role exists first
    (https://docs.aws.amazon.com/vpc/latest/userguide/flow-logs-iam-role.html)."""
    stack = cdk.Stack.of(scope)
    flow_logs = stack.format_arn(service="ec2", resource="vpc-flow-log", resource_name="*")
    return iam.ServicePrincipal(
        "vpc-flow-logs.amazonaws.com",
        conditions={"StringEquals": {"aws:SourceAccount": stack.account}, "ArnLike": {"aws:SourceArn": flow_logs}},
    )


def restrict_eks_cluster_role(role: iam.IRole, cluster_name: str) -> None:
    """The EKS cluster role, which aws_eks_v2 creates with a bare eks.amazonaws.com trust: EKS "accepts the
    aws:SourceArn and aws:SourceAccount conditions in the trust policy of an EKS cluster role"
    (https://docs.aws.amazon.com/eks/latest/userguide/cross-service-confused-deputy-prevention.html). The ARN is
    spelled from the fixed cluster name: a reference to the cluster would depend on the role it trusts."""
    cfn = role.node.default_child
    assert isinstance(cfn, iam.CfnRole), "aws_eks_v2 no longer creates the cluster role itself: revisit this escape hatch"
    stack = cdk.Stack.of(role)
    cluster = stack.format_arn(service="eks", resource="cluster", resource_name=cluster_name)
    cfn.add_property_override(
        "AssumeRolePolicyDocument.Statement.0.Condition",
        {"StringEquals": {"aws:SourceAccount": stack.account}, "ArnLike": {"aws:SourceArn": cluster}},
    )


def pod_identity_principal(*, cluster_name: str, namespace: str, service_account: str) -> iam.IPrincipal:
    """EKS Pod Identity: its session tags name the cluster, namespace and service account, and "you can use these
    tags in the condition keys in the trust policy to restrict which service accounts, namespaces, and clusters can
    use this role" (https://docs.aws.amazon.com/eks/latest/userguide/pod-id-role.html); sts:TagSession is allowed
    beside sts:AssumeRole for them."""
    return iam.SessionTagsPrincipal(
        iam.ServicePrincipal(
            "pods.eks.amazonaws.com",
            conditions={
                "StringEquals": {
                    "aws:RequestTag/eks-cluster-name": cluster_name,
                    "aws:RequestTag/kubernetes-namespace": namespace,
                    "aws:RequestTag/kubernetes-service-account": service_account,
                }
            },
        )
    )
