"""Every PASS/FAIL limit of `pdkit validate`, derived in one place from the plan, the instance table
and the seed. Each number says where it comes from; the checks only compare against these.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pdkit.model import seed as seed_data
from pdkit.model.plan import Plan

# Floors, not targets. A healthy EFA fabric runs close to line rate on all-reduce; the silent socket
# fallback gives ~14 GB/s per node, and a node with half its EFA devices can reach at most half.
# Half of line rate separates those cases with margin on both sides.
ALLREDUCE_LINE_RATE_FLOOR = 0.5
# All-to-all's many-peer pattern runs further from line rate than a ring on any fabric; a quarter of
# its ceiling is still more than ten times what sockets give each GPU.
ALLTOALL_LINE_RATE_FLOOR = 0.25
PINGPONG_MESSAGE_BYTES = 64
# nccl-tests sizes: from 8 B to 16 GiB doubling, the range the validation image's README uses.
NCCL_MIN_BYTES = "8"
NCCL_MAX_BYTES = "16G"
# Large messages are where bus bandwidth is measured; the average over all sizes is dominated by
# tiny ones and is reported for information only.
NCCL_LARGE_MESSAGE_BYTES = 1 << 30
MEMLOCK_REQUIRED = "unlimited"
# Mooncake's transfer_engine_bench, prefill writing into decode's GPU memory as SGLang's KV transfer does.
# Mooncake's EFA guide (doc/en/efa_transport.md, "p5en.48xlarge"): GPU-to-GPU write between two p5en at
# 1 MiB blocks, 16 threads, batch 128, every GPU (--gpu_id=-1) reached 352-366 GB/s, ~91% of the 400 GB/s
# of 16 EFA devices; 64 KiB blocks reach only ~26% of that, so the block size is Mooncake's recommended 1 MiB.
# Half of line rate, as for all-reduce, separates that from a TCP path or half the NICs with margin.
MOONCAKE_LINE_RATE_FLOOR = 0.5
MOONCAKE_BLOCK_BYTES = 1 << 20
MOONCAKE_THREADS = 16
MOONCAKE_BATCH = 128
# The SRD shared endpoint holds at most 256 work requests per NIC: threads x batch beyond NICs x 256 backs
# off and times out (same guide, "Why threads=16 and not 32").
MOONCAKE_WR_PER_NIC = 256
MOONCAKE_DURATION_S = 10


@dataclass(frozen=True)
class Thresholds:
    # The plan: capacity.efa_devices, else every EFA device of the instance type (instance_types.yaml).
    efa_devices_per_node: int
    gpus_per_node: int
    # libfabric registers buffers with the NIC; a finite RLIMIT_MEMLOCK fails EFA deep inside NCCL/UCCL.
    memlock: str
    # fi_pingpong one-way latency of a 64-byte message on the efa provider. Limit: the per-message
    # cost the plan's latency model assumes for the whole CPU-proxy path (seed, ~28 us); a bare fabric
    # slower than that cannot give the seed's decode TPOT.
    pingpong_bytes: int
    pingpong_max_latency_us: float
    # EFA line rate of one node in GB/s: instance network_gbps / 8, scaled by the EFA devices in use.
    node_line_rate_gbps: float
    nccl_gpus: int
    # all_reduce_perf across all GPU nodes: ring/tree bus bandwidth is bounded by one node's line rate.
    allreduce_min_busbw_gbps: float
    # alltoall_perf: each GPU sends (n - g)/n of its data off-node through its share of the line
    # rate, so bus bandwidth (algbw x (n-1)/n) is bounded by line_rate/g x (n-1)/(n-g).
    alltoall_ceiling_busbw_gbps: float
    alltoall_min_busbw_gbps: float
    # UCCL-EP low-latency kernels on one decode group. Tokens per rank: the largest decode batch the
    # CUDA graphs cover (roles.decode.cuda_graph_max_bs), else max_running_requests / attention DP.
    uccl_nodes: int
    uccl_num_tokens: int
    uccl_hidden: int
    uccl_topk: int
    uccl_experts: int
    # Every decode token runs dispatch + combine once per MoE layer, so their sum must fit the p99 TPOT
    # alarm (observability.tpot_p99_ms) divided by the MoE layers, before any compute.
    uccl_max_dispatch_combine_us: float
    tpot_budget_ms: float
    moe_layers: int
    # Mooncake KV write from a prefill node into a decode node (transfer_engine_bench, write, every GPU).
    # Bytes: one request's KV at prefill's context length (kv_bytes_per_token_per_layer x layers x
    # context), spread over the node's GPUs, never below what the bench's threads x batch x block touch.
    mooncake_request_kv_bytes: int
    mooncake_buffer_bytes_per_gpu: int
    mooncake_block_bytes: int
    mooncake_threads: int
    mooncake_batch: int
    mooncake_duration_s: int
    mooncake_min_gbps: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def derive(plan: Plan) -> Thresholds:
    it = plan.instance
    seed = seed_data.load()
    efa = plan.efa_devices_per_node
    line_rate = it.network_gbps / 8 * efa / it.efa_devices
    nodes = sum(r.nodes for r in plan.roles.values())
    n = nodes * it.gpus
    g = it.gpus
    alltoall_ceiling = line_rate / g * (n - 1) / (n - g) if n > g else 0.0
    decode = plan.decode
    tokens = decode.settings.cuda_graph_max_bs or -(-decode.max_running_requests // decode.attn_dp)
    budget_ms = plan.alarms.tpot_p99_ms
    m = plan.model
    request_kv = int(m.kv_bytes_per_token_per_layer * m.layers * plan.prefill.context_length)
    batch = min(MOONCAKE_BATCH, efa * MOONCAKE_WR_PER_NIC // MOONCAKE_THREADS)
    touched = MOONCAKE_THREADS * batch * MOONCAKE_BLOCK_BYTES
    per_gpu = -(-request_kv // g // MOONCAKE_BLOCK_BYTES) * MOONCAKE_BLOCK_BYTES
    return Thresholds(
        efa_devices_per_node=efa,
        gpus_per_node=g,
        memlock=MEMLOCK_REQUIRED,
        pingpong_bytes=PINGPONG_MESSAGE_BYTES,
        pingpong_max_latency_us=seed.per_message_overhead_us,
        node_line_rate_gbps=round(line_rate, 1),
        nccl_gpus=n,
        allreduce_min_busbw_gbps=round(ALLREDUCE_LINE_RATE_FLOOR * line_rate, 1),
        alltoall_ceiling_busbw_gbps=round(alltoall_ceiling, 1),
        alltoall_min_busbw_gbps=round(ALLTOALL_LINE_RATE_FLOOR * alltoall_ceiling, 1),
        uccl_nodes=decode.nodes_per_replica,
        uccl_num_tokens=int(tokens),
        uccl_hidden=plan.model.hidden_size,
        uccl_topk=plan.model.experts_per_token,
        uccl_experts=plan.model.routed_experts,
        uccl_max_dispatch_combine_us=round(budget_ms * 1000 / plan.model.moe_layers, 1),
        tpot_budget_ms=budget_ms,
        moe_layers=plan.model.moe_layers,
        mooncake_request_kv_bytes=request_kv,
        mooncake_buffer_bytes_per_gpu=max(per_gpu, touched),
        mooncake_block_bytes=MOONCAKE_BLOCK_BYTES,
        mooncake_threads=MOONCAKE_THREADS,
        mooncake_batch=batch,
        mooncake_duration_s=MOONCAKE_DURATION_S,
        mooncake_min_gbps=round(MOONCAKE_LINE_RATE_FLOOR * line_rate, 1),
    )
