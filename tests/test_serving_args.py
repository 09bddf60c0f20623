"""SGLang and router command lines: the seed's exact layout, every value from the plan, only 0.5.23 spellings.

`make conformance` feeds the same command lines to SGLang 0.5.23 and smg themselves; these tests are
the fast, offline half (the flag-set check against the pinned --help texts is the weaker one).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from pdkit.errors import ProfileError
from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.render.serving import names, router_args, sglang_args
from pdkit.render.serving.sglang_args import DEPRECATED_SPELLINGS, REJECTED_SPELLINGS, launch_argv, role_env

ROOT = Path(__file__).resolve().parent.parent
HELP = ROOT / "conformance" / "help"
PROFILES = profile_files.available_profiles()


def build(raw):
    return plan_mod.build(profile_files.parse(raw), profile_path="<test>")


def load(name):
    prof, path = profile_files.load(name)
    return plan_mod.build(prof, profile_path=path)


def flag(argv, name):
    """The value after a flag (the flag must appear exactly once)."""
    assert argv.count(name) == 1, f"{name} appears {argv.count(name)} times"
    return argv[argv.index(name) + 1]


def contains(argv, *seq):
    return any(argv[i : i + len(seq)] == list(seq) for i in range(len(argv) - len(seq) + 1))


@pytest.fixture(scope="module")
def seed():
    return load(None)


def test_seed_prefill_is_cp8_within_a_node_and_pp2_across(seed):
    """Issue 6: the seed's prefill layout, spelled as SGLang 0.5.23 accepts it."""
    argv = launch_argv(seed, "prefill")
    assert contains(argv, "--disaggregation-mode", "prefill")
    assert contains(argv, "--tp-size", "8", "--pp-size", "2", "--attn-cp-size", "8", "--enable-prefill-cp", "--cp-strategy", "interleave")
    assert contains(argv, "--moe-a2a-backend", "deepep", "--deepep-mode", "normal")
    assert "--attn-dp-size" not in argv


def test_seed_decode_is_dp16_attention_with_ep16(seed):
    argv = launch_argv(seed, "decode")
    assert contains(argv, "--disaggregation-mode", "decode")
    assert contains(argv, "--tp-size", "16", "--attn-dp-size", "16")
    assert contains(argv, "--moe-a2a-backend", "deepep", "--deepep-mode", "low_latency")
    assert "--pp-size" not in argv
    assert "--enable-prefill-cp" not in argv


def test_seed_decode_is_data_parallel_end_to_end(seed):
    """Issue 14 item 2: with attention DP = TP, SGLang 0.5.23 still runs the dense MLP layers TP across the
    group (moe_dense_tp_size resolves to None) and shards the LM head with a per-step logits all-to-all
    (overrides.py `_tp_lm_head_all_to_all_default` turns it on for pure-DP decode without
    --enable-dp-lm-head) unless both are asked for; AWS's DP-attention decode passed
    `--enable-dp-lm-head --moe-dense-tp-size 1` (awslabs/awsome-distributed-ai dsr1-deepep-efa recipe/serve-pd.sh)."""
    r = seed.decode
    assert (r.attn_dp, r.attn_tp) == (16, 1)
    assert (r.moe_dense_tp_size, r.enable_dp_lm_head) == (1, True)
    argv = launch_argv(seed, "decode")
    assert flag(argv, "--moe-dense-tp-size") == "1"
    assert argv.count("--enable-dp-lm-head") == 1


