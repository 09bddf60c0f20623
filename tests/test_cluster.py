"""EKS cluster stack: secure defaults, pinned add-ons and charts, system nodes, access path."""

from __future__ import annotations

import json

from aws_cdk.assertions import Match

from pdkit.model.catalog import addons
from tests.conftest import synth


def _cluster(kit):
    return kit.one("cluster", "AWS::EKS::Cluster")


def test_kubernetes_version_from_the_profile(kit):
    """The one version the add-on pins and the kubectl layer are built for."""
    assert _cluster(kit)["Version"] == kit.plan.kubernetes_version == "1.36"


def test_private_endpoint_by_default(kit):
    """The Kubernetes API is not on the internet unless the profile opts in with an allow-list."""
    vpc_config = _cluster(kit)["ResourcesVpcConfig"]
    assert vpc_config["EndpointPrivateAccess"] is True
    assert vpc_config["EndpointPublicAccess"] is False


def test_public_endpoint_only_with_an_allow_list(raw_with):
    kit = synth(raw_with("cluster.endpoint_access", "public_and_private", "cluster.public_access_cidrs", ["203.0.113.0/24"]))
    vpc_config = _cluster(kit)["ResourcesVpcConfig"]
    assert vpc_config["EndpointPublicAccess"] is True
    assert vpc_config["PublicAccessCidrs"] == ["203.0.113.0/24"]


def test_creator_admin_is_explicitly_false(kit):
    """CloudFormation defaults it to true when absent: it must be present and false."""
    assert _cluster(kit)["AccessConfig"]["BootstrapClusterCreatorAdminPermissions"] is False
    assert _cluster(kit)["AccessConfig"]["AuthenticationMode"] == "API"


def test_secrets_envelope_encryption_with_a_rotating_key(kit):
    assert _cluster(kit)["EncryptionConfig"][0]["Resources"] == ["secrets"]
    kit.template("cluster").has_resource_properties(
        "AWS::KMS::Key", {"EnableKeyRotation": True, "Description": Match.string_like_regexp("secrets")}
    )


def test_all_five_control_plane_logs_with_retention(kit):
    """Kept a year by default: AWS Control Tower's CT.CLOUDWATCH.PR.2 refuses log groups kept less than 365 days
    (rules/control-tower/cfn-guard/cloudwatch/ct-cloudwatch-pr-2.guard, MINIMUM_RETENTION_IN_DAYS = 365)."""
    types = _cluster(kit)["Logging"]["ClusterLogging"]["EnabledTypes"]
    assert sorted(t["Type"] for t in types) == ["api", "audit", "authenticator", "controllerManager", "scheduler"]
    kit.template("cluster").has_resource_properties(
        "AWS::Logs::LogGroup", {"LogGroupName": "/aws/eks/glm51-2p2d/cluster", "RetentionInDays": 365, "KmsKeyId": Match.any_value()}
    )


