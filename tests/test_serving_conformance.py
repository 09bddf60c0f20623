"""The conformance tooling itself: pins that agree, cases that cover every profile, a model config that
matches the kit's model table. (`make conformance` runs the cases against SGLang 0.5.23 and smg.)"""

from __future__ import annotations

import ast
import json
import re
import types
from pathlib import Path

import pytest
import yaml

from conformance import check_sglang, export_cases
from pdkit.model import catalog, profile_files
from pdkit.render.serving import router_args, sglang_args
from tests.conftest import plan_of

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = ROOT / "conformance"
LOCK = CONFORMANCE / "requirements-sglang.txt"
SOURCE = CONFORMANCE / "requirements-sglang.in"


def lock_pins() -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s\\]+)", LOCK.read_text(), flags=re.MULTILINE))


@pytest.fixture(scope="module")
def cases():
    return export_cases.all_cases()


@pytest.fixture(scope="module")
def by_id(cases):
    return {c["id"]: c for c in cases}


def test_the_lock_pins_the_sglang_and_router_the_kit_renders_for():
    """Lock and requirements-sglang.in pin router_args' smg, which is versions.yaml's (tests/containers/
    test_image_serving_contents.py): the router the image ships is the one `make conformance` parses with."""
    pins = lock_pins()
    assert pins["sglang"] == sglang_args.SGLANG_VERSION
    assert pins[router_args.ROUTER_PACKAGE] == router_args.ROUTER_VERSION
    assert router_args.ROUTER_MODULE.split(".")[0] == router_args.ROUTER_PACKAGE
    assert f"# no-deps: sglang=={sglang_args.SGLANG_VERSION}" in SOURCE.read_text()
    assert f"# no-deps: {router_args.ROUTER_PACKAGE}=={router_args.ROUTER_VERSION}" in SOURCE.read_text()


def test_every_locked_package_is_pinned_with_a_hash():
    """The lock is installed with --require-hashes --no-deps: every entry exact, every entry hashed."""
    packages = re.findall(r"^[A-Za-z0-9].*?(?=^[A-Za-z0-9]|\Z)", LOCK.read_text(), flags=re.MULTILINE | re.DOTALL)
    assert len(packages) == len(lock_pins()) > 50
    for entry in packages:
        assert "==" in entry.splitlines()[0], entry.splitlines()[0]
        assert "--hash=sha256:" in entry, entry.splitlines()[0]
    assert "torch==2.14.1" in LOCK.read_text(), "SGLang 0.5.23 pins torch 2.14.1"


def test_sglang_version_agrees_with_the_serving_image():
    """Conformance only proves something if the image ships the SGLang it checked against."""
    versions = yaml.safe_load((ROOT / "containers" / "versions.yaml").read_text())
    assert versions["components"]["sglang"]["version"] == sglang_args.SGLANG_VERSION


def test_the_pinned_help_texts_exist():
    assert (CONFORMANCE / "help" / f"sglang-{sglang_args.SGLANG_VERSION}-launch_server.txt").is_file()
    assert (CONFORMANCE / "help" / f"{router_args.ROUTER_PACKAGE}-{router_args.ROUTER_VERSION}-launch_router.txt").is_file()


def test_model_config_carries_the_model_tables_architecture():
    """The config.json SGLang resolves against must describe the same model the plan computes with."""
    for name in profile_files.available_profiles():
        model = catalog.models()[profile_files.load(name)[0].model.id]
        config = json.loads((export_cases.model_config_dir(model.id) / "config.json").read_text())
        assert config["architectures"] == [model.architecture]
        assert {
            "num_hidden_layers": model.layers,
            "first_k_dense_replace": model.dense_layers,
            "num_nextn_predict_layers": model.mtp_layers,
            "hidden_size": model.hidden_size,
            "num_attention_heads": model.attention_heads,
            "q_lora_rank": model.q_lora_rank,
            "kv_lora_rank": model.kv_lora_rank,
            "qk_rope_head_dim": model.qk_rope_head_dim,
            "n_routed_experts": model.routed_experts,
            "num_experts_per_tok": model.experts_per_token,
            "n_shared_experts": model.shared_experts,
            "moe_intermediate_size": model.moe_intermediate_size,
            "vocab_size": model.vocab_size,
            "max_position_embeddings": model.max_context_length,
        }.items() <= config.items()
        # One byte per parameter is an FP8 checkpoint, which SGLang learns from quantization_config; BF16 has none.
        if model.weight_bytes_per_param == 1:
            assert config["quantization_config"]["quant_method"] == "fp8"
        else:
            assert "quantization_config" not in config


