"""Reference CDK app for `make bench`: the smallest thing comparable to the kit's synth work.

One VPC, one aws_eks_v2 cluster with a kubectl layer and one Helm chart, the AwsSolutions pack.
"""

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.lambda_layer_kubectl_v36 import KubectlV36Layer
from cdk_nag import AwsSolutionsChecks

app = cdk.App()
stack = cdk.Stack(app, "bench-reference", env=cdk.Environment(region="eu-south-2"))
vpc = ec2.Vpc(stack, "Vpc", availability_zones=["eu-south-2a", "eu-south-2b", "eu-south-2c"], nat_gateways=1)
cluster = eks.Cluster(
    stack,
    "Cluster",
    version=eks.KubernetesVersion.V1_36,
    vpc=vpc,
    default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
    default_capacity=0,
    kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV36Layer(stack, "Kubectl")),
)
cluster.add_helm_chart("Lws", chart="lws", repository="oci://registry.k8s.io/lws/charts/lws", version="0.10.0", namespace="lws-system")
cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
