"""nodeadm user data for GPU nodes: a MIME part of type application/node.eks.aws with a NodeConfig.

EKS managed node groups add their own bootstrap NodeConfig (cluster name, endpoint, CA) when the
launch template names no AMI; nodeadm merges this part in. RAID0 over the instance NVMe mounts at
/mnt/k8s-disks/, where containerd, pod logs and the staged weights live.
https://awslabs.github.io/amazon-eks-ami/nodeadm/doc/api/
"""

from __future__ import annotations

import yaml

BOUNDARY = "PDKIT-NODECONFIG"
NVME_MOUNT = "/mnt/k8s-disks/"


def node_config() -> dict[str, object]:
    return {"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig", "spec": {"instance": {"localStorage": {"strategy": "RAID0"}}}}


def user_data() -> str:
    part = yaml.safe_dump(node_config(), sort_keys=False)
    return (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"\n\n'
        f"--{BOUNDARY}\n"
        "Content-Type: application/node.eks.aws\n\n"
        f"---\n{part}\n"
        f"--{BOUNDARY}--\n"
    )
