"""Cluster: EKS (aws_eks_v2, node groups, no Auto Mode) with a private endpoint, KMS-encrypted
secrets, all control-plane logs, access entries, pinned add-ons and charts, on-demand system nodes
and an SSM access host. GPU capacity lives in the capacity stack, so the cluster does not change
when the Capacity Block does.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk.lambda_layer_kubectl_v36 import KubectlV36Layer
from constructs import Construct

from pdkit.model.catalog import addons
from pdkit.model.plan import Plan
from stacks.access_host import AccessHost
from stacks.eks_addons import ClusterCharts, ManagedAddons
from stacks.encrypted_log_group import EncryptedLogGroup, logs_key
from stacks.kit_stack import KitStack
from stacks.node_launch_template import detailed_monitoring, metadata_options, root_volume
from stacks.observability_addon import ContainerInsightsAddon
from stacks.policy import acknowledge
from stacks.trust import restrict_eks_cluster_role

NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly")
LBC_RESOURCES = (
    "listener-rule/app/*/*/*",
    "listener-rule/net/*/*/*",
    "listener/app/*/*/*",
    "listener/net/*/*/*",
    "loadbalancer/app/*/*",
    "loadbalancer/net/*/*",
    "targetgroup/*/*",
)
ALL_LOG_TYPES = [
    eks.ClusterLoggingTypes.API,
    eks.ClusterLoggingTypes.AUDIT,
    eks.ClusterLoggingTypes.AUTHENTICATOR,
    eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    eks.ClusterLoggingTypes.SCHEDULER,
]


class ClusterStack(KitStack):
    def __init__(self, scope: Construct, id_: str, *, plan: Plan, vpc: ec2.IVpc, **kwargs: Any) -> None:
        super().__init__(scope, id_, zones=plan.availability_zones, **kwargs)
        access = plan.cluster_access
        private = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)

        self.secrets_key = kms.Key(
            self, "SecretsKey", description=f"{plan.name}: EKS secrets envelope encryption", enable_key_rotation=True
        )
        self.logs_key = logs_key(self, "LogsKey", description=f"{plan.name}: EKS control-plane and function logs")
        # EKS writes to this fixed name; creating it first gives it our key and retention.
        control_plane_logs = EncryptedLogGroup(
            self,
            "ControlPlaneLogs",
            key=self.logs_key,
            retention_days=plan.log_retention_days,
            log_group_name=f"/aws/eks/{plan.cluster_name}/cluster",
        )
        endpoint = (
            eks.EndpointAccess.PRIVATE
            if access.endpoint == "private"
            else eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*access.public_access_cidrs)
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=plan.cluster_name,
            version=eks.KubernetesVersion.of(plan.kubernetes_version),
            vpc=vpc,
            vpc_subnets=[private],
            service_ipv4_cidr=plan.service_cidr,
            endpoint_access=endpoint,
            secrets_encryption_key=self.secrets_key,
            cluster_logging=ALL_LOG_TYPES,
            # CloudFormation defaults this to true when absent: say false, and grant admins explicitly.
            bootstrap_cluster_creator_admin_permissions=False,
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=KubectlV36Layer(self, "KubectlLayer"), private_subnets=vpc.private_subnets
            ),
        )
        self.cluster.node.add_dependency(control_plane_logs)
        restrict_eks_cluster_role(self.cluster.role, plan.cluster_name)
        self._encrypt_kubectl_provider_logs()
        for i, arn in enumerate(access.admin_principal_arns):
            self.cluster.grant_access(
                f"Admin{i}",
                arn,
                [eks.AccessPolicy.from_access_policy_name("AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER)],
            )

        self.addons = ManagedAddons(self, "Addons", cluster=self.cluster)
        self.system_nodes = self._system_nodes(plan)
        for addon in self.addons.addons.values():
            # Add-ons with pods (CoreDNS, monitoring) need a node to become healthy; vpc-cni must exist before nodes.
            if addon.addon_name in ("coredns", "eks-node-monitoring-agent"):
                addon.node.add_dependency(self.system_nodes)
        self.system_nodes.node.add_dependency(self.addons.addons["vpc-cni"])
        # Standalone rather than Cluster(alb_controller=...): as a cluster option CDK makes it depend on every
        # node group, including the GPU ones in the capacity stack, which would be a cross-stack cycle.
        # It installs its chart with `wait` (aws-cdk-lib aws-eks-v2 alb-controller.ts): its `mservice.elbv2.k8s.aws`
        # webhook (failurePolicy Fail) sees every Service the serving stack applies.
        self.load_balancer_controller = eks.AlbController(
            self,
            "LoadBalancerController",
            cluster=self.cluster,
            version=_alb_version(addons().load_balancer_controller),
            repository="public.ecr.aws/eks/aws-load-balancer-controller",
        )
        self.load_balancer_controller.node.add_dependency(self.system_nodes)
        self.container_insights = ContainerInsightsAddon(
            self,
            "ContainerInsights",
            cluster=self.cluster,
            version=addons().managed["amazon-cloudwatch-observability"],
            logs_key=self.logs_key,
            log_retention_days=plan.log_retention_days,
        )
        self.container_insights.addon.node.add_dependency(self.system_nodes)
        self.container_insights.addon.node.add_dependency(self.addons.addons["eks-pod-identity-agent"])
        self.charts = ClusterCharts(self, "Charts", cluster=self.cluster, plan=plan, system_labels=plan.system_node_labels)
        for chart in self.charts.charts.values():
            chart.node.add_dependency(self.system_nodes)

        self.access_host = AccessHost(self, "AccessHost", vpc=vpc)
        self.cluster.cluster_security_group.add_ingress_rule(
            self.access_host.security_group, ec2.Port.tcp(443), "kubectl through the SSM access host"
        )
        cdk.CfnOutput(self, "ClusterName", value=self.cluster.cluster_name)
        cdk.CfnOutput(self, "ClusterEndpoint", value=self.cluster.cluster_endpoint)
        self._acknowledge(plan)

    def _encrypt_kubectl_provider_logs(self) -> None:
        """aws_eks_v2 creates the kubectl provider's log groups without a key and offers no option for one; AWS
        Control Tower (CT.CLOUDWATCH.PR.3) rejects unencrypted log groups, so they get the cluster's logs key."""
        provider = self.cluster.node.find_child("KubectlProvider")
        groups = [c for c in provider.node.find_all() if isinstance(c, logs.CfnLogGroup)]
        assert groups, "aws_eks_v2 no longer creates the kubectl provider's log groups here: revisit this escape hatch"
        for group in groups:
            group.kms_key_id = self.logs_key.key_arn

    def _system_nodes(self, plan: Plan) -> eks.Nodegroup:
        nodes = plan.system_nodes
        template = ec2.CfnLaunchTemplate(
            self,
            "SystemNodeTemplate",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                metadata_options=metadata_options(), monitoring=detailed_monitoring(), block_device_mappings=[root_volume(50)]
            ),
        )
        return eks.Nodegroup(
            self,
            "SystemNodes",
            cluster=self.cluster,
            nodegroup_name=f"{plan.name}-system",
            instance_types=[ec2.InstanceType(nodes.instance_type)],
            ami_type=eks.NodegroupAmiType.AL2023_ARM_64_STANDARD
            if plan.system_node_arch == "arm64"
            else eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            capacity_type=eks.CapacityType.ON_DEMAND,
            launch_template_spec=eks.LaunchTemplateSpec(id=template.ref, version=template.attr_latest_version_number),
            min_size=nodes.count,
            desired_size=nodes.count,
            max_size=nodes.max_count,
            subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            labels=plan.system_node_labels,
            enable_node_auto_repair=True,
        )

    def _acknowledge(self, plan: Plan) -> None:
        cdk_provider = "aws-cdk-lib's kubectl provider (the custom-resource Lambdas that apply Helm charts and manifests through the private endpoint); its IAM, runtime and logging are fixed by aws-cdk-lib, it runs only during deploys"
        provider = self.cluster.node.find_child("KubectlProvider")
        acknowledge(
            provider,
            {
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly]": cdk_provider,
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]": cdk_provider,
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]": cdk_provider,
                'AwsSolutions-IAM4[Policy::{"Fn::If":["ClusterKubectlProviderHandlerHasEcrPublic69E09706",{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}]': cdk_provider,
                "AwsSolutions-IAM5[Resource::<ClusterKubectlProviderHandler2E05C68A.Arn>:*]": cdk_provider
                + " (the framework may invoke any version of its own handler)",
                "AwsSolutions-L1": cdk_provider + "; aws-cdk-lib pins the runtime its bundled handler is tested on",
                "NIST.800.53.R5-IAMNoInlinePolicy": cdk_provider,
                "NIST.800.53.R5-LambdaConcurrency": cdk_provider,
                "NIST.800.53.R5-LambdaDLQ": cdk_provider
                + "; it is invoked synchronously by CloudFormation, so a dead-letter queue would never receive anything",
            },
        )
        acknowledge(
            self.cluster.role,
            {
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSClusterPolicy]": "The EKS service role must carry this AWS-managed policy; EKS documents no customer-managed equivalent.",
            },
        )
        node_policies = "AWS-managed policies every EKS managed node needs (kubelet registration, VPC CNI IP management, pulling EKS and ECR images); EKS documents these by name."
        nodes_role = self.system_nodes.role
        acknowledge(
            nodes_role, {f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{name}]": node_policies for name in NODE_POLICIES}
        )
        lbc = "The AWS Load Balancer Controller's published IAM policy (bundled by aws-cdk-lib from kubernetes-sigs/aws-load-balancer-controller); it creates load balancers, target groups and security groups whose names are not known in advance and scopes writes with elbv2.k8s.aws/cluster tag conditions"
        acknowledge(
            self.load_balancer_controller,
            {
                "NIST.800.53.R5-IAMNoInlinePolicy": lbc,
                "AwsSolutions-IAM5[Resource::*]": lbc,
                "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:*:*:security-group/*]": lbc,
                **{f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:elasticloadbalancing:*:*:{r}]": lbc for r in LBC_RESOURCES},
            },
        )


def _alb_version(pin: str) -> eks.AlbControllerVersion:
    """The pinned controller version, as one of the versions aws-cdk-lib ships an IAM policy for."""
    member = "V" + pin.lstrip("v").replace(".", "_")
    version = getattr(eks.AlbControllerVersion, member, None)
    if not isinstance(version, eks.AlbControllerVersion):
        raise ValueError(f"pdkit/model/data/addons.yaml load_balancer_controller {pin!r}: aws-cdk-lib has no AlbControllerVersion.{member}")
    return version
