"""The GPU node image: what the Image Builder pipeline builds on and passes to its components, where the
result is published, and the nodeadm bootstrap a node launched from it needs.

The rule of the house is that kernel-side pieces (NVIDIA driver, fabric manager, efa.ko, efa-nv-peermem)
come with the host image and user space with the container. The parent is the EKS AL2023 NVIDIA AMI for
the cluster's Kubernetes version; the components in ami/components/ check and pin what it ships, raise
containerd's memlock limit and pre-pull the serving image. They install no driver: AWS does not support
upgrading GPU packages on the EKS-optimized AMIs. GDRCopy is not added (containers/versions.yaml,
not_installed: nothing in the serving stack opens gdrdrv).

With a custom AMI, EKS managed node groups merge no bootstrap of their own into the user data, so the
launch template has to carry the full NodeConfig (cluster name, API endpoint, CA, service CIDR), and the
node group's taints are applied only after the node registers unless the kubelet registers with them.
https://docs.aws.amazon.com/eks/latest/userguide/launch-templates.html
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from ipaddress import IPv4Network
from pathlib import Path
from typing import Any, cast

import yaml

from pdkit.model.images import ROOT
from pdkit.model.plan import Plan, RolePlan
from pdkit.render import node_config

COMPONENTS_DIR = ROOT / "ami" / "components"
# Build order: check what the parent ships first, so a wrong parent fails before a 20+ GB pull.
COMPONENTS = ("nvidia-driver", "efa-kernel", "container-limits", "serving-image")
PARENT_IMAGE_PARAMETER = "/aws/service/eks/optimized-ami/{kubernetes}/amazon-linux-2023/x86_64/nvidia/recommended/image_id"
SERVING_IMAGE = "sglang-efa"
# The serving image is built on CUDA 13 (containers/versions.yaml), which needs the R580 driver branch or a newer
# one (CUDA 13.0 release notes, minimum Linux driver 580.65.06). The EKS AL2023 NVIDIA AMI ships 580 today and will
# move to a newer branch; the checks accept any branch from this one up.
NVIDIA_DRIVER_MIN_BRANCH = 580
MANIFEST = "/etc/pdkit/node-image.env"
# No GPU is needed to build: the parent loads NVIDIA kmods only when a device is present, and nothing here
# compiles against one. A general-purpose x86 type is cheaper than a g-family builder, has the AMI's
# architecture, and 16 vCPUs unpack the serving image's layers in parallel. The second type is a fallback
# when the first has no capacity in the subnet's AZ.
BUILDER_INSTANCE_TYPES = ("m7i.4xlarge", "m6i.4xlarge")
ROOT_DEVICE = "/dev/xvda"
# Room for the serving image twice (compressed content and the unpacked snapshot) on top of the parent's
# ~20 GiB; the GPU launch template's root volume must be at least this large.
ROOT_VOLUME_GIB = 150
CAPACITY_TYPE_LABEL = {"eks.amazonaws.com/capacityType": "CAPACITY_BLOCK"}
NODE_GROUP_LABEL = "eks.amazonaws.com/nodegroup"


def parent_image_parameter(kubernetes_version: str) -> str:
    """SSM parameter of the EKS AL2023 NVIDIA AMI recommended for this Kubernetes version."""
    return PARENT_IMAGE_PARAMETER.format(kubernetes=kubernetes_version)


def parent_image(kubernetes_version: str) -> str:
    """An Image Builder recipe's parent: `ssm:` + parameter name, resolved when each build starts."""
    return f"ssm:{parent_image_parameter(kubernetes_version)}"


def image_parameter(deployment: str) -> str:
    """The promoted GPU node image: the launch template reads its AMI id here when `ami.source: custom`.

    Only an operator writes it (runbooks/05-node-image.md, "Promote"); a build never moves nodes.
    """
    return f"/pdkit/{deployment}/ami/gpu"


def candidate_parameter(deployment: str) -> str:
    """Where each successful build publishes its AMI id, waiting for promotion."""
    return f"{image_parameter(deployment)}-candidate"


def driver_branch_ok(version: str) -> bool:
    """A driver version (580.95.05) is on the minimum branch or a newer one."""
    branch = version.split(".", 1)[0]
    return branch.isdigit() and int(branch) >= NVIDIA_DRIVER_MIN_BRANCH


def component_path(name: str) -> Path:
    return COMPONENTS_DIR / f"{name}.yaml"


@cache
def component_text(name: str) -> str:
    return component_path(name).read_text()


