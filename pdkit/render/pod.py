"""The kit's pod conventions, once: serving, validation, the benchmark and the weights import build their
pods from these, so a security default, a device name or the YAML form changes in one place.

- Devices come from the device plugins by resource name (GPU, EFA): no privileged container, no hostPath to /dev.
- Containers meet Pod Security "restricted": non-root, no privilege or escalation, every capability
  dropped (`container_security`); pods run as non-root under the RuntimeDefault seccomp profile
  (`pod_security`). A role's escape hatch (pdkit/render/serving/role_pod.py) passes its own privilege,
  capabilities and seccomp profile through the same two functions.
- /dev/shm is an in-memory emptyDir sized from the node's memory (NCCL, torch IPC), never the host's.
- GPU pods tolerate their roles' taints, select the plan's instance type and keep one pod per node.
- Namespaces pin their Pod Security levels to the cluster's version; `to_yaml` is the one YAML form.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from pdkit.model.plan import Plan, RolePlan

Obj = dict[str, Any]

GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
RUNTIME_DEFAULT = "RuntimeDefault"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
SHM_PATH = "/dev/shm"  # noqa: S108 - mounted from the pod's memory emptyDir (shm_volume), not the host's /dev/shm
SHM_VOLUME = "dshm"
# Set by the Job controller on every pod it creates (Kubernetes >= 1.27).
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def container_security(*, privileged: bool = False, add: Sequence[str] = (), read_only_root: bool = False) -> Obj:
    caps: Obj = {"drop": ["ALL"]}
    if add:
        caps["add"] = list(add)
    # The API server refuses privileged together with allowPrivilegeEscalation: false.
    ctx: Obj = {"runAsNonRoot": True, "allowPrivilegeEscalation": privileged, "privileged": privileged}
    if read_only_root:
        ctx["readOnlyRootFilesystem"] = True
    ctx["capabilities"] = caps
    return ctx


def pod_security(seccomp: str | None = RUNTIME_DEFAULT) -> Obj:
    """`seccomp=None` leaves the profile to the node (kubelet's default)."""
    ctx: Obj = {"runAsNonRoot": True}
    if seccomp:
        ctx["seccompProfile"] = {"type": seccomp}
    return ctx


def namespace_labels(plan: Plan, *, enforce: str, warn: str, audit: str | None = None) -> dict[str, str]:
    """Pod Security admission labels, each level pinned to the cluster's Kubernetes version."""
    labels = {}
    for mode, level in (("enforce", enforce), ("warn", warn), ("audit", audit)):
        if level:
            labels[f"pod-security.kubernetes.io/{mode}"] = level
            labels[f"pod-security.kubernetes.io/{mode}-version"] = f"v{plan.kubernetes_version}"
    return labels


def env(values: Mapping[str, str]) -> list[Obj]:
    """Name order: the same values render the same pod spec, so a re-render rolls nothing."""
    return [{"name": k, "value": v} for k, v in sorted(values.items())]


def device_resources(requests: Mapping[str, str], devices: Mapping[str, str]) -> Obj:
    """Device-plugin resources are extended resources: Kubernetes wants their requests equal to their limits."""
    return {"requests": {**requests, **devices}, "limits": dict(devices)}


def shm_volume(plan: Plan) -> Obj:
    return {
        "name": SHM_VOLUME,
        "emptyDir": {"medium": "Memory", "sizeLimit": f"{plan.gpu_pod.shm_mib}Mi"},
    }


def shm_mount() -> Obj:
    return {"name": SHM_VOLUME, "mountPath": SHM_PATH}


def tolerations(roles: Iterable[RolePlan]) -> list[Obj]:
    """Each role's GPU nodes carry its taint (plan.RolePlan.taint)."""
    return [{"key": r.taint["key"], "operator": "Equal", "value": r.taint["value"], "effect": r.taint["effect"]} for r in roles]


def gpu_node_selector(plan: Plan, labels: Mapping[str, str]) -> dict[str, str]:
    return {**labels, INSTANCE_TYPE_LABEL: plan.instance.name}


def one_per_node(match_labels: Mapping[str, str]) -> Obj:
    """The pod anti-affinity that keeps two matching pods off one node: each has the node's GPUs to itself."""
    term = {"labelSelector": {"matchLabels": dict(match_labels)}, "topologyKey": HOSTNAME_TOPOLOGY}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


class PlainDumper(yaml.SafeDumper):
    """No YAML anchors or aliases: a block two places share prints in full in each, so every object reads on its own."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(objs: list[Obj]) -> str:
    """The one YAML form of the kit's objects (`pdkit render`, every `--render`)."""
    return yaml.dump_all(objs, Dumper=PlainDumper, sort_keys=False, default_flow_style=False, width=200)
