"""The EFA / NCCL / UCCL-EP / KV-transfer environment of the SGLang pods, from the plan.

`fabric_env` is what every SGLang pod shares (one ConfigMap); `role_fabric_env` is what depends on the
role's all-to-all backend and layout (the role's container env, with pdkit/render/serving/sglang_args.role_env).
Each variable is here because something silently falls back to TCP, times out, or fails late without
it, and each names the recipe or source that ran with it:
- AWS p5en 2P2D recipe: awslabs/awsome-distributed-ai, 3.test_cases/pytorch/sglang/dsr1-deepep-efa/
  recipe/serve-pd.sh and benchmarks/RESULTS-2p2d.md (SGLang + UCCL-EP/DeepEP + Mooncake over EFA).
- UCCL's p5en SGLang script at the pinned commit (containers/versions.yaml):
  https://github.com/uccl-project/uccl/blob/da914a2054c29725464803e379bb3b98de90dfa1/ep/bench/sglang/run_dbo_sglang.sh
  and ep/README.md ("To avoid possible hangs, we suggest setting ... UCCL_SOCKET_IFNAME").
- Mooncake's EFA transport docs (docs/source/design/transfer-engine/efa_transport.md, "Environment Variables").
"""

from __future__ import annotations

from pdkit.model.plan import Plan, RolePlan
from pdkit.pods.compile_cache import role_cache_dir

# The pod's own interface under the VPC CNI (hostNetwork off).
POD_INTERFACE = "eth0"
# The host's primary interface name differs by AMI and instance; exclude the rest instead.
HOST_INTERFACE_EXCLUDE = "^lo,docker,veth,eni"

# UCCL-EP's CPU-side wait for a dispatch/combine (ep/include/common.hpp get_cpu_timeout_secs; compiled-in
# NUM_CPU_TIMEOUT_SECS is 100 s in ep/include/ep_configs.cuh). A cold first boot compiles DeepGEMM kernels
# between dispatches, which AWS saw trip "DeepEP error: timeout (dispatch CPU)"; UCCL's own p5en SGLang
# script (run_dbo_sglang.sh) runs with 600.
UCCL_EP_CPU_TIMEOUT_SECS = 600
# With DP attention, NCCL's all-gathers and UCCL-EP's RDMA dispatch share the EFA devices; uncapped NCCL
# channels "can deadlock at the second dispatch_b (CPU timeout on counters)" (run_dbo_sglang.sh), and
# ep/bench/megatron/README.md measured NCCL picking 32 channels next to UCCL-EP and collapsing on SRD.
NCCL_MAX_CHANNELS_WITH_UCCL_DP = 8
# Mooncake's EFA transport registers every KV buffer on every NIC ("all", its default) or only on the
# GPU's topology-local NICs ("local": faster registration, fewer NICs per transfer). 128K-token KV
# transfers need the bandwidth, so the kit states the default instead of inheriting it silently.
MOONCAKE_EFA_NIC_SELECTION = "all"


def socket_interface(*, host_network: bool) -> str:
    return HOST_INTERFACE_EXCLUDE if host_network else POD_INTERFACE


def fabric_env(plan: Plan, *, host_network: bool) -> dict[str, str]:
    interface = socket_interface(host_network=host_network)
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
        "NCCL_SOCKET_IFNAME": interface,
    }
    if not host_network:
        env["GLOO_SOCKET_IFNAME"] = interface
    if any(r.a2a_backend == "uccl-ep" for r in plan.roles.values()):
        # UCCL-EP bootstraps its proxies over TCP on this interface; unset, it guesses and can hang
        # (ep/README.md: "should be the interface that you would use for the --master_addr").
        env["UCCL_SOCKET_IFNAME"] = interface
    if plan.runs_mooncake:
        env.update(mooncake_env())
    else:
        # NIXL's default UCX backend does not drive EFA; its LIBFABRIC plugin does.
        env["SGLANG_DISAGGREGATION_NIXL_BACKEND"] = "LIBFABRIC"
    return env


def mooncake_env() -> dict[str, str]:
    """Mooncake over EFA, as AWS's serve-pd.sh ran it, plus the NIC selection stated explicitly.

    No MC_MAX_WR: AWS's 128K-token transfers failed on `CQ drain wr_depth=256, max=256`, the old fixed
    work-request depth. Mooncake since kvcache-ai/Mooncake#3296 (in the pinned 0.3.13.post1) reads the
    depth back from the libfabric provider (4096 on p5), and its EFA docs say an MC_MAX_WR override turns
    into transfer failures in both directions; a deeper queue is FI_EFA_TX_SIZE, at the provider.
    """
    return {
        # Without it Mooncake silently installs its TCP transport (SGLang reads it, default "rdma").
        "MOONCAKE_PROTOCOL": "efa",
        # Exactly "cuda": with "system" in FI_HMEM, libfabric's EFA provider refuses fi_mr_regattr of GPU
        # memory (ENOSYS) and the first real KV transfer fails ("Decode instance could be dead").
        "FI_HMEM": "cuda",
        # Lets Mooncake enumerate the EFA devices itself (serve-pd.sh).
        "MC_FORCE_AUTO_DISCOVERY": "1",
        "MC_EFA_NIC_SELECTION": MOONCAKE_EFA_NIC_SELECTION,
    }


def role_fabric_env(plan: Plan, role: RolePlan) -> dict[str, str]:
    """What only this role's pods get: its compile cache, and UCCL-EP's settings when it runs UCCL-EP."""
    env = {
        # On the node's NVMe volume (pdkit/render/serving/compile_cache_objects.py), not the container's
        # writable layer: Triton, inductor, DeepGEMM and FlashInfer JIT caches follow it (sglang/srt/environ.py).
        "SGLANG_CACHE_DIR": role_cache_dir(role.name),
    }
    if role.a2a_backend == "uccl-ep":
        env["UCCL_EP_CPU_TIMEOUT_SECS"] = str(UCCL_EP_CPU_TIMEOUT_SECS)
        if role.attn_dp > 1:
            env["NCCL_MAX_NCHANNELS"] = str(NCCL_MAX_CHANNELS_WITH_UCCL_DP)
    return env
