"""The plan derives the seed's numbers from the profile and the fact tables, in one place."""

from __future__ import annotations

import json

import pytest

from pdkit.model import catalog, plan, profile_files


@pytest.fixture(scope="module")
def seed():
    prof, path = profile_files.load(None)
    return plan.build(prof, profile_path=path)


def test_default_profile_is_named_once_in_cdk_json():
    """cdk synth and pdkit agree on the default because both read cdk.json's context.profile."""
    cdk_json = json.loads((profile_files.ROOT / "cdk.json").read_text())
    assert profile_files.default_profile_name() == cdk_json["context"]["profile"]
    assert profile_files.resolve(None) == profile_files.resolve(cdk_json["context"]["profile"])


def test_profile_name_and_path_resolve_to_the_same_file():
    by_name = profile_files.resolve("glm51-fp8-2p2d")
    assert profile_files.resolve(str(by_name)) == by_name
    assert profile_files.resolve("config/glm51-fp8-2p2d.yaml") == by_name


def test_seed_layout(seed):
    """DESIGN §2: prefill TP8 x PP2 with CP8 and EP8 per node; decode TP16 with DP16 and EP16 across both nodes."""
    p, d = seed.prefill, seed.decode
    assert (p.nodes, p.gpus, p.tp, p.pp, p.ep, p.attn_cp, p.attn_tp) == (2, 16, 8, 2, 8, 8, 1)
    assert (d.nodes, d.gpus, d.tp, d.pp, d.ep, d.attn_dp, d.attn_tp) == (2, 16, 16, 1, 16, 16, 1)
    assert (p.experts_per_gpu, d.experts_per_gpu) == (32, 16)


def test_decode_crosses_nodes_150_times_per_token(seed):
    """75 MoE layers x (dispatch + combine): the seed's latency-critical EFA path."""
    assert seed.decode.ep_spans_nodes
    assert seed.decode.cross_node_moe_messages_per_token == 150
    assert not seed.prefill.ep_spans_nodes
    assert seed.prefill.cross_node_moe_messages_per_token == 0
    assert seed.prefill.pp_transfers_per_chunk == 1


def test_efa_devices_come_from_the_instance_table(seed):
    assert seed.efa_devices_per_node == catalog.instance_types()["p5en.48xlarge"].efa_devices == 16


def test_memory_budget_is_plausible(seed):
    """Weights ~756 GB: experts split over tp x pp GPUs, dense parts replicated per attention rank."""
    m = seed.model
    assert 720 < m.routed_expert_gb < 730
    assert seed.prefill.weights_gb_per_gpu == pytest.approx(m.routed_expert_gb / 16 + m.dense_gb / 2, abs=0.1)
    assert seed.decode.weights_gb_per_gpu == pytest.approx(m.routed_expert_gb / 16 + m.dense_gb, abs=0.1)
    for role in seed.roles.values():
        assert role.weights_gb_per_gpu + role.kv_budget_gb_per_gpu == pytest.approx(
            role.mem_fraction_static * seed.instance.gpu_memory_gb, abs=0.2
        )
        assert role.kv_tokens_per_gpu * role.attn_cp >= role.context_length


def test_scaling_is_a_profile_change():
    """Two replicas per role on eight instances: same code, only the profile differs."""
    prof, path = profile_files.load("glm51-fp8-4p4d")
    p = plan.build(prof, profile_path=path)
    assert p.instance_count == 8
    assert {r.name: (r.replicas, r.nodes) for r in p.roles.values()} == {"prefill": (2, 4), "decode": (2, 4)}


def test_cost_estimate_uses_the_profile_price(raw_with):
    p = plan.build(profile_files.parse(raw_with("capacity.hourly_price_usd", 50.0)))
    assert p.estimates.gpu_cost_per_hour_usd == 200.0
    assert p.estimates.block_cost_usd == 200.0 * 48


