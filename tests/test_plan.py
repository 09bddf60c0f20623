"""The plan derives the seed's numbers from the profile and the fact tables, in one place."""

from __future__ import annotations

import json

import pytest

from pdkit import catalog, plan, profile_files


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


def test_plan_json_is_plain_data(seed):
    data = json.loads(json.dumps(seed.to_dict()))
    assert data["roles"]["decode"]["cross_node_moe_messages_per_token"] == 150
    assert data["instance"]["gpu_memory_gb"] == 151.4
    assert "settings" not in data["roles"]["decode"]