def test_attention_tp_keeps_dense_layers_and_lm_head_tp(seed):
    """Prefill's CP8 attention is not data-parallel: the DP-only flags stay off (SGLang asserts
    --enable-dp-lm-head needs attention DP, overrides.py `_dp_lm_head_validation`)."""
    r = seed.prefill
    assert (r.moe_dense_tp_size, r.enable_dp_lm_head) == (None, False)
    argv = launch_argv(seed, "prefill")
    assert "--moe-dense-tp-size" not in argv
    assert "--enable-dp-lm-head" not in argv


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_multi_node_rendezvous_comes_from_leader_worker_set(seed, role):
    """LWS injects the leader address, group size and rank; kubelet expands $(VAR) in args."""
    argv = launch_argv(seed, role)
    assert flag(argv, "--dist-init-addr") == f"$(LWS_LEADER_ADDRESS):{sglang_args.DIST_INIT_PORT}"
    assert flag(argv, "--nnodes") == "$(LWS_GROUP_SIZE)"
    assert flag(argv, "--node-rank") == "$(LWS_WORKER_INDEX)"


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_memory_and_batch_limits_are_explicit_and_from_the_plan(seed, role):
    """An uncapped context makes SGLang size the KV pool for 202k tokens and hang after load."""
    r = seed.roles[role]
    argv = launch_argv(seed, role)
    assert int(flag(argv, "--context-length")) == r.context_length < seed.model.max_context_length
    assert float(flag(argv, "--mem-fraction-static")) == r.mem_fraction_static
    assert int(flag(argv, "--max-running-requests")) == r.max_running_requests


def test_decode_cuda_graph_batch_sizes_are_the_plans_list(seed):
    """AWS (RESULTS-2p2d.md): without a pinned list "each of the 16 DP ranks captures the full batch-size list
    [1..512] and OOMs during graph capture". The plan's list stops at what one DP rank can run
    (max_running_requests / attn_dp, capped by cuda_graph_max_bs) and follows SGLang's own spacing
    (cuda_graph_hook.py generate_decode_cuda_graph_batch_sizes); 0.5.23 spells the flag per phase."""
    argv = launch_argv(seed, "decode")
    i = argv.index("--cuda-graph-bs-decode")
    rendered = [int(a) for a in argv[i + 1 : i + 1 + len(seed.decode.decode_graph_bs)]]
    assert tuple(rendered) == seed.decode.decode_graph_bs == (1, 2, 4, 8, 12, 16, 24, 32)
    assert "--cuda-graph-max-bs-decode" not in argv
    assert "--cuda-graph-bs-decode" not in launch_argv(seed, "prefill")


def test_chunked_prefill_size_from_the_profile(seed):
    assert int(flag(launch_argv(seed, "prefill"), "--chunked-prefill-size")) == seed.prefill.settings.chunked_prefill_size
    assert "--chunked-prefill-size" not in launch_argv(seed, "decode")


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_parsers_metrics_and_model_from_the_model_table(seed, role):
    argv = launch_argv(seed, role)
    assert flag(argv, "--reasoning-parser") == seed.model.reasoning_parser == "glm45"
    assert flag(argv, "--tool-call-parser") == seed.model.tool_call_parser == "glm47"
    assert "--enable-metrics" in argv
    assert flag(argv, "--model-path") == sglang_args.model_dir(seed)
    assert "--trust-remote-code" not in argv, "GLM-5.1 is native to SGLang; remote code would run code from the weights"


def test_kv_transfer_is_mooncake_by_default_and_nixl_by_switch(seed, raw_with):
    assert flag(launch_argv(seed, "decode"), "--disaggregation-transfer-backend") == "mooncake"
    nixl = build(raw_with("serving.kv_transfer", "nixl"))
    for role in ("prefill", "decode"):
        assert flag(launch_argv(nixl, role), "--disaggregation-transfer-backend") == "nixl"


def test_fallback_prefill_layout_renders_dp_attention_across_both_nodes(raw_with):
    """The validated fallback if CP x PP misbehaves: TP16 with attention DP16, EP16 across the nodes."""
    fallback = {"tp": 16, "pp": 1, "attn_cp": 1, "attn_dp": 16, "moe_a2a_backend": "uccl-ep", "deepep_mode": "normal"}
    argv = launch_argv(build(raw_with("roles.prefill.parallelism", fallback)), "prefill")
    assert contains(argv, "--tp-size", "16", "--attn-dp-size", "16", "--moe-dense-tp-size", "1", "--enable-dp-lm-head")
    assert contains(argv, "--moe-a2a-backend", "deepep", "--deepep-mode", "normal")
    assert "--enable-prefill-cp" not in argv
    assert "--pp-size" not in argv