def component_document(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(component_text(name))
    return document


def component_fingerprint(name: str) -> str:
    return hashlib.sha256(component_text(name).encode()).hexdigest()[:10]


def component_parameters(plan: Plan, *, registry: str) -> dict[str, dict[str, str]]:
    """The value of every component parameter, per component, as the recipe passes them.

    `registry` is <account>.dkr.ecr.<region>.amazonaws.com; in a stack it is a token resolved at deploy.
    """
    every = {
        "MinimumDriverBranch": str(NVIDIA_DRIVER_MIN_BRANCH),
        "ImageUri": plan.images[SERVING_IMAGE].uri(registry),
        "Manifest": MANIFEST,
    }
    out = {}
    for name in COMPONENTS:
        declared = [next(iter(p)) for p in component_document(name).get("parameters", [])]
        out[name] = {key: every[key] for key in declared}
    return out


def recipe_fingerprint(plan: Plan) -> str:
    """Changes whenever anything baked into the image changes.

    Image Builder recipes and components are immutable and named: a changed recipe needs a new name, or
    CloudFormation's create-before-delete replacement collides with the old one.
    """
    inputs = {
        "components": {name: component_fingerprint(name) for name in COMPONENTS},
        "parameters": component_parameters(plan, registry="<registry>"),
        "parent": parent_image(plan.kubernetes_version),
        "root_gib": ROOT_VOLUME_GIB,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:10]


@dataclass(frozen=True)
class ClusterDetails:
    """What nodeadm needs to join a node without calling DescribeCluster (all from DescribeCluster)."""

    name: str
    api_server_endpoint: str  # https://...
    certificate_authority: str  # base64, as DescribeCluster returns it
    service_cidr: str  # kubernetesNetworkConfig.serviceIpv4Cidr


def custom_node_config(
    cluster: ClusterDetails, *, labels: Mapping[str, str], taints: Sequence[Mapping[str, str]] = ()
) -> dict[str, object]:
    """The full NodeConfig for a node launched from the kit's AMI: the GPU node settings of
    pdkit.render.node_config plus the cluster coordinates and the kubelet's own labels and taints.

    containerd keeps /var/lib/containerd on the root volume (disabledMounts): the pre-pulled serving image
    lives there, and the default bind mount onto the NVMe RAID would first copy it, read lazily from the
    freshly restored EBS snapshot, at every boot.
    """
    for field_name in ("name", "api_server_endpoint", "certificate_authority", "service_cidr"):
        if not getattr(cluster, field_name):
            raise ValueError(f"ClusterDetails.{field_name} is empty; a custom-AMI node cannot join without it")
    # nodeadm derives the cluster DNS address from it; EKS accepts service CIDRs from /12 to /24.
    try:
        prefix = IPv4Network(cluster.service_cidr).prefixlen
    except ValueError:
        prefix = 0
    if not 12 <= prefix <= 24:
        raise ValueError(f"ClusterDetails.service_cidr {cluster.service_cidr!r} is not an EKS service CIDR (IPv4, /12 to /24)")
    config = copy.deepcopy(node_config.node_config())
    spec = cast(dict[str, Any], config["spec"])
    spec["cluster"] = {
        "name": cluster.name,
        "apiServerEndpoint": cluster.api_server_endpoint,
        "certificateAuthority": cluster.certificate_authority,
        "cidr": cluster.service_cidr,
    }
    spec.setdefault("instance", {}).setdefault("localStorage", {})["disabledMounts"] = ["Containerd"]
    flags = []
    if labels:
        flags.append("--node-labels=" + ",".join(f"{key}={value}" for key, value in sorted(labels.items())))
    if taints:
        flags.append("--register-with-taints=" + ",".join(f"{t['key']}={t['value']}:{t['effect']}" for t in taints))
    if flags:
        spec["kubelet"] = {"flags": flags}
    return config


def custom_user_data(cluster: ClusterDetails, *, labels: Mapping[str, str], taints: Sequence[Mapping[str, str]] = ()) -> str:
    """MIME multipart user data with the one nodeadm part (the format pdkit.render.node_config uses)."""
    return node_config.multipart(custom_node_config(cluster, labels=labels, taints=taints), width=1 << 16)


def role_kubelet_identity(plan: Plan, role: RolePlan) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Labels and taints a role's kubelet registers with, so no pod lands before EKS applies the node group's."""
    labels = {**role.labels, **plan.gpu_node_labels, NODE_GROUP_LABEL: role.node_group_name, **CAPACITY_TYPE_LABEL}
    return labels, [dict(role.taint)]
