"""What a role's pod is, whoever runs it: the serving LeaderWorkerSets and `pdkit validate`'s checks for
that role take their image, resources, security context and environment from here, so a validation
pass on a role predicts that role's serving pods (issue 14, item 8): UCCL-EP on decode, and Mooncake's
transfer benchmark with prefill's pod as initiator and decode's as target (pdkit/render/fabric.py).

Security: by default the pods run as the image's non-root user with every capability dropped, no
privilege and the node's default seccomp profile (kubelet's: Unconfined unless seccompDefault is on),
serving and validation alike. EFA's locked memory comes from the node
(a systemd LimitMEMLOCK drop-in for containerd, pdkit/render/node_config.py), not from a capability.
`roles.<role>.security` (pdkit/model/profile.py RoleSecurity) is the documented escape hatch; runbooks/02-serve.md
("Pod security") says which need each capability answers:
- SYS_NICE: the runtime's default seccomp profile (RuntimeDefault) admits get_mempolicy, mbind,
  set_mempolicy and set_mempolicy_home_node only when CAP_SYS_NICE is in the container's capabilities
  (moby profiles/seccomp/default.json, whose rules containerd's contrib/seccomp/seccomp_default.go
  applies against the bounding set). libnuma's queries (numa_available, the NUMA node of a buffer
  that Mooncake's topology lookup asks for) need them; being a bounding-set test, it works for the
  non-root user too. `seccomp: node-default` is the other way out, and "baseline" admits it.
- IPC_LOCK: lets a process pin memory past RLIMIT_MEMLOCK (ibv_reg_mr of host buffers by UCCL-EP's
  proxy and libfabric). Kubernetes grants no ambient capabilities, so for the non-root user it only
  matters with a root process; the node's unlimited limit is the mechanism the kit relies on.
"""

from __future__ import annotations

from pdkit.model.plan import Plan, RolePlan
from pdkit.render import pod
from pdkit.render.pod import EFA, GPU, Obj
from pdkit.render.serving.environment import fabric_env
from pdkit.render.serving.sglang_args import role_env


def devices(role: RolePlan) -> dict[str, str]:
    return {GPU: str(role.gpus_per_node), EFA: str(role.efa_devices_per_node)}


def node_share(plan: Plan) -> dict[str, str]:
    """The CPU and memory a pod that has a GPU node to itself requests (the plan's gpu_pod)."""
    return {"cpu": str(plan.gpu_pod.cpu), "memory": f"{plan.gpu_pod.memory_mib}Mi"}


def resources(plan: Plan, role: RolePlan) -> Obj:
    return pod.device_resources(node_share(plan), devices(role))


def container_security(role: RolePlan) -> Obj:
    sec = role.settings.security
    return pod.container_security(privileged=sec.privileged, add=sec.capabilities)


def pod_security(role: RolePlan) -> Obj:
    """The same seccomp profile for serving and validation: before, serving ran the node's default
    (Unconfined unless kubelet runs with seccompDefault) and validation RuntimeDefault, so a NUMA
    syscall could fail in validation and pass in serving, or the other way round."""
    seccomp = role.settings.security.seccomp
    return pod.pod_security(None if seccomp == "node-default" else seccomp)


def environment(plan: Plan, role: RolePlan, *, host_network: bool) -> dict[str, str]:
    """The whole environment a role's SGLang process sees (serving splits it into the fabric ConfigMap
    and the role's own variables)."""
    return {**fabric_env(plan, host_network=host_network), **role_env(plan, role.name)}


def relaxed(plan: Plan) -> bool:
    """Whether any role uses more than Pod Security "baseline" admits."""
    return any(r.settings.security.relaxed for r in plan.roles.values())


def validation_pod_security(plan: Plan) -> str:
    """The level `pdkit validate`'s namespace enforces: "restricted" unless a role runs with its
    node's seccomp default ("baseline" admits an unset profile, "restricted" does not) or with more
    than "baseline" admits ("privileged", as the serving namespace)."""
    if relaxed(plan):
        return "privileged"
    if any(r.settings.security.seccomp == "node-default" for r in plan.roles.values()):
        return "baseline"
    return "restricted"
