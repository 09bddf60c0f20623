"""Each role's full environment (the shared ConfigMap plus the role's own env), from the plan, with its source."""

from __future__ import annotations

import dataclasses

from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.render.serving import environment
from tests.fixtures.serving import process_env, rendered, role_pods


def full_env(plan, role, *, host_network=False):
    """What the rendered SGLang container's process sees: envFrom the ConfigMap, then its own env over it."""
    objs = rendered(plan, host_network=host_network)
    (sglang,) = role_pods(objs)[role]["containers"]
    return process_env(plan, objs, sglang)


SHARED = {
    "FI_PROVIDER": "efa",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_EFA_FORK_SAFE": "1",
    "NCCL_NET_PLUGIN": "ofi",
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,NET",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "NCCL_SOCKET_IFNAME": "eth0",
    "GLOO_SOCKET_IFNAME": "eth0",
    "UCCL_SOCKET_IFNAME": "eth0",
    "MOONCAKE_PROTOCOL": "efa",
    "FI_HMEM": "cuda",
    "MC_FORCE_AUTO_DISCOVERY": "1",
    "MC_EFA_NIC_SELECTION": "all",
}


def test_seed_prefill_environment_is_exactly_this(plan):
    """Prefill (UCCL-EP, EP8 inside a node, no DP attention), on the seed profile:
    - UCCL_EP_CPU_TIMEOUT_SECS=600: UCCL-EP's dispatch wait defaults to 100 s (ep/include/ep_configs.cuh
      NUM_CPU_TIMEOUT_SECS, overridable since ep/include/common.hpp get_cpu_timeout_secs); UCCL's p5en SGLang
      script ep/bench/sglang/run_dbo_sglang.sh at the pinned commit runs 600.
    - UCCL_SOCKET_IFNAME: ep/README.md, "To avoid possible hangs ... UCCL_SOCKET_IFNAME".
    - FI_HMEM=cuda, MC_FORCE_AUTO_DISCOVERY=1: AWS's serve-pd.sh (awslabs/awsome-distributed-ai
      3.test_cases/pytorch/sglang/dsr1-deepep-efa/recipe), without FI_HMEM=cuda GPU registration fails.
    - No NCCL channel cap: no DP attention on this role.
    - No MC_MAX_WR: AWS's 128K-token transfers died on `CQ drain wr_depth=256, max=256`
      (benchmarks/RESULTS-2p2d.md), the old fixed default. Mooncake#3296 reads the depth from libfabric
      (fi_tx_attr size, 4096 on p5) and its EFA docs (efa_transport.md, "Environment Variables") say an
      MC_MAX_WR override fails transfers either way.
    - No PYTORCH_CUDA_ALLOC_CONF: Mooncake over EFA refuses expandable segments."""
    assert full_env(plan, "prefill") == {**SHARED, "SGLANG_CACHE_DIR": "/var/cache/pdkit/prefill", "UCCL_EP_CPU_TIMEOUT_SECS": "600"}


def test_seed_decode_environment_is_exactly_this(plan):
    """Decode (UCCL-EP, DP16 attention across two nodes): as prefill, plus NCCL_MAX_NCHANNELS=8, which
    UCCL's run_dbo_sglang.sh sets because NCCL's DP-attention all-gathers next to UCCL-EP's dispatch "can
    deadlock at the second dispatch_b"."""
    assert plan.decode.attn_dp > 1
    assert plan.decode.a2a_backend == "uccl-ep"
    assert full_env(plan, "decode") == {
        **SHARED,
        "SGLANG_CACHE_DIR": "/var/cache/pdkit/decode",
        "UCCL_EP_CPU_TIMEOUT_SECS": "600",
        "NCCL_MAX_NCHANNELS": "8",
    }


def test_host_network_excludes_interfaces_for_nccl_and_uccl_alike(plan):
    """On the host's namespace the primary interface name varies; NCCL and UCCL get the same exclusion list."""
    env = full_env(plan, "decode", host_network=True)
    assert env["NCCL_SOCKET_IFNAME"] == env["UCCL_SOCKET_IFNAME"] == environment.HOST_INTERFACE_EXCLUDE
    assert "GLOO_SOCKET_IFNAME" not in env


def test_no_uccl_settings_on_a_role_without_uccl_ep(plan):
    """A role on upstream DeepEP or none has no UCCL-EP proxy to time out and no UCCL/NCCL contention to cap."""
    other = dataclasses.replace(plan.decode, a2a_backend="none", moe_a2a_backend="none", deepep_mode=None)
    env = environment.role_fabric_env(plan, other)
    assert env == {"SGLANG_CACHE_DIR": "/var/cache/pdkit/decode"}


def test_nixl_gets_no_mooncake_settings(raw_with):
    """FI_HMEM and MC_* are Mooncake's (SHARED above has them); NIXL drives EFA through its LIBFABRIC backend
    instead, in the rendered ConfigMap."""
    env = full_env(plan_mod.build(profile_files.parse(raw_with("serving.kv_transfer", "nixl"))), "decode")
    assert env["SGLANG_DISAGGREGATION_NIXL_BACKEND"] == "LIBFABRIC"
    assert not {"MOONCAKE_PROTOCOL", "FI_HMEM", "MC_FORCE_AUTO_DISCOVERY", "MC_EFA_NIC_SELECTION"} & env.keys()