def test_tuned_profile_runs_eagle_mtp_and_keeps_two_batch_overlap_off():
    """Two-batch overlap waits for GLM-5.1's published config: SGLang 0.5.23 refuses it for DSA models that
    share indexer top-k across layers (model_hook.py `_validate_dsa_tbo_index_sharing`), and the synthesized
    config cannot say whether GLM-5.1 does (conformance/models/zai-org--GLM-5.1-FP8/SOURCES.md)."""
    tuned = load("glm51-fp8-2p2d-tuned")
    decode = launch_argv(tuned, "decode")
    assert "--enable-two-batch-overlap" not in decode
    assert contains(decode, "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3")
    assert contains(decode, "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")
    # Public GLM-5 recipes set SGLANG_ENABLE_SPEC_V2=1; SGLang 0.5.23 reads it nowhere (conformance refuses an unread
    # SGLANG_* variable: conformance/check_sglang.py, unread_sglang_variables).
    assert "SGLANG_ENABLE_SPEC_V2" not in role_env(tuned, "decode")
    # Prefill computes the draft KV that decode's EAGLE starts from.
    assert flag(launch_argv(tuned, "prefill"), "--speculative-algorithm") == "EAGLE"


def test_levers_are_off_in_the_seed_profile(seed):
    for role in ("prefill", "decode"):
        argv = launch_argv(seed, role)
        assert "--enable-two-batch-overlap" not in argv
        assert "--speculative-algorithm" not in argv
        assert "SGLANG_ENABLE_SPEC_V2" not in role_env(seed, role)


def test_mtp_on_decode_only_is_refused_with_the_fix(raw_with):
    """Refused by the plan, before any command line is rendered."""
    with pytest.raises(ProfileError) as err:
        build(raw_with("roles.decode.mtp", {"enabled": True}))
    assert err.value.field == "roles.prefill.mtp.enabled"
    assert "enabled: true, steps: 3, topk: 1, draft_tokens: 4" in err.value.fix


def test_mtp_settings_must_match_across_roles(raw_with):
    with pytest.raises(ProfileError, match="draft KV layout must match"):
        build(raw_with("roles.decode.mtp", {"enabled": True}, "roles.prefill.mtp", {"enabled": True, "steps": 2}))


def test_cross_node_context_parallel_is_refused_by_the_plan_before_sglang(raw_with):
    """SGLang asserts tp <= 8 for prefill CP at start-up; the plan says so before anything is paid for."""
    with pytest.raises(ProfileError) as err:
        build(raw_with("roles.prefill.parallelism", {"tp": 16, "attn_cp": 16, "deepep_mode": "normal"}))
    assert err.value.field == "roles.prefill.parallelism.attn_cp"
    assert "cross-node CP" in str(err.value)


def _option_tokens(argv):
    return [a for a in argv if a.startswith("--")]


@pytest.mark.parametrize("name", PROFILES)
@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_no_rejected_or_deprecated_spelling_in_any_profile(name, role):
    """Public LWS/RBG/OME manifests still carry spellings SGLang 0.5.23 rejects; the kit never renders them."""
    for token in _option_tokens(launch_argv(load(name), role)):
        for old in (*REJECTED_SPELLINGS, *DEPRECATED_SPELLINGS):
            assert token != old, f"{name}/{role} renders {token}"
            assert not (old.endswith("-") and token.startswith(old)), f"{name}/{role} renders {token}"


def test_the_spelling_guard_catches_an_old_flag():
    bad = ["--tp-size", "16", "--cuda-graph-max-bs", "64", "--nsa-decode-backend", "fa3"]
    caught = [t for t in _option_tokens(bad) for old in REJECTED_SPELLINGS if t == old or (old.endswith("-") and t.startswith(old))]
    assert caught == ["--cuda-graph-max-bs", "--nsa-decode-backend"]


# The weaker, offline check: flags against the --help text of the pinned versions (conformance/help/,
# regenerated by `make conformance-help`). `make conformance` is the real one: SGLang parses and resolves.
def _help_options(name):
    return set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", (HELP / name).read_text()))