def test_cases_cover_every_profile_role_and_switch(cases):
    ids = {c["id"] for c in cases}
    for name in profile_files.available_profiles():
        assert {f"{name}/prefill", f"{name}/decode", f"{name}/router"} <= ids
    default = profile_files.default_profile_name()
    for variant, _, _ in export_cases.VARIANTS:
        assert {f"{default}+{variant}/prefill", f"{default}+{variant}/decode"} <= ids


def test_cases_carry_exactly_the_rendered_command_lines(by_id):
    tuned = plan_of("glm51-fp8-2p2d-tuned")
    assert by_id["glm51-fp8-2p2d-tuned/decode"]["argv"] == sglang_args.launch_argv(tuned, "decode")
    assert "SGLANG_ENABLE_SPEC_V2" not in by_id["glm51-fp8-2p2d-tuned/decode"]["env"]
    assert by_id["glm51-fp8-2p2d-tuned/router"]["argv"] == router_args.router_argv(tuned)
    assert by_id["glm51-fp8-2p2d-tuned/decode"]["expect"]["ep_size"] == tuned.decode.ep == 16


def test_known_bad_command_lines_are_exported_with_their_expected_rejection(cases, by_id):
    rejects = {c["id"]: c["expect_reject"] for c in cases if "expect_reject" in c}
    assert set(rejects) >= {
        "reject/cuda-graph-max-bs",
        "reject/enable-deepep-moe",
        "reject/nsa-prefill-backend",
        "reject/enable-nsa-prefill-context-parallel",
        "reject/cross-node-context-parallel",
        "reject/router-unknown-policy",
    }
    cross_node = by_id["reject/cross-node-context-parallel"]["argv"]
    assert cross_node[cross_node.index("--tp-size") + 1] == "16"
    assert "--pp-size" not in cross_node


def test_checker_substitutes_what_leader_worker_set_fills_in(by_id):
    case = by_id["glm51-fp8-2p2d/decode"]
    args = check_sglang.substitute(case, 1)
    # LWS_LEADER_ADDRESS of group 0 of a LeaderWorkerSet the DisaggregatedSet created (<set>-<slice>-<revision>-<role>).
    lws = "glm51-2p2d-pd-0-58f79fdb78-decode"
    assert args[args.index("--dist-init-addr") + 1] == f"{lws}-0.{lws}.pd-serving:20000"
    assert args[args.index("--nnodes") + 1] == "2"
    assert args[args.index("--node-rank") + 1] == "1"
    assert args[args.index("--model-path") + 1] == case["model_config_dir"]
    broken = {**case, "argv": [*case["argv"], "--api-key", "$(UNSET_SECRET)"]}
    with pytest.raises(check_sglang.Failed, match="unexpanded variable"):
        check_sglang.substitute(broken, 0)


def test_checker_imports_nothing_from_the_kit():
    """It runs in .venv-sglang, which has SGLang and smg but not pdkit."""
    tree = ast.parse((CONFORMANCE / "check_sglang.py").read_text())
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in modules if m.startswith(("pdkit", "conformance", "yaml", "pydantic"))}


def test_make_fragment_adds_conformance_to_make_test():
    fragment = (ROOT / "mk" / "conformance.mk").read_text()
    assert re.search(r"^TEST_TARGETS \+= conformance$", fragment, flags=re.MULTILINE)
    assert re.search(r"^\$\(SGLANG_VENV\)/\.installed: \$\(SGLANG_LOCK\)", fragment, flags=re.MULTILINE)
    assert "--require-hashes" in fragment


