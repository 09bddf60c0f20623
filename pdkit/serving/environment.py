"""The EFA / NCCL / KV-transfer environment every SGLang pod gets, through one ConfigMap.

Each variable is here because something silently falls back to TCP, or fails late, without it.
"""

from __future__ import annotations

from pdkit.plan import Plan

# The pod's own interface under the VPC CNI (hostNetwork off).
POD_INTERFACE = "eth0"


def fabric_env(plan: Plan, *, host_network: bool) -> dict[str, str]:
    env = {
        # libfabric: the EFA provider, GPUDirect RDMA, and fork safety for Python's subprocesses.
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "FI_EFA_FORK_SAFE": "1",
        # NCCL on SGLang/NGC-style images uses sockets (~14 vs ~400 GB/s) unless told to load aws-ofi-nccl.
        "NCCL_NET_PLUGIN": "ofi",
        # So that the logs say NET/OFI (EFA) or NET/Socket (the fallback): the check in runbooks/02-serve.md.
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        # No internet at serve time: the weights are staged on the node, never fetched from the Hub.
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    if host_network:
        # The host's primary interface name differs by AMI and instance; exclude the rest instead.
        env["NCCL_SOCKET_IFNAME"] = "^lo,docker,veth,eni"
    else:
        env["NCCL_SOCKET_IFNAME"] = POD_INTERFACE
        env["GLOO_SOCKET_IFNAME"] = POD_INTERFACE
    if plan.profile.serving.kv_transfer == "mooncake":
        # Without it Mooncake silently installs its TCP transport (SGLang reads it, default "rdma").
        env["MOONCAKE_PROTOCOL"] = "efa"
    else:
        # NIXL's default UCX backend does not drive EFA; its LIBFABRIC plugin does.
        env["SGLANG_DISAGGREGATION_NIXL_BACKEND"] = "LIBFABRIC"
    return env