SGLANG_HELP = f"sglang-{sglang_args.SGLANG_VERSION}-launch_server.txt"
ROUTER_HELP = f"{router_args.ROUTER_PACKAGE}-{router_args.ROUTER_VERSION}-launch_router.txt"


@pytest.mark.parametrize("name", PROFILES)
def test_every_rendered_sglang_flag_is_in_the_pinned_help_text(name):
    known = _help_options(SGLANG_HELP)
    p = load(name)
    for role in p.roles:
        unknown = [t for t in _option_tokens(launch_argv(p, role)) if t not in known]
        assert not unknown, f"{name}/{role}: not options of SGLang {sglang_args.SGLANG_VERSION}: {unknown}"


def test_help_text_check_can_fail():
    known = _help_options(SGLANG_HELP)
    assert "--cuda-graph-max-bs-decode" in known
    assert {"--cuda-graph-max-bs", "--enable-deepep-moe", "--enable-nsa-prefill-context-parallel"}.isdisjoint(known)


@pytest.mark.parametrize("name", PROFILES)
def test_every_rendered_router_flag_is_in_the_pinned_help_text(name):
    known = _help_options(ROUTER_HELP)
    unknown = [t for t in _option_tokens(router_args.router_argv(load(name))) if t not in known]
    assert not unknown, f"not options of {router_args.ROUTER_PACKAGE} {router_args.ROUTER_VERSION}: {unknown}"


def _values(argv, option):
    """The space-separated values of a nargs='+' option (smg's --prefill-selector key=value ...)."""
    i = argv.index(option) + 1
    end = next((j for j in range(i, len(argv)) if argv[j].startswith("--")), len(argv))
    return argv[i:end]


def test_router_discovers_the_leaders_by_label_not_by_static_urls():
    """The DisaggregatedSet names its LeaderWorkerSets per slice and revision (kubernetes-sigs/lws v0.10.0
    docs/examples/disaggregatedset.md, "Never rely on hardcoded child LWS names"): smg 1.13.0's Kubernetes
    discovery (--service-discovery, --prefill-selector/--decode-selector key=value ...,
    --service-discovery-namespace, --service-discovery-port; conformance/help/smg-1.13.0-launch_router.txt)
    watches the pods instead. Only group leaders (worker index 0) serve SGLang's HTTP API."""
    p = load("glm51-fp8-4p4d")
    argv = router_args.router_argv(p)
    assert argv[:4] == ["python3", "-m", router_args.ROUTER_MODULE, "--pd-disaggregation"]
    assert "--prefill" not in argv
    assert "--decode" not in argv
    assert argv.count("--service-discovery") == 1
    assert flag(argv, "--service-discovery-namespace") == "pd-serving", "without it smg watches every namespace"
    assert flag(argv, "--service-discovery-port") == str(sglang_args.SGLANG_PORT)
    for role in ("prefill", "decode"):
        assert _values(argv, f"--{role}-selector") == [
            f"disaggregatedset.x-k8s.io/name={names.disaggregated_set(p)}",
            f"disaggregatedset.x-k8s.io/role={role}",
            "leaderworkerset.sigs.k8s.io/worker-index=0",
        ]


def test_router_routes_decode_by_rank_and_load_and_prefill_round_robin_with_one_replica():
    """2P2D: one prefill replica, so nothing for a cache-aware policy to choose between; decode runs
    attention DP16, so the router targets a rank (smg --dp-aware) with a load-aware policy
    (smg's own PD example: `--prefill-policy cache_aware --decode-policy power_of_two`,
    conformance/help/smg-1.13.0-launch_router.txt)."""
    argv = router_args.router_argv(load("glm51-fp8-2p2d"))
    assert flag(argv, "--prefill-policy") == "round_robin"
    assert flag(argv, "--decode-policy") == "power_of_two"
    assert argv.count("--dp-aware") == 1
    assert "--policy" not in argv  # ignored by smg in PD mode once both per-role policies are set