def test_cases_assert_the_decode_layout_the_plan_intends(by_id):
    """Issue 14 items 1-2: conformance missed the decode layout because the plan never stated it. Every DP-attention
    case now asks SGLang for dense layers and LM head data-parallel and for the plan's graph batch sizes."""
    decode = by_id["glm51-fp8-2p2d/decode"]["expect"]
    assert (decode["moe_dense_tp_size"], decode["enable_dp_lm_head"], decode["enable_tp_lm_head_all_to_all"]) == (1, True, False)
    assert decode["cuda_graph_config.decode.bs"] == [1, 2, 4, 8, 12, 16, 24, 32]
    assert decode["cuda_graph_config.decode.max_bs"] == 32
    prefill = by_id["glm51-fp8-2p2d/prefill"]["expect"]
    assert (prefill["moe_dense_tp_size"], prefill["enable_dp_lm_head"]) == (None, False)
    assert "cuda_graph_config.decode.bs" not in prefill
    tuned = by_id["glm51-fp8-2p2d-tuned/decode"]["expect"]
    assert {k: tuned[k] for k in tuned if k.startswith("speculative_")} == {
        "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    }
    assert "reject/cuda-graph-bs" in by_id, "AWS's 0.5.13 spelling --cuda-graph-bs is ambiguous in 0.5.23"


def test_checker_names_the_field_sglang_resolves_differently(by_id, monkeypatch):
    """What SGLang 0.5.23 resolves for today's decode command line (issue 14: moe_dense_tp_size=None,
    enable_dp_lm_head=False) must fail the case, naming each field."""
    case = by_id["glm51-fp8-2p2d/decode"]
    view = types.SimpleNamespace(**{k: v for k, v in case["expect"].items() if "." not in k})
    view.moe_dense_tp_size, view.enable_dp_lm_head = None, False
    view.cuda_graph_config = types.SimpleNamespace(decode=types.SimpleNamespace(bs=list(range(1, 33)), max_bs=32))
    monkeypatch.setattr(check_sglang, "stub_gpu", lambda device: None)
    monkeypatch.setattr(check_sglang, "resolve", lambda args, env: ("ok", view, ""))
    monkeypatch.setattr(check_sglang, "unread_sglang_variables", lambda env: [])  # needs SGLang's source: the conformance run checks it
    with pytest.raises(check_sglang.Failed) as failed:
        check_sglang.check_sglang(case)
    message = str(failed.value)
    assert "moe_dense_tp_size=None (plan: 1)" in message
    assert "enable_dp_lm_head=False (plan: True)" in message
    assert "cuda_graph_config.decode.bs=" in message


def test_every_field_of_the_synthesized_model_config_cites_a_source():
    """Item 7: the published config.json is not reachable from here; until it ships, each field says where it comes from."""
    model_dir = export_cases.model_config_dir("zai-org/GLM-5.1-FP8")
    config = json.loads((model_dir / "config.json").read_text())
    sources = (model_dir / "SOURCES.md").read_text()
    cited = {name.strip() for row in re.findall(r"^\| ([a-z_, ]+) \|", sources, flags=re.MULTILINE) for name in row.split(",")}
    assert set(config) <= cited, f"no source for {sorted(set(config) - cited)}"


def test_two_batch_overlap_stays_off_while_the_model_config_is_synthesized():
    """SGLang 0.5.23 refuses two-batch overlap for DSA models sharing indexer top-k across layers
    (srt/arg_groups/model_hook.py `_validate_dsa_tbo_index_sharing`); only the published config can say."""
    config = json.loads((export_cases.model_config_dir("zai-org/GLM-5.1-FP8") / "config.json").read_text())
    assert not {"indexer_types", "index_topk_freq", "index_topk_pattern"} & set(config)
    for name in profile_files.available_profiles():
        prof, _ = profile_files.load(name)
        assert not any(getattr(prof.roles, role).two_batch_overlap for role in ("prefill", "decode")), name


def test_model_config_override_replaces_the_synthesized_one(tmp_path, monkeypatch):
    """`make conformance MODEL_CONFIG=path` resolves every case against that file."""
    real = tmp_path / "downloaded.json"
    real.write_text('{"architectures": ["GlmMoeDsaForCausalLM"]}')
    monkeypatch.setattr(export_cases, "_model_config_override", None)
    export_cases.use_model_config(real, tmp_path / "out")
    assert (export_cases.model_config_dir("zai-org/GLM-5.1-FP8") / "config.json").read_text() == real.read_text()
    with pytest.raises(SystemExit, match="not a file"):
        export_cases.use_model_config(tmp_path / "missing.json", tmp_path / "out")
    fragment = (ROOT / "mk" / "conformance.mk").read_text()
    assert "--model-config" in fragment
    assert "MODEL_CONFIG" in fragment
