"""Container Insights: the EKS add-on amazon-cloudwatch-observability, with Pod Identity.

It runs the CloudWatch agent on every node (its default toleration is `operator: Exists`, so the
tainted GPU nodes too) and its own DCGM exporter on GPU instance types (p5en is in its list from
chart 2.6.0), and publishes node/pod metrics with NVIDIA GPU and EFA figures to the ContainerInsights
namespace (pdkit/render/observability/catalog.py lists the ones the kit reads).
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-setup-EKS-addon.html

The cluster stack creates it (`ContainerInsightsAddon(self, ..., cluster=self.cluster, version=pin)`).
"""

from __future__ import annotations

import re

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from stacks.encrypted_log_group import EncryptedLogGroup
from stacks.policy import acknowledge
from stacks.trust import pod_identity_principal

ADDON = "amazon-cloudwatch-observability"
SERVICE_ACCOUNT = "cloudwatch-agent"
NAMESPACE = "amazon-cloudwatch"  # where the add-on runs its agent
AGENT_POLICY = "CloudWatchAgentServerPolicy"
# EFA metrics need v1.5.2, p5en in the DCGM exporter's instance list chart 2.6.0, Pod Identity v3.1.0.
MINIMUM_VERSION = (3, 1, 0)
# Log groups the agent (performance events behind the metrics) and Fluent Bit write to. Created here
# first so they get the kit's key and retention instead of unencrypted never-expiring defaults.
LOG_GROUPS = ("performance", "application", "host", "dataplane")


def parse_version(version: str) -> tuple[int, int, int]:
    found = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)-eksbuild\.\d+", version)
    if not found:
        raise ValueError(f"{ADDON} version {version!r} is not an EKS add-on version like v6.4.0-eksbuild.1")
    major, minor, patch = (int(x) for x in found.groups())
    return major, minor, patch


class ContainerInsightsAddon(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.Cluster,
        version: str,
        logs_key: kms.IKey | None = None,
        log_retention_days: int | None = None,
    ) -> None:
        super().__init__(scope, id_)
        if parse_version(version) < MINIMUM_VERSION:
            wanted = ".".join(str(n) for n in MINIMUM_VERSION)
            raise ValueError(
                f"{ADDON} {version} is too old: EFA metrics, p5en GPU metrics and Pod Identity need v{wanted} or newer (pdkit/model/data/addons.yaml)"
            )
        self.role = iam.Role(
            self,
            "AgentRole",
            # EKS Pod Identity assumes the role with session tags.
            assumed_by=pod_identity_principal(cluster_name=cluster.cluster_name, namespace=NAMESPACE, service_account=SERVICE_ACCOUNT),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(AGENT_POLICY)],
            description=f"{ADDON}: CloudWatch agent (Pod Identity, {NAMESPACE}/{SERVICE_ACCOUNT})",
        )
        acknowledge(
            self.role,
            {
                f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{AGENT_POLICY}]": "The CloudWatch agent's documented AWS-managed policy (PutMetricData, Logs writes, EC2/EBS describes for its metadata); the add-on's agent, DCGM exporter and Fluent Bit need exactly these and AWS maintains the list with the agent.",
            },
        )
        self.log_groups = []
        if logs_key is not None and log_retention_days is not None:
            self.log_groups = [
                EncryptedLogGroup(
                    self,
                    f"{kind.capitalize()}Logs",
                    key=logs_key,
                    retention_days=log_retention_days,
                    log_group_name=f"/aws/containerinsights/{cluster.cluster_name}/{kind}",
                )
                for kind in LOG_GROUPS
            ]
        addon = eks.Addon(self, "Addon", cluster=cluster, addon_name=ADDON, addon_version=version)
        cfn = addon.node.default_child
        assert isinstance(cfn, eks.CfnAddon)
        cfn.resolve_conflicts = "OVERWRITE"
        cfn.pod_identity_associations = [
            eks.CfnAddon.PodIdentityAssociationProperty(role_arn=self.role.role_arn, service_account=SERVICE_ACCOUNT)
        ]
        for group in self.log_groups:
            addon.node.add_dependency(group)
        self.addon = cfn