def test_router_routes_prefill_cache_aware_with_two_prefill_replicas():
    """4P4D: SGLang 0.5.23 disables the decode radix cache in PD mode (pd_disaggregation_hook.py:
    `disable_radix_cache=True` unless --disaggregation-decode-enable-radix-cache), so prefix hits only
    happen on prefill, and two prefill replicas make the choice worth steering."""
    argv = router_args.router_argv(load("glm51-fp8-4p4d"))
    assert flag(argv, "--prefill-policy") == "cache_aware"
    assert flag(argv, "--decode-policy") == "power_of_two"
    assert flag(argv, "--cache-threshold") == "0.3"
    assert flag(argv, "--balance-abs-threshold") == "64"
    assert flag(argv, "--balance-rel-threshold") == "1.5"


def test_router_policies_and_thresholds_come_from_the_profile():
    """Profile overrides reach the router's flags (smg 1.13.0 spellings, checked by `make conformance`)."""
    prof, _ = profile_files.load("glm51-fp8-4p4d")
    router = prof.serving.router.model_copy(
        update={"prefill_policy": "prefix_hash", "decode_policy": "least_load", "dp_aware": False, "cache_threshold": 0.5}
    )
    prof = prof.model_copy(update={"serving": prof.serving.model_copy(update={"router": router})})
    argv = router_args.router_argv(plan_mod.build(prof))
    assert flag(argv, "--prefill-policy") == "prefix_hash"
    assert flag(argv, "--decode-policy") == "least_load"
    assert flag(argv, "--cache-threshold") == "0.5"
    assert "--dp-aware" not in argv


def test_dp_aware_without_decode_attention_dp_is_refused():
    """smg --dp-aware splits a worker into its attention-DP ranks; a decode without attention DP has one
    rank, so asking for it is a profile mistake named in one line."""
    prof, _ = profile_files.load("glm51-fp8-2p2d")
    par = prof.roles.decode.parallelism.model_copy(update={"attn_dp": 1})
    decode = prof.roles.decode.model_copy(update={"parallelism": par})
    router = prof.serving.router.model_copy(update={"dp_aware": True})
    prof = prof.model_copy(
        update={
            "roles": prof.roles.model_copy(update={"decode": decode}),
            "serving": prof.serving.model_copy(update={"router": router}),
        }
    )
    with pytest.raises(ProfileError, match=r"serving\.router\.dp_aware"):
        plan_mod.build(prof)


def test_router_waits_for_workers_as_long_as_staging_and_start_up_take(seed):
    argv = router_args.router_argv(seed)
    waited = int(flag(argv, "--worker-startup-timeout-secs"))
    assert waited >= (seed.estimates.startup_budget_minutes + seed.estimates.staging_minutes) * 60
    assert flag(argv, "--prometheus-port") == str(router_args.ROUTER_METRICS_PORT)


def test_router_dp_aware_follows_decode_attention_dp(seed):
    """With --dp-aware smg's PD router injects routed_dp_rank into the prefill request and the same rank as
    disagg_prefill_dp_rank into the decode request (smg routers/http/pd_router.rs), so decode still finds
    the prefill rank holding the KV; the plan turns it on exactly when decode runs attention DP."""
    assert seed.decode.attn_dp > 1
    assert seed.router.dp_aware is True
    assert "--dp-aware" in router_args.router_argv(seed)


# --- renderings one step past the seed's (mutation testing, issue 19) -------------------------------------


def _no_a2a(raw_with, **parallelism):
    """The seed's prefill without a MoE all-to-all backend (SGLang's own, non-DeepEP MoE path)."""
    raw = raw_with("roles.prefill.parallelism", {"tp": 8, "pp": 2, "attn_cp": 8, "moe_a2a_backend": "none", **parallelism})
    return launch_argv(build(raw), "prefill")


def test_expert_parallel_without_deepep_is_spelled_ep_size(raw_with):
    """SGLang 0.5.23 `--ep-size EP_SIZE` (conformance/help/sglang-0.5.23-launch_server.txt); DeepEP sizes EP from TP
    itself, so the flag appears only without it, and only when EP > 1."""
    assert contains(_no_a2a(raw_with, ep=8), "--cp-strategy", "interleave", "--ep-size", "8", "--context-length")
    assert "--ep-size" not in _no_a2a(raw_with, ep=1)
    assert "--moe-a2a-backend" not in _no_a2a(raw_with, ep=8)
    assert "--ep-size" not in launch_argv(load(None), "decode"), "DeepEP: no --ep-size"


