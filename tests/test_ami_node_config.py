"""The nodeadm bootstrap of a node launched from the kit's AMI (EKS merges none of its own then)."""

from __future__ import annotations

import email
from typing import Any

import pytest
import yaml

from pdkit.render import ami, node_config
from tests.conftest import plan_of

CLUSTER = ami.ClusterDetails(
    name="glm51-2p2d",
    api_server_endpoint="https://0123456789ABCDEF.gr7.eu-south-2.eks.amazonaws.com",
    certificate_authority="LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t" * 40,
    service_cidr="172.20.0.0/16",
)


def _decode_config() -> tuple[dict[str, Any], dict[str, Any]]:
    plan = plan_of()
    labels, taints = ami.role_kubelet_identity(plan, plan.decode)
    message = email.message_from_string(ami.custom_user_data(CLUSTER, labels=labels, taints=taints))
    assert message.is_multipart()
    (part,) = message.get_payload()
    assert part.get_content_type() == "application/node.eks.aws"
    return yaml.safe_load(part.get_payload()), {"labels": labels, "taints": taints}


def test_carries_the_cluster_coordinates_nodeadm_requires():
    """apiServerEndpoint, certificateAuthority and cidr are required with a custom AMI (EKS launch-templates doc)."""
    config, _ = _decode_config()
    assert config["apiVersion"] == "node.eks.aws/v1alpha1"
    assert config["kind"] == "NodeConfig"
    assert config["spec"]["cluster"] == {
        "name": CLUSTER.name,
        "apiServerEndpoint": CLUSTER.api_server_endpoint,
        "certificateAuthority": CLUSTER.certificate_authority,
        "cidr": CLUSTER.service_cidr,
    }


def test_keeps_the_gpu_node_settings_of_the_eks_optimized_path():
    """Same RAID0 over the instance NVMe as pdkit.render.node_config, so switching image source changes nothing else."""
    config, _ = _decode_config()
    eks_optimized: Any = node_config.node_config()
    assert (
        config["spec"]["instance"]["localStorage"]["strategy"] == eks_optimized["spec"]["instance"]["localStorage"]["strategy"] == "RAID0"
    )


def test_containerd_stays_on_the_root_volume_with_the_pre_pulled_image():
    config, _ = _decode_config()
    assert config["spec"]["instance"]["localStorage"]["disabledMounts"] == ["Containerd"]


def test_kubelet_registers_with_the_role_taint():
    """With a custom AMI, EKS applies node-group taints only after registration; the kubelet must bring them."""
    config, _ = _decode_config()
    flags = config["spec"]["kubelet"]["flags"]
    assert "--register-with-taints=pdkit/role=decode:NoSchedule" in flags


def test_kubelet_registers_with_role_gpu_and_node_group_labels():
    config, identity = _decode_config()
    (labels_flag,) = [f for f in config["spec"]["kubelet"]["flags"] if f.startswith("--node-labels=")]
    labels = dict(item.split("=", 1) for item in labels_flag.removeprefix("--node-labels=").split(","))
    plan = plan_of()
    assert labels["pdkit/role"] == "decode"
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["eks.amazonaws.com/nodegroup"] == plan.decode.node_group_name
    assert labels["eks.amazonaws.com/capacityType"] == "CAPACITY_BLOCK"
    assert labels == identity["labels"]


def test_long_certificate_is_not_folded():
    """PyYAML folds long scalars at 80 columns by default; a folded CA would still parse, but a CDK token would break."""
    text = ami.custom_user_data(CLUSTER, labels={"a": "b"})
    assert f"certificateAuthority: {CLUSTER.certificate_authority}\n" in text


def test_tokens_pass_through_unchanged():
    """In a stack the endpoint and CA are CloudFormation tokens; they must land in the user data verbatim."""
    token = "${Token[TOKEN.123]}"  # noqa: S105 (a CDK token placeholder, not a secret)
    cluster = ami.ClusterDetails(name="c", api_server_endpoint=token, certificate_authority=token, service_cidr="10.100.0.0/16")
    text = ami.custom_user_data(cluster, labels={"a": "b"})
    assert text.count(token) == 2


def test_no_labels_or_taints_means_no_kubelet_flags():
    config: Any = ami.custom_node_config(CLUSTER, labels={})
    assert "kubelet" not in config["spec"]


@pytest.mark.parametrize("field", ["name", "api_server_endpoint", "certificate_authority", "service_cidr"])
def test_refuses_missing_cluster_details(field):
    broken = ami.ClusterDetails(**{**CLUSTER.__dict__, field: ""})
    with pytest.raises(ValueError, match=field):
        ami.custom_node_config(broken, labels={})


def test_refuses_a_service_cidr_that_is_not_one():
    with pytest.raises(ValueError, match="/12 to /24"):
        ami.custom_node_config(ami.ClusterDetails(**{**CLUSTER.__dict__, "service_cidr": "172.20.0.10"}), labels={})
    with pytest.raises(ValueError, match="not an EKS service CIDR"):
        ami.custom_node_config(ami.ClusterDetails(**{**CLUSTER.__dict__, "service_cidr": "not-a-cidr"}), labels={})


def test_does_not_change_the_eks_optimized_node_config():
    before = node_config.node_config()
    ami.custom_node_config(CLUSTER, labels={"a": "b"})
    assert node_config.node_config() == before
