"""Every validation limit is derived from the plan, the instance table and the seed, in one place."""

from __future__ import annotations

import pytest

from pdkit.model import plan as plan_mod
from pdkit.model import profile_files, seed, thresholds
from pdkit.model.thresholds import derive


def _plan(raw):
    return plan_mod.build(profile_files.parse(raw))


def test_seed_layout_thresholds(th):
    assert th.efa_devices_per_node == 16
    assert th.gpus_per_node == 8
    assert th.node_line_rate_gbps == 400.0  # 3200 Gbps / 8
    assert th.nccl_gpus == 32
    assert th.allreduce_min_busbw_gbps == 200.0
    # 400 / 8 per GPU x (32 - 1) / (32 - 8) = 64.6; a quarter of it
    assert th.alltoall_ceiling_busbw_gbps == pytest.approx(64.6)
    assert th.alltoall_min_busbw_gbps == pytest.approx(16.1)
    assert th.memlock == "unlimited"


def test_pingpong_limit_is_the_seeds_per_message_overhead(th):
    assert th.pingpong_max_latency_us == seed.load().per_message_overhead_us == 28


def test_uccl_budget_is_the_tpot_alarm_over_the_moe_layers(th):
    assert th.moe_layers == 75
    assert th.uccl_max_dispatch_combine_us == pytest.approx(533.3)  # 40 ms / 75
    assert (th.uccl_hidden, th.uccl_topk, th.uccl_experts) == (6144, 8, 256)
    assert th.uccl_num_tokens == 32  # roles.decode.cuda_graph_max_bs
    assert th.uccl_nodes == 2


def test_uccl_budget_follows_the_profiles_alarm(raw_with):
    th = derive(_plan(raw_with("observability.tpot_p99_ms", 30)))
    assert th.uccl_max_dispatch_combine_us == pytest.approx(400.0)


def test_uccl_tokens_without_cuda_graph_cap(raw_with):
    """max_running_requests over attention DP ranks, rounded up: 512 / 16 = 32; 500 / 16 -> 32."""
    th = derive(_plan(raw_with("roles.decode.cuda_graph_max_bs", None, "roles.decode.max_running_requests", 500)))
    assert th.uccl_num_tokens == 32


def test_fewer_efa_devices_lower_the_bandwidth_floors(raw_with):
    th = derive(_plan(raw_with("capacity.efa_devices", 8)))
    assert th.efa_devices_per_node == 8
    assert th.node_line_rate_gbps == 200.0
    assert th.allreduce_min_busbw_gbps == 100.0


def test_floors_stay_far_above_the_socket_fallback(th):
    """~14 GB/s per node on sockets: both floors must separate it from a working fabric."""
    socket_per_node = 14
    assert th.allreduce_min_busbw_gbps > 10 * socket_per_node
    assert th.alltoall_min_busbw_gbps > 5 * socket_per_node / th.gpus_per_node
    assert thresholds.ALLREDUCE_LINE_RATE_FLOOR < 1


def test_thresholds_serialise(th):
    d = th.to_dict()
    assert d["allreduce_min_busbw_gbps"] == 200.0
    assert set(d) >= {"pingpong_max_latency_us", "uccl_max_dispatch_combine_us", "efa_devices_per_node"}