def test_two_batch_overlap_is_rendered_when_the_profile_asks(raw_with):
    """SGLang 0.5.23 `--enable-two-batch-overlap`, a bare switch, on the role that asks for it only."""
    plan = build(raw_with("roles.decode.two_batch_overlap", True))
    assert launch_argv(plan, "decode").count("--enable-two-batch-overlap") == 1
    assert "--enable-two-batch-overlap" not in launch_argv(plan, "prefill")


def test_a_graph_cap_without_a_decode_list_is_the_per_phase_max_flag(raw_with):
    """A role with no decode batch-size list (prefill) renders its cuda_graph_max_bs as 0.5.23's
    `--cuda-graph-max-bs-decode N` (the unsuffixed --cuda-graph-max-bs is ambiguous there: REJECTED_SPELLINGS)."""
    plan = build(raw_with("roles.prefill.cuda_graph_max_bs", 16))
    assert plan.prefill.decode_graph_bs == ()
    argv = launch_argv(plan, "prefill")
    assert flag(argv, "--cuda-graph-max-bs-decode") == "16"
    assert "--cuda-graph-bs-decode" not in argv


def test_router_listens_on_the_pod_ip_at_the_ports_its_service_targets(seed):
    """The Service and the scraper reach the router at the pod IP, so it binds 0.0.0.0 (smg 1.13.0 --host /
    --prometheus-host, conformance/help/smg-1.13.0-launch_router.txt); the ports are the ones the router
    Deployment's containerPorts and Service name (manifests.py), and /health is SGLang's own health route
    (the same path the SGLang pods' probes use)."""
    argv = router_args.router_argv(seed)
    assert flag(argv, "--host") == "0.0.0.0"  # noqa: S104 - asserting the bind address
    assert flag(argv, "--prometheus-host") == "0.0.0.0"  # noqa: S104 - asserting the bind address
    assert flag(argv, "--port") == "8000" == str(router_args.ROUTER_PORT)
    assert flag(argv, "--prometheus-port") == "29000" == str(router_args.ROUTER_METRICS_PORT)
    assert flag(argv, "--health-check-endpoint") == "/health"


def test_router_wait_covers_start_up_and_at_least_the_staging_grace(seed):
    """The router gives up on workers after --worker-startup-timeout-secs: it must cover the server start-up
    budget plus staging, and never less than STAGING_GRACE_MINUTES of staging (the estimate can be low)."""
    waited = int(flag(router_args.router_argv(seed), "--worker-startup-timeout-secs"))
    budget, staging = seed.estimates.startup_budget_minutes, seed.estimates.staging_minutes
    assert waited >= (budget + router_args.STAGING_GRACE_MINUTES) * 60
    assert waited >= (budget + staging) * 60
    assert waited < (budget + staging + router_args.STAGING_GRACE_MINUTES) * 60, "the grace is a floor, not added on top"


def test_router_wait_is_the_budget_in_whole_seconds(seed):
    """smg 1.13.0 takes `--worker-startup-timeout-secs` in seconds (conformance/help/smg-1.13.0-launch_router.txt)
    and the plan's estimates are minutes: the wait is exactly those minutes times 60, no more (a longer wait only
    delays the moment the router reports workers that never came up) and no less (it gives up on pods still
    staging). The seed stages in less than the grace floor, so the floor is what it waits for."""
    est = seed.estimates
    assert est.staging_minutes < router_args.STAGING_GRACE_MINUTES
    waited = int(flag(router_args.router_argv(seed), "--worker-startup-timeout-secs"))
    assert waited == (est.startup_budget_minutes + router_args.STAGING_GRACE_MINUTES) * 60


# --- the server's entry point, bind address and ports (mutation testing, issue 19) ---------------------------

SERVER_HEAD = ["python3", "-m", "sglang.launch_server"]