def test_a_gpu_pod_requests_three_quarters_of_its_node_and_an_eighth_for_shm(seed):
    """p5en.48xlarge has 192 vCPUs and 2,048 GiB (EC2 accelerated-computing instance table): the pod that has the
    node to itself requests 144 CPUs and 1,536 GiB, leaving a quarter to kubelet and the node's daemons, and
    /dev/shm is 256 GiB. Decided once in the plan; serving and validation pods both render it."""
    assert seed.gpu_pod == plan.GpuPod(cpu=144, memory_mib=1_572_864, shm_mib=262_144)


def test_plan_json_is_plain_data(seed):
    data = json.loads(json.dumps(seed.to_dict()))
    assert data["roles"]["decode"]["cross_node_moe_messages_per_token"] == 150
    assert data["instance"]["gpu_memory_gb"] == 151.4
    assert "settings" not in data["roles"]["decode"]


def test_the_plan_decides_what_the_renderers_used_to_read_from_the_profile(raw_with):
    """Renderers read decisions, never the profile: the plan carries no profile, and each switch is decided once."""
    p = plan.build(profile_files.parse(raw_with("ami.source", "custom", "serving.kv_transfer", "nixl", "cluster.system_nodes.count", 3)))
    assert not hasattr(p, "profile")
    assert (p.custom_ami, p.ami_source, p.kv_transfer, p.runs_mooncake) == (True, "custom", "nixl", False)
    assert (p.system_nodes.count, p.system_nodes.max_count) == (3, 6)
    assert p.to_dict()["custom_ami"] is True


# The memory model against AWS's measured p5en 2P2D points (awslabs/awsome-distributed-ai,
# 3.test_cases/pytorch/sglang/dsr1-deepep-efa: benchmarks/RESULTS-2p2d.md and recipe/serve-pd.sh; DeepSeek-R1,
# hidden 7168, 256 experts, on the same H200s). The model is keyed by the all-to-all backend.
R1 = {"hidden": 7168, "experts": 256}
H200_MIB = catalog.instance_types()["p5en.48xlarge"].gpu_memory_mib


def _r1_decode(backend, attn_dp, graph_bs, max_running):
    from pdkit.model.gpu_memory import RoleShape

    return RoleShape("decode", backend, "low_latency", 16, 1, 16, attn_dp, max_running, None, None, tuple(graph_bs))


def test_memory_model_reproduces_aws_p5en_decode_points():
    """serve-pd.sh: DP-attention decode "must pin --cuda-graph-bs 128 (with --mem-fraction-static 0.78)", else
    "each of the 16 DP ranks captures the full batch-size list [1..512] and OOMs"; UCCL-EP decode "0.82 OOMs
    during CUDA-graph capture inside uccl_ep.cc" and runs at 0.70 (also with DP attention and --cuda-graph-bs 128)."""
    from pdkit.model.gpu_memory import decode_graph_batch_sizes, derived_fraction

    def derived(shape):
        return derived_fraction(shape, H200_MIB, **R1)

    assert derived(_r1_decode("deepep", 16, [128], 256)) == pytest.approx(0.78, abs=0.02)
    assert derived(_r1_decode("uccl-ep", 16, [128], 256)) <= 0.70
    plain_tp16 = derived(_r1_decode("uccl-ep", 1, decode_graph_batch_sizes(256, 1, speculative=False, cap=None), 256))
    assert 0.70 <= plain_tp16 < 0.82
    every_size = decode_graph_batch_sizes(512, 1, speculative=False, cap=None)
    assert max(every_size) == 512
    assert derived(_r1_decode("deepep", 16, every_size, 512)) < 0.78


