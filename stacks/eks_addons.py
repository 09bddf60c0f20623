"""EKS managed add-ons and Helm charts, every version pinned in pdkit/model/data/addons.yaml."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from pdkit.model.catalog import addons
from pdkit.model.plan import ROLE_LABEL, Plan
from pdkit.render.pod import GPU

# Device plugins must run on GPU nodes, which carry the role taints; tolerate them and the usual GPU taint.
GPU_TOLERATIONS = [
    {"key": ROLE_LABEL, "operator": "Exists", "effect": "NoSchedule"},
    {"key": GPU, "operator": "Exists", "effect": "NoSchedule"},
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
]

# Charts whose CRDs or admission webhooks a later stack's apply goes through: Helm must wait for their pods to
# be Ready (`helm upgrade --wait`) before CloudFormation moves on, or the serving stack's DisaggregatedSet hits
# a webhook with no endpoints. The device plugins serve nothing at apply time (their DaemonSets run on GPU
# nodes, which arrive later), so they do not hold the deploy. LWS reports Ready once its manager runs
# (kubernetes-sigs/lws cmd/main.go: readyz is healthz.Ping), seconds before its cert rotator has the webhooks
# serving; the serving stack's own resources (bucket, key, roles) are created first and cover that gap.
WAIT_FOR_READY = {"lws": "the DisaggregatedSet and LeaderWorkerSet CRDs and the webhooks they and their pods pass"}
# aws_eks_v2 caps a chart's timeout at 15 minutes, the kubectl provider Lambda's own limit, and the same
# Lambda also pulls and installs the chart: 10 minutes of waiting leaves it room to report a failure itself.
CHART_WAIT_TIMEOUT = cdk.Duration.minutes(10)


# A string, as the add-on's configuration schema types it (aws eks describe-addon-configuration).
VPC_CNI_CONFIGURATION: dict[str, Any] = {"enableNetworkPolicy": "true"}


class ManagedAddons(Construct):
    """vpc-cni (>= 1.18.5 for EFA-only interfaces), CoreDNS, kube-proxy, Pod Identity agent, node monitoring agent."""

    def __init__(self, scope: Construct, id_: str, *, cluster: eks.Cluster) -> None:
        super().__init__(scope, id_)
        pins = addons().managed
        self.addons: dict[str, eks.CfnAddon] = {}
        for name in ("vpc-cni", "coredns", "kube-proxy", "eks-node-monitoring-agent"):
            config: dict[str, Any] | None = None
            if name == "vpc-cni":
                # The serving namespace's NetworkPolicies (pdkit/render/serving/manifests.py) are only enforced
                # when the VPC CNI's network policy agent is on; EKS accepts them silently otherwise.
                # https://docs.aws.amazon.com/eks/latest/userguide/cni-network-policy-configure.html
                config = VPC_CNI_CONFIGURATION
            if name == "eks-node-monitoring-agent":
                # Its DCGM pod tolerates no taints by default, so GPU health checks (and GPU auto repair)
                # would silently skip the tainted GPU nodes. aws/eks-node-monitoring-agent chart values.
                config = {"dcgmAgent": {"tolerations": [{"operator": "Exists"}]}}
            addon = eks.Addon(self, _logical(name), cluster=cluster, addon_name=name, addon_version=pins[name], configuration_values=config)
            cfn = addon.node.default_child
            assert isinstance(cfn, eks.CfnAddon)
            cfn.resolve_conflicts = "OVERWRITE"
            self.addons[name] = cfn
        # aws_eks_v2 creates this add-on itself for Pod Identity service accounts; pin that one instead of
        # declaring a second add-on of the same name (aws/aws-cdk#32580).
        agent = cluster.eks_pod_identity_agent
        assert agent is not None
        pod_identity = agent.node.default_child
        assert isinstance(pod_identity, eks.CfnAddon)
        pod_identity.addon_version = pins["eks-pod-identity-agent"]
        pod_identity.resolve_conflicts = "OVERWRITE"
        self.addons["eks-pod-identity-agent"] = pod_identity


class ClusterCharts(Construct):
    """NVIDIA and EFA device plugins (GPU nodes), LeaderWorkerSet controller (system nodes)."""

    def __init__(self, scope: Construct, id_: str, *, cluster: eks.Cluster, plan: Plan, system_labels: dict[str, str]) -> None:
        super().__init__(scope, id_)
        charts = addons().charts
        values: dict[str, dict[str, Any]] = {
            "nvidia-device-plugin": {"tolerations": GPU_TOLERATIONS},
            # The chart's allowlist includes p5en.48xlarge from v0.5.10 on (older ones skip it and NCCL falls
            # back to TCP: aws-samples/aws-do-eks#56). Its default image lives in the us-west-2 registry.
            "aws-efa-k8s-device-plugin": {
                "tolerations": GPU_TOLERATIONS,
                "image": {"repository": f"{addons().eks_image_registry(plan.region)}/eks/aws-efa-k8s-device-plugin"},
            },
            # The DisaggregatedSet's validating webhook and editor/viewer roles; its CRD and controller ship either way
            # (kubernetes-sigs/lws v0.10.0 charts/lws/values.yaml). The serving stack applies one DisaggregatedSet.
            "lws": {"nodeSelector": system_labels, "enableDisaggregatedSet": True},
        }
        self.charts = {
            name: cluster.add_helm_chart(
                _logical(name),
                chart=chart.chart,
                repository=chart.repository,
                version=chart.version,
                namespace=chart.namespace,
                create_namespace=chart.namespace != "kube-system",
                release=name,
                values=values[name],
                wait=name in WAIT_FOR_READY,
                timeout=CHART_WAIT_TIMEOUT if name in WAIT_FOR_READY else None,
            )
            for name, chart in charts.items()
        }


def _logical(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))
