"""Per-GPU memory of one SGLang role: what `--mem-fraction-static` leaves outside the static pool, and why.

SGLang sizes its KV pool from the static fraction (weights, draft weights and KV cache live inside it);
everything it allocates after that must fit in the rest: activations, the DeepEP/UCCL-EP buffers, and
every CUDA graph the role captures (decode captures one per batch size, on every DP rank). A fraction
that leaves too little fails in graph capture, after the weights have loaded: AWS's p5en 2P2D runs
(awslabs/awsome-distributed-ai, 3.test_cases/pytorch/sglang/dsr1-deepep-efa, benchmarks/RESULTS-2p2d.md
and recipe/serve-pd.sh; DeepSeek-R1 on SGLang 0.5.13) saw UCCL-EP decode OOM in capture at 0.82 and run
at 0.70, and DP-attention decode need `--cuda-graph-bs 128` at 0.78.

The reserve is built from three sources, each stated where it is used:
- SGLang 0.5.23's own default (srt/arg_groups/memory_hook.py, `_handle_gpu_memory_settings`,
  `reserve_for_graph_mb`): a floor for activations and metadata, and a cost per captured decode batch
  size that grows with the DP size;
- the EP buffers as DeepEP and UCCL-EP size them (formulas below);
- two calibrations against AWS's measured points (tests/test_plan.py checks them): a larger cost per
  DP-attention graph than SGLang's (its default alone puts AWS's DP-attention decode at 0.90, where
  they ran 0.78), and a graph-capture headroom for UCCL-EP's low-latency path.
All figures are MiB (SGLang's unit); `MemoryBudget` reports GB like the rest of the plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

MIB = 2**20

# SGLang 0.5.23 memory_hook.py: reserved_mem = 512 + activation_tokens * 1.5 + tp * pp / 8 * 1024 + graphs,
# at least 10 GiB on a GPU above 60 GiB; activation_tokens = max(running requests x draft tokens, 2048) on
# decode, max(chunked_prefill_size, 2048) on prefill; EAGLE draft models and their graphs add 2 GiB.
SGLANG_METADATA_MIB = 512
SGLANG_ACTIVATION_MIB_PER_TOKEN = 1.5
SGLANG_MIN_ACTIVATION_TOKENS = 2048
SGLANG_FLOOR_MIB = 10 * 1024
SGLANG_FLOOR_ABOVE_MIB = 60 * 1024
SGLANG_EAGLE_MIB = 2 * 1024
# reserve_for_graph_mb: decode graphs cost max_bs * 2 MiB, plus max_bs * attn_dp * 3 MiB with DP attention
# (x 1.5 more above max_bs 300); an MLA prefill graph set costs 1.5 GiB.
SGLANG_DECODE_GRAPH_MIB_PER_BS = 2
SGLANG_DP_GRAPH_MIB_PER_BS_RANK = 3
SGLANG_DP_LARGE_GRAPH_BS = 300
SGLANG_DP_LARGE_GRAPH_MIB_PER_BS_RANK = 1.5
SGLANG_MLA_PREFILL_GRAPHS_MIB = 1536
# Calibration (AWS, above): SGLang's DP-attention graph term, scaled until their DeepEP + DP16 decode with
# graph bs 128 derives next to the 0.78 it ran at (SGLang's 3 MiB gives 0.90). SGLang's own comment on
# this term: "DP attention uses much more memory for large cuda graph max bs, likely due to some
# inefficiencies in torch allocator".
DP_GRAPH_MIB_PER_BS_RANK = 11

# SGLang's DeepEP dispatcher (srt/layers/moe/token_dispatcher/deepep.py) sizes the buffer from DeepEP's
# own hints with hidden_bytes = hidden * 2 (BF16) and, in low-latency mode, 128 tokens per rank
# (SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK, srt/environ.py).
LL_TOKENS_PER_RANK = 128
DEEPEP_NUM_SMS = 20  # deep_ep.Buffer.num_sms
NVL_PEERS = 8  # NUM_MAX_NVL_PEERS
# deep_ep/utils.py get_dispatch_config: Config(num_sms, 6, 256, 6, 128) inside a node, (.., 288, .., 128)
# for 16-64 ranks: the NVLink and RDMA chunked receive tokens per channel.
DEEPEP_INTRANODE_RECV_TOKENS = (256, 128)
DEEPEP_INTERNODE_RECV_TOKENS = (288, 128)
# csrc/config.hpp: every buffered token also carries top-k indices (int64) and weights (float) for up to
# 128 experts, 128 FP8 scales (float) and its source metadata.
DEEPEP_TOKEN_EXTRA_BYTES = 128 * 8 + 128 * 4 + 128 * 4 + 8
# UCCL-EP's deep_ep wrapper (uccl-project/uccl ep/deep_ep_wrapper/deep_ep/buffer.py) allocates one scratch
# of max(num_nvl_bytes, num_rdma_bytes, 256 MiB) per GPU for its proxies, beside the runtime's own buffers.
UCCL_EP_MIN_SCRATCH_MIB = 256
# Calibration (AWS, above): UCCL-EP's low-latency path takes far more during graph capture than its
# buffers account for ("0.82 OOMs during CUDA-graph capture inside uccl_ep.cc", serve-pd.sh). This
# headroom puts their plain-TP16 UCCL-EP decode midway between the fraction that OOMed (0.82) and the
# one that ran (0.70), and keeps their DP16 point (graph bs 128) below the 0.70 it ran at.
UCCL_EP_LL_CAPTURE_HEADROOM_MIB = 20 * 1024


@dataclass(frozen=True)
class MemoryBudget:
    """One GPU of one role, in GB: the static pool (weights, draft, KV) and the reserve outside it."""

    gpu_gb: float
    mem_fraction_static: float
    mem_fraction_derived: float  # what the model derives; the profile may override it
    weights_gb: float
    draft_weights_gb: float
    kv_gb: float
    runtime_gb: float  # SGLang's floor: activations, attention metadata, parallel slack
    cuda_graphs_gb: float
    ep_buffers_gb: float
    capture_headroom_gb: float
    draft_graphs_gb: float
    decode_graph_bs: tuple[int, ...]
    derived_by_backend: dict[str, float]  # the same role with each all-to-all backend, for comparison

    @property
    def reserve_gb(self) -> float:
        return round(self.runtime_gb + self.cuda_graphs_gb + self.ep_buffers_gb + self.capture_headroom_gb + self.draft_graphs_gb, 1)


@dataclass(frozen=True)
class RoleShape:
    """What the memory model needs to know about a role (plan.py fills it in)."""

    role: str  # "prefill" or "decode"
    backend: str  # the profile's all-to-all: "uccl-ep", "deepep" or "none"
    deepep_mode: str | None
    tp: int
    pp: int
    ep: int
    attn_dp: int
    max_running_requests: int
    chunked_prefill_size: int | None
    draft_tokens: int | None  # EAGLE MTP draft tokens, None without MTP
    decode_graph_bs: tuple[int, ...]


def decode_graph_batch_sizes(max_running_requests: int, attn_dp: int, *, speculative: bool, cap: int | None) -> tuple[int, ...]:
    """The decode CUDA graph batch sizes, per DP rank: SGLang's own capture list
    (srt/arg_groups/cuda_graph_hook.py, generate_decode_cuda_graph_batch_sizes) up to the largest batch
    one rank can run, max_running_requests / attn_dp, so 16 DP ranks do not each capture sizes no
    rank will ever see (AWS: the full list up to 512 OOMs in capture)."""
    largest = max(1, math.ceil(max_running_requests / attn_dp))
    if cap is not None:
        largest = min(largest, cap)
    if speculative:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, largest + 1, 16)]
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, largest + 1, 32)]
    kept = [bs for bs in sizes if bs <= largest]
    if largest not in kept:
        kept.append(largest)
    return tuple(kept)


def deepep_normal_bytes(ep: int, hidden: int) -> int:
    """DeepEP's high-throughput buffers for one rank: Config.get_nvl_buffer_size_hint and
    get_rdma_buffer_size_hint (deepseek-ai/DeepEP csrc/config.hpp) with SGLang's hidden_bytes."""
    hidden_bytes = hidden * 2
    nvl_recv, rdma_recv = DEEPEP_INTRANODE_RECV_TOKENS if ep <= NVL_PEERS else DEEPEP_INTERNODE_RECV_TOKENS
    rdma_ranks = max(ep // NVL_PEERS, 1)
    nvl_ranks = min(ep, NVL_PEERS)
    channels = DEEPEP_NUM_SMS // 2
    per_token = hidden_bytes + DEEPEP_TOKEN_EXTRA_BYTES
    nvl = channels * nvl_ranks * (2 * rdma_ranks + 3) * 4 + channels * nvl_ranks * nvl_recv * per_token
    rdma = 0 if ep <= NVL_PEERS else channels * rdma_ranks * (NVL_PEERS * 2 + 2) * 2 * 4 + channels * rdma_ranks * rdma_recv * per_token * 2
    return nvl + rdma


def deepep_low_latency_bytes(ep: int, hidden: int, experts: int, tokens_per_rank: int = LL_TOKENS_PER_RANK) -> int:
    """Buffer.get_low_latency_rdma_size_hint (DeepEP csrc/config.hpp, LowLatencyLayout): double-buffered
    send, receive and signalling regions, each sized for every expert's worst case."""
    scales = hidden // 128
    dispatch_msg = 16 + max(hidden * 2, hidden + scales * 4)
    combine_msg = scales * 4 + hidden * 2
    send = max(tokens_per_rank * dispatch_msg, experts * tokens_per_rank * combine_msg)
    recv = max(experts * tokens_per_rank * dispatch_msg, experts * tokens_per_rank * combine_msg)
    signal = experts * 4
    total = 2 * (send + recv + signal)
    return (total // 128 + 1) * 128


def ep_buffer_mib(shape: RoleShape, hidden: int, experts: int) -> float:
    """The all-to-all buffers one GPU holds, per backend (a new backend gets its own branch here)."""
    if shape.backend == "none":
        return 0.0
    normal = deepep_normal_bytes(shape.ep, hidden) if shape.deepep_mode in ("normal", None) else 0
    low_latency = deepep_low_latency_bytes(shape.ep, hidden, experts) if shape.deepep_mode in ("low_latency", None) else 0
    buffers = (normal + low_latency) / MIB
    if shape.backend == "uccl-ep":
        return buffers + max(normal / MIB, low_latency / MIB, UCCL_EP_MIN_SCRATCH_MIB)
    return buffers


def capture_headroom_mib(shape: RoleShape) -> float:
    if shape.backend == "uccl-ep" and shape.role == "decode" and shape.deepep_mode == "low_latency":
        return UCCL_EP_LL_CAPTURE_HEADROOM_MIB
    return 0.0


def runtime_floor_mib(shape: RoleShape, gpu_mib: float) -> tuple[float, float]:
    """SGLang's floor (activations + metadata + parallel slack, at least 10 GiB) and its graph term."""
    if shape.role == "decode":
        tokens = max(shape.max_running_requests * (shape.draft_tokens or 1), SGLANG_MIN_ACTIVATION_TOKENS)
        max_bs = max(shape.decode_graph_bs) if shape.decode_graph_bs else 0
        graphs: float = max_bs * SGLANG_DECODE_GRAPH_MIB_PER_BS
        if shape.attn_dp > 1:
            graphs += max_bs * shape.attn_dp * DP_GRAPH_MIB_PER_BS_RANK
            if max_bs > SGLANG_DP_LARGE_GRAPH_BS:
                graphs += max_bs * shape.attn_dp * SGLANG_DP_LARGE_GRAPH_MIB_PER_BS_RANK
    else:
        tokens = max(shape.chunked_prefill_size or 0, SGLANG_MIN_ACTIVATION_TOKENS)
        graphs = SGLANG_MLA_PREFILL_GRAPHS_MIB
    floor = SGLANG_METADATA_MIB + tokens * SGLANG_ACTIVATION_MIB_PER_TOKEN + shape.tp * shape.pp / 8 * 1024
    if gpu_mib > SGLANG_FLOOR_ABOVE_MIB and floor + graphs < SGLANG_FLOOR_MIB:
        floor = SGLANG_FLOOR_MIB - graphs
    return floor, graphs


def reserve_mib(shape: RoleShape, gpu_mib: float, hidden: int, experts: int) -> dict[str, float]:
    floor, graphs = runtime_floor_mib(shape, gpu_mib)
    return {
        "runtime": floor,
        "cuda_graphs": graphs,
        "ep_buffers": ep_buffer_mib(shape, hidden, experts),
        "capture_headroom": capture_headroom_mib(shape),
        "draft_graphs": SGLANG_EAGLE_MIB if shape.draft_tokens else 0.0,
    }


BACKENDS = ("uccl-ep", "deepep", "none")


def derived_by_backend(shape: RoleShape, gpu_mib: float, hidden: int, experts: int) -> dict[str, float]:
    """The fraction each backend would get for this role (its own DeepEP mode; none has no buffers)."""
    mode = shape.deepep_mode or ("normal" if shape.role == "prefill" else "low_latency")
    return {
        backend: derived_fraction(
            replace(shape, backend=backend, deepep_mode=None if backend == "none" else mode), gpu_mib, hidden, experts
        )
        for backend in BACKENDS
    }


def derived_fraction(shape: RoleShape, gpu_mib: float, hidden: int, experts: int) -> float:
    """The largest static fraction, to a hundredth, that leaves the whole reserve outside the pool."""
    reserve = sum(reserve_mib(shape, gpu_mib, hidden, experts).values())
    return math.floor((gpu_mib - reserve) / gpu_mib * 100) / 100