def test_ep_buffers_follow_deepep_sizing():
    """DeepEP's low-latency buffer (csrc/config.hpp LowLatencyLayout, 128 tokens per rank as SGLang sets it) is
    four regions of experts x tokens x one BF16 token plus its scales; normal mode inside one node is NVLink only."""
    from pdkit.model.gpu_memory import deepep_low_latency_bytes, deepep_normal_bytes

    per_region = 256 * 128 * (7168 * 2 + 7168 // 128 * 4)
    assert deepep_low_latency_bytes(16, 7168, 256) == pytest.approx(4 * per_region, rel=0.01)
    assert deepep_normal_bytes(8, 6144) < deepep_normal_bytes(16, 6144) < deepep_low_latency_bytes(16, 6144, 256)


def test_seed_memory_fraction_is_derived_near_aws_working_points(seed):
    """Issue 14 item 3: the seed decode ran at 0.85, above the 0.82 at which AWS's UCCL-EP decode OOMed in graph
    capture; derived from the memory model it lands between AWS's UCCL-EP (0.70) and DP-attention (0.78) points,
    and prefill at or below the 0.82 AWS's prefill ran at."""
    assert seed.decode.settings.mem_fraction_static is None
    assert 0.70 <= seed.decode.mem_fraction_static <= 0.78
    assert seed.decode.mem_fraction_static == seed.decode.memory.mem_fraction_derived
    assert seed.prefill.mem_fraction_static <= 0.82


def test_memory_budget_fits_the_gpu(seed):
    for role in seed.roles.values():
        b = role.memory
        assert b.weights_gb + b.draft_weights_gb + b.kv_gb == pytest.approx(b.mem_fraction_static * b.gpu_gb, abs=0.3)
        assert b.mem_fraction_static * b.gpu_gb + b.reserve_gb <= b.gpu_gb + 0.1
        assert b.ep_buffers_gb > 0
        assert b.cuda_graphs_gb > 0
    assert seed.decode.memory.capture_headroom_gb > 0, "UCCL-EP low-latency decode carries the calibrated capture headroom"


def test_profile_mem_fraction_overrides_the_derived_value(seed, raw_with):
    overridden = plan.build(profile_files.parse(raw_with("roles.decode.mem_fraction_static", 0.72)), profile_path="<test>")
    assert overridden.decode.mem_fraction_static == 0.72
    assert overridden.decode.memory.mem_fraction_derived == seed.decode.memory.mem_fraction_derived
    assert overridden.decode.kv_budget_gb_per_gpu < seed.decode.kv_budget_gb_per_gpu


def test_mtp_adds_the_draft_layer_and_its_graphs(raw_with):
    mtp = {"enabled": True, "steps": 3, "topk": 1, "draft_tokens": 4}
    tuned = plan.build(profile_files.parse(raw_with("roles.decode.mtp", mtp, "roles.prefill.mtp", mtp)), profile_path="<test>")
    for role in tuned.roles.values():
        assert role.memory.draft_weights_gb > 0
        assert role.memory.draft_graphs_gb == 2.1  # SGLang's 2 GiB for EAGLE draft models and graphs


def test_dp_decode_graphs_stop_at_one_ranks_batch(raw_with):
    """With attention DP each rank runs max_running_requests / attn_dp requests: 512 / 16 = 32."""
    uncapped = plan.build(profile_files.parse(raw_with("roles.decode.cuda_graph_max_bs", None)), profile_path="<test>")
    assert max(uncapped.decode.decode_graph_bs) == 32
    assert uncapped.prefill.decode_graph_bs == ()


def test_plan_text_shows_the_memory_budget_per_role_and_backend(seed):
    from pdkit.render.plan_report import as_text

    text = as_text(seed)
    assert "Memory per GPU" in text
    for role in seed.roles.values():
        assert f"{role.name:<8} mem_fraction_static {role.mem_fraction_static:.2f}" in text
        assert f"reserve {role.memory.reserve_gb:.1f} GB" in text
    assert "derived by backend: uccl-ep" in text


def test_first_boot_has_its_own_budget_for_the_deepgemm_compile(seed):
    """A first boot JIT-compiles DeepGEMM's kernels (AWS recipe/serve-pd.sh runs `sglang.compile_deep_gemm`
    before serving); a warm boot only loads. The plan budgets both, and `pdkit plan` shows both."""
    from pdkit.render.plan_report import as_text

    est = seed.estimates
    assert est.precompile_minutes > 0
    assert est.first_boot_budget_minutes == round(2 * (est.load_minutes + plan.WARMUP_MINUTES + est.precompile_minutes))
    assert est.first_boot_budget_minutes > est.startup_budget_minutes
    text = as_text(seed)
    assert f"DeepGEMM precompile ~{est.precompile_minutes:g} min" in text
    assert f"start-up probes allow {est.first_boot_budget_minutes:g} min" in text