def _head_ok(argv):
    """The command starts with SGLang's entry point and keeps the model flags every rendering has."""
    return argv[:4] == [*SERVER_HEAD, "--model-path"] and argv[4].startswith(f"{sglang_args.WEIGHTS_ROOT}/")


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_server_is_sglang_launch_server_on_cuda_bound_to_the_pod_ip(role):
    """The container command is SGLang's own server module (`python3 -m sglang.launch_server`, SGLang 0.5.23
    docs and sglang/launch_server.py), on the GPUs (`--device cuda`), bound to 0.0.0.0 so the Service, the router
    and the scraper reach it at the pod IP; `--port` and `--disaggregation-bootstrap-port` are the containerPorts
    manifests.py declares (http SGLANG_PORT, bootstrap BOOTSTRAP_PORT) and the bootstrap port the router hands to
    decode with every request (names.BOOTSTRAP_PORT_ANNOTATION). A different port in argv than in the pod spec
    leaves the Service and the router knocking on a closed port."""
    plan = load(None)
    argv = launch_argv(plan, role)
    assert argv[:3] == SERVER_HEAD
    assert flag(argv, "--device") == "cuda"
    assert flag(argv, "--host") == "0.0.0.0"  # noqa: S104 - asserting the bind address
    assert flag(argv, "--port") == "30000" == str(sglang_args.SGLANG_PORT)
    assert flag(argv, "--disaggregation-bootstrap-port") == "8998" == str(sglang_args.BOOTSTRAP_PORT)
    assert flag(argv, "--served-model-name") == plan.served_model_name


def test_model_dir_is_one_flat_directory_per_model_under_the_weights_volume():
    """Staging (`--dest`, manifests.py) and the server (`--model-path`) use this directory: one flat directory per
    model under WEIGHTS_ROOT, named `org--name` the way conformance/models/ and Hugging Face's hub cache
    (`models--org--name`) spell a repo id, so each model's checkpoint sits in its own directory of the weights volume
    and the path the rendered manifests show is the one an operator finds on the node."""
    plan = load(None)
    assert plan.model.id == "zai-org/GLM-5.1-FP8"
    assert sglang_args.model_dir(plan) == "/models/zai-org--GLM-5.1-FP8"


def test_optional_flags_are_appended_to_the_command_not_replacing_it(raw_with):
    """Every optional flag (MTP, two-batch overlap, the graph cap) is added to the server command; the command
    still starts with SGLang's entry point and the model, else the container runs a bare flag list."""
    tuned = load("glm51-fp8-2p2d-tuned")
    assert _head_ok(launch_argv(tuned, "decode"))
    assert _head_ok(launch_argv(build(raw_with("roles.decode.two_batch_overlap", True)), "decode"))
    assert _head_ok(launch_argv(build(raw_with("roles.prefill.cuda_graph_max_bs", 16)), "prefill"))


def test_parallel_flags_appear_from_a_degree_of_two():
    """A degree of 2 is parallel already: `--attn-cp-size 2` (with prefill CP on), `--attn-dp-size 2` and
    `--ep-size 2` must be rendered, else SGLang runs that role with its defaults of 1 (server_args.py) and the
    layout the plan paid for is not the one that runs. The RolePlan is the seed's with one degree changed."""
    seed_plan = load(None)
    base = dataclasses.replace(seed_plan.prefill, attn_cp=1, attn_dp=1, ep=1, moe_a2a_backend="none")
    assert not {"--attn-cp-size", "--attn-dp-size", "--ep-size"} & set(sglang_args.parallelism_flags(base))
    cp2 = sglang_args.parallelism_flags(dataclasses.replace(base, attn_cp=2))
    assert contains(cp2, "--attn-cp-size", "2", "--enable-prefill-cp", "--cp-strategy", "interleave")
    dp2 = sglang_args.parallelism_flags(dataclasses.replace(base, attn_dp=2))
    assert contains(dp2, "--attn-dp-size", "2")
    ep2 = sglang_args.parallelism_flags(dataclasses.replace(base, ep=2))
    assert contains(ep2, "--ep-size", "2")
