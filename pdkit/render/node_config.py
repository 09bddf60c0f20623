"""nodeadm user data for GPU nodes: a MIME part of type application/node.eks.aws with a NodeConfig.

EKS managed node groups add their own bootstrap NodeConfig (cluster name, endpoint, CA) when the
launch template names no AMI; nodeadm merges this part in. RAID0 over the instance NVMe mounts at
/mnt/k8s-disks/, where containerd, pod logs and the staged weights live.
https://awslabs.github.io/amazon-eks-ami/nodeadm/doc/api/
"""

from __future__ import annotations

from pathlib import Path

import yaml

BOUNDARY = "PDKIT-NODECONFIG"
NVME_MOUNT = "/mnt/k8s-disks/"
CONTAINERD_MEMLOCK_DROPIN = "/etc/systemd/system/containerd.service.d/20-pdkit-memlock.conf"


def node_config() -> dict[str, object]:
    return {"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig", "spec": {"instance": {"localStorage": {"strategy": "RAID0"}}}}


def user_data() -> str:
    """NodeConfig plus the containerd locked-memory drop-in: EFA registers GPU and host memory, the serving
    pods run as a non-root user without CAP_IPC_LOCK, so they inherit containerd's limit (8 MiB by default).
    The custom AMI bakes the same drop-in (ami/components/container-limits.yaml)."""
    return multipart(node_config(), ('text/x-shellscript; charset="us-ascii"', containerd_memlock_script()))


def multipart(config: dict[str, object], *more: tuple[str, str], width: int = 80) -> str:
    """MIME multipart user data: the NodeConfig part first (YAML lines up to `width`), then each (content type, body) of `more`."""
    node = yaml.safe_dump(config, sort_keys=False, width=width)
    parts = [("application/node.eks.aws", f"---\n{node}"), *more]
    body = "".join(f"--{BOUNDARY}\nContent-Type: {kind}\n\n{text}\n" for kind, text in parts)
    return f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="{BOUNDARY}"\n\n{body}--{BOUNDARY}--\n'


def containerd_memlock_script() -> str:
    """The containerd memlock drop-in as a user-data script (MIME text/x-shellscript), for nodes on the
    EKS-optimized AMI (the custom image bakes the same file). cloud-init runs it before nodeadm starts containerd (nodeadm-run.service
    is After=cloud-final.service); try-restart covers a containerd that is already running."""
    return (
        "#!/usr/bin/env bash\n"
        "set -euo pipefail\n"
        f"mkdir -p {Path(CONTAINERD_MEMLOCK_DROPIN).parent}\n"
        f"printf '[Service]\\nLimitMEMLOCK=infinity\\n' > {CONTAINERD_MEMLOCK_DROPIN}\n"
        "systemctl daemon-reload\n"
        "systemctl try-restart containerd.service\n"
    )