def test_kubectl_provider_logs_are_encrypted(kit):
    """aws_eks_v2 creates the kubectl provider's log groups without a key; CT.CLOUDWATCH.PR.3 refuses any log group
    without KmsKeyId (ct-cloudwatch-pr-3.guard), so they get the cluster's logs key."""
    groups = kit.template("cluster").find_resources("AWS::Logs::LogGroup")
    provider = {k: g for k, g in groups.items() if k.startswith("ClusterKubectlProvider")}
    assert len(provider) == 2
    assert all(g["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [_logs_key(kit), "Arn"]} for g in provider.values())


def _logs_key(kit) -> str:
    (key,) = kit.template("cluster").find_resources("AWS::KMS::Key", {"Properties": {"Description": Match.string_like_regexp("logs")}})
    return str(key)


def test_admin_principals_get_access_entries(raw_with):
    arn = "arn:aws:iam::123456789012:role/platform-admin"
    kit = synth(raw_with("cluster.admin_principal_arns", [arn]))
    entries = kit.template("cluster").find_resources("AWS::EKS::AccessEntry", {"Properties": {"PrincipalArn": arn}})
    (entry,) = entries.values()
    assert "AmazonEKSClusterAdminPolicy" in str(entry["Properties"]["AccessPolicies"])


def test_managed_addons_are_pinned(kit):
    """vpc-cni >= 1.18.5 is what EFA-only interfaces need; every add-on version comes from pdkit/model/data/addons.yaml."""
    found = {props["AddonName"]: props for props in kit.properties("cluster", "AWS::EKS::Addon")}
    assert {name: props["AddonVersion"] for name, props in found.items()} == addons().managed
    major, minor, patch = (int(x) for x in addons().managed["vpc-cni"].lstrip("v").split("-")[0].split("."))
    assert (major, minor, patch) >= (1, 18, 5)
    assert all(props["ResolveConflicts"] == "OVERWRITE" for props in found.values())


def test_node_monitoring_agent_checks_tainted_gpu_nodes(kit):
    """Its DCGM pod tolerates no taints by default, so GPU health (and GPU auto repair) would skip our nodes."""
    kit.template("cluster").has_resource_properties(
        "AWS::EKS::Addon", {"AddonName": "eks-node-monitoring-agent", "ConfigurationValues": Match.string_like_regexp('"dcgmAgent"')}
    )


def _charts(kit):
    return {props["Chart"]: props for props in kit.properties("cluster", "Custom::AWSCDK-EKS-HelmChart")}


def test_helm_charts_are_pinned(kit):
    """Every chart version and repository comes from pdkit/model/data/addons.yaml: nothing floats to 'latest'."""
    charts = _charts(kit)
    for pin in addons().charts.values():
        assert charts[pin.chart]["Version"] == pin.version
        assert charts[pin.chart]["Repository"] == pin.repository


def test_efa_device_plugin_is_new_enough_for_p5en(kit):
    """Below v0.5.10 its allowlist lacks p5en and NCCL silently falls back to TCP (aws-samples/aws-do-eks#56)."""
    version = tuple(int(x) for x in addons().charts["aws-efa-k8s-device-plugin"].version.lstrip("v").split("."))
    assert version >= (0, 5, 10)


def test_device_plugins_tolerate_the_gpu_role_taints(kit):
    """Without the toleration the plugins never run on the tainted GPU nodes: 0 GPUs and 0 EFA devices allocatable."""
    charts = _charts(kit)
    for name in ("nvidia-device-plugin", "aws-efa-k8s-device-plugin"):
        assert '"key":"pdkit/role","operator":"Exists","effect":"NoSchedule"' in str(charts[name]["Values"]).replace(" ", "")


def test_efa_plugin_image_comes_from_the_regional_eks_registry(kit):
    """eu-south-2 is an opt-in region with its own EKS registry account (EKS add-ons-images page)."""
    assert "455263428931.dkr.ecr.eu-south-2.amazonaws.com/eks/aws-efa-k8s-device-plugin" in str(
        _charts(kit)["aws-efa-k8s-device-plugin"]["Values"]
    )


def test_lws_controller_runs_on_system_nodes(kit):
    """Controllers stay off the GPU nodes, which come and go with the block."""
    assert '"nodeSelector":{"pdkit/role":"system"}' in str(_charts(kit)["lws"]["Values"]).replace(" ", "")


# Which chart's admission webhooks (failurePolicy: Fail) each object the serving stack applies passes through:
#   kubernetes-sigs/lws v0.10.0 charts/lws/templates/webhook/: LeaderWorkerSet mutating + validating webhooks, a
#     pod webhook for pods carrying the leaderworkerset.sigs.k8s.io labels, and (enableDisaggregatedSet) the
#     DisaggregatedSet validating webhook;
#   aws/eks-charts aws-load-balancer-controller templates/webhook.yaml: `mservice.elbv2.k8s.aws` on every Service.
# The CRD itself (leaderworkerset.x-k8s.io) comes from the lws chart too.
WEBHOOKS_BY_KIND = {"DisaggregatedSet": "lws", "LeaderWorkerSet": "lws", "Service": "aws-load-balancer-controller"}


def _serving_kinds(kit) -> set[str]:
    import re

    return set(re.findall(r'\\"kind\\":\\"(\w+)\\"', json.dumps(kit.template_json("serving"))))


def test_charts_the_serving_stack_applies_through_wait_until_ready(kit):
    """A webhook with no ready endpoint rejects the apply ("failed calling webhook ... no endpoints available"), so
    each chart whose CRD or webhook the serving stack's objects go through is installed with `helm --wait`: the
    cluster stack completes only once its controller pods are Ready. aws_eks_v2 HelmChart `wait` ("wait until all
    Pods ... are in a ready state before marking the release as successful"); the kubectl provider's helm handler
    turns it into `helm upgrade --wait --timeout` (aws-cdk-lib custom-resource-handlers aws-eks-v2/kubectl-handler/helm).
    """
    charts = _charts(kit)
    used = {WEBHOOKS_BY_KIND[k] for k in _serving_kinds(kit) if k in WEBHOOKS_BY_KIND}
    assert used == {"lws", "aws-load-balancer-controller"}
    for name in sorted(used):
        assert charts[name].get("Wait") is True, f"{name} is installed without wait"


def test_waited_charts_fit_the_kubectl_provider_lambda(kit):
    """The kubectl provider's handler Lambda runs at most 15 minutes (aws_eks_v2 caps HelmChart `timeout` at 15
    minutes for that reason) and pulls and installs the chart in the same invocation: a Helm wait that fills the
    whole budget ends in a Lambda timeout instead of Helm's own error. Ours leaves a third of it.
    """
    for name, chart in _charts(kit).items():
        if chart.get("Wait"):
            assert chart["Timeout"] in ("600s", "900s"), name
    assert _charts(kit)["lws"]["Timeout"] == "600s"


def test_system_node_group_is_on_demand_across_azs(kit):
    """Controllers and the router outlive the block: on-demand, spread over every AZ."""
    group = kit.one("cluster", "AWS::EKS::Nodegroup")
    assert group["CapacityType"] == "ON_DEMAND"
    assert group["InstanceTypes"] == ["m7i.2xlarge"]
    assert len(group["Subnets"]) == len(kit.plan.availability_zones)
    assert group["Labels"] == {"pdkit/role": "system"}
    assert group["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 2, "MaxSize": 4}


def test_system_nodes_use_imdsv2_hop_limit_1(kit):
    """Pods use Pod Identity, never the node role through IMDS."""
    kit.template("cluster").has_resource_properties(
        "AWS::EC2::LaunchTemplate",
        {
            "LaunchTemplateData": Match.object_like(
                {"MetadataOptions": {"HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1, "HttpTokens": "required"}}
            )
        },
    )


def test_access_host_opens_no_inbound_port(kit):
    """kubectl reaches the private endpoint through Session Manager port forwarding, never through an open port."""
    t = kit.template("cluster")
    host = kit.one("cluster", "AWS::EC2::Instance")
    assert host["MetadataOptions"]["HttpTokens"] == "required"
    assert host["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] is True
    groups = t.find_resources("AWS::EC2::SecurityGroup", {"Properties": {"GroupDescription": Match.string_like_regexp("^SSM access host")}})
    (group,) = groups.values()
    assert "SecurityGroupIngress" not in group["Properties"]


def test_access_host_says_no_public_ip_on_its_interface(kit):
    """CT.EC2.PR.8 refuses an instance with a top-level SubnetId and wants AssociatePublicIpAddress false on each
    interface it creates (ct-ec2-pr-8.guard); CT.EC2.PR.19 wants a type that encrypts traffic between instances,
    which t4g does not (ct-ec2-pr-19.guard; EC2 User Guide, encryption in transit)."""
    host = kit.one("cluster", "AWS::EC2::Instance")
    assert "SubnetId" not in host
    (interface,) = host["NetworkInterfaces"]
    assert interface["AssociatePublicIpAddress"] is False
    assert not host["InstanceType"].startswith("t4g.")


def test_system_node_template_turns_on_detailed_monitoring(kit):
    """CT.EC2.PR.10 refuses launch templates without Monitoring.Enabled true (ct-ec2-pr-10.guard)."""
    (template,) = kit.template("cluster").find_resources("AWS::EC2::LaunchTemplate").values()
    assert template["Properties"]["LaunchTemplateData"]["Monitoring"] == {"Enabled": True}


def test_cluster_api_accepts_the_access_host(kit):
    kit.template("cluster").has_resource_properties(
        "AWS::EC2::SecurityGroupIngress", {"FromPort": 443, "ToPort": 443, "Description": "kubectl through the SSM access host"}
    )


def test_outputs_for_operators(kit):
    """The runbooks read these outputs (access host id for the SSM path, cluster name and endpoint)."""
    outputs = kit.template_json("cluster")["Outputs"]
    assert {"ClusterName", "AccessHostId", "ClusterEndpoint"} <= set(outputs)


def test_load_balancer_controller_version_comes_from_the_pins(kit):
    """The cluster installs the controller (a KeyError here if not), and one place pins it
    (pdkit/model/data/addons.yaml): the chart the cluster installs is that version."""
    chart = _charts(kit)["aws-load-balancer-controller"]
    assert chart["Version"] == addons().load_balancer_controller.lstrip("v")


def test_kube_proxy_pin_matches_the_cluster_version(kit):
    """Add-on builds are per Kubernetes minor: a kube-proxy for another minor fails at deploy."""
    kube_proxy = addons().managed["kube-proxy"]
    # The cluster runs the plan's version (test_kubernetes_version_from_the_profile).
    assert kube_proxy.startswith(f"v{kit.plan.kubernetes_version}.")
