"""Write every command line the kit renders, for every profile in config/, as conformance cases.

Runs in the kit's own virtualenv (it imports pdkit); conformance/check_sglang.py then feeds the
cases to SGLang 0.5.23 and the pinned router in .venv-sglang, which does not have pdkit:

    python -m conformance.export_cases OUT_DIR   ->   OUT_DIR/cases.json

Besides the shipped profiles, the switches a profile can flip (NIXL, the fallback prefill layout)
are exported as variants of the default profile, and a few known-bad command lines (old spellings,
cross-node context parallelism) are exported with the rejection SGLang must give them, so the
check proves it can fail.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from pdkit import deployment
from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.model.plan import Plan
from pdkit.render.serving import names
from pdkit.render.serving.environment import fabric_env
from pdkit.render.serving.inputs import from_plan
from pdkit.render.serving.router_args import ROUTER_METRICS_PORT, ROUTER_PACKAGE, ROUTER_VERSION, router_argv
from pdkit.render.serving.sglang_args import EXPERT_BALANCEDNESS_REPORT, SGLANG_PORT, SGLANG_VERSION, launch_argv, role_env

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"
# What SGLang asks torch.cuda about the GPU (stubbed on the CPU-only checker): compute capability and SMs.
GPU_FACTS = {"H200": {"capability": [9, 0], "multi_processor_count": 132}, "H100": {"capability": [9, 0], "multi_processor_count": 132}}

# Profile switches exercised on top of the default profile: (name, dotted field, value).
VARIANTS: tuple[tuple[str, str, Any], ...] = (
    ("kv-nixl", "serving.kv_transfer", "nixl"),
    (
        "prefill-fallback-layout",
        "roles.prefill.parallelism",
        {"tp": 16, "pp": 1, "attn_cp": 1, "attn_dp": 16, "moe_a2a_backend": "uccl-ep", "deepep_mode": "normal"},
    ),
)


# `make conformance MODEL_CONFIG=path`: resolve against that config.json (e.g. the published one) instead of
# the synthesized one under models/ (models/zai-org--GLM-5.1-FP8/SOURCES.md says where each field comes from).
_model_config_override: Path | None = None


def model_config_dir(model_id: str) -> Path:
    return _model_config_override or MODELS / model_id.replace("/", "--")


def use_model_config(config: Path, out: Path) -> None:
    """SGLang reads `<model path>/config.json`: copy the given file into a directory of its own."""
    global _model_config_override
    if not config.is_file():
        raise SystemExit(f"conformance: MODEL_CONFIG={config} is not a file; give the path of a config.json")
    target = out / "model"
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_bytes(config.read_bytes())
    _model_config_override = target


def _set(raw: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    *parents, leaf = dotted.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return out


def _expect(the_plan: Plan, role: str) -> dict[str, Any]:
    r = the_plan.roles[role]
    mtp = r.settings.mtp
    expect: dict[str, Any] = {
        "disaggregation_mode": role,
        "disaggregation_transfer_backend": the_plan.kv_transfer,
        "tp_size": r.tp,
        "pp_size": r.pp,
        "ep_size": r.ep,
        "attn_cp_size": r.attn_cp,
        "enable_prefill_cp": r.attn_cp > 1,
        "moe_a2a_backend": r.moe_a2a_backend,
        "context_length": r.context_length,
        "max_running_requests": r.max_running_requests,
        "mem_fraction_static": r.mem_fraction_static,
        "enable_two_batch_overlap": r.settings.two_batch_overlap,
        "speculative_algorithm": "EAGLE" if mtp.enabled else None,
        # The dense layers and the LM head follow attention DP (None: TP across the whole group).
        "moe_dense_tp_size": r.moe_dense_tp_size,
        "enable_dp_lm_head": r.enable_dp_lm_head,
    }
    if r.enable_dp_lm_head:
        # Without the DP LM head SGLang shards it over TP and all-to-alls the logits every step.
        expect["enable_tp_lm_head_all_to_all"] = False
    if r.attn_dp > 1:
        expect["attn_dp_size"] = r.attn_dp
    if r.deepep_mode:
        expect["deepep_mode"] = r.deepep_mode
    if r.reports_expert_balancedness:
        # The report mode starts SGLang's expert distribution recorder in its `stat` mode.
        expect |= {"expert_balancedness_report_mode": EXPERT_BALANCEDNESS_REPORT, "expert_distribution_recorder_mode": "stat"}
    if mtp.enabled:
        expect |= {"speculative_num_steps": mtp.steps, "speculative_eagle_topk": mtp.topk, "speculative_num_draft_tokens": mtp.draft_tokens}
    if r.decode_graph_bs:
        # What SGLang will capture per rank, after its own resolution (a dotted path into the resolved view).
        expect["cuda_graph_config.decode.bs"] = list(r.decode_graph_bs)
        expect["cuda_graph_config.decode.max_bs"] = max(r.decode_graph_bs)
    elif r.settings.cuda_graph_max_bs is not None:
        expect["cuda_graph_max_bs_decode"] = r.settings.cuda_graph_max_bs
    return expect


def plan_cases(label: str, the_plan: Plan) -> list[dict[str, Any]]:
    model_dir = model_config_dir(the_plan.model.id)
    if not (model_dir / "config.json").is_file():
        raise SystemExit(f"{model_dir}/config.json missing: conformance needs the architecture of {the_plan.model.id}")
    gpu = GPU_FACTS[the_plan.instance.gpu_model]
    device = {"name": f"NVIDIA {the_plan.instance.gpu_model}", "total_memory": the_plan.instance.gpu_memory_mib * 1024**2, **gpu}
    inputs = from_plan(the_plan)
    cases = []
    for role, r in the_plan.roles.items():
        # A LeaderWorkerSet the DisaggregatedSet creates: <set>-<slice>-<revision hash>-<role> (any hash will do).
        lws = f"{names.disaggregated_set(the_plan)}-0-58f79fdb78-{role}"
        cases.append(
            {
                "id": f"{label}/{role}",
                "kind": "sglang",
                "argv": launch_argv(the_plan, role),
                "env": {**fabric_env(the_plan, host_network=inputs.host_network), **role_env(the_plan, role)},
                "model_config_dir": str(model_dir),
                "lws": {"leader_address": f"{lws}-0.{lws}.{names.namespace(the_plan)}", "group_size": r.nodes_per_replica},
                "device": device,
                "expect": _expect(the_plan, role),
            }
        )
    cases.append(
        {
            "id": f"{label}/router",
            "kind": "router",
            "argv": router_argv(the_plan),
            "expect": {
                "pd_disaggregation": True,
                # What smg resolves per role (--prefill-policy / --decode-policy, else its --policy).
                "prefill_policy": the_plan.router.prefill_policy,
                "decode_policy": the_plan.router.decode_policy,
                "dp_aware": the_plan.router.dp_aware,
                "cache_threshold": the_plan.router.cache_threshold,
                "balance_abs_threshold": the_plan.router.balance_abs_threshold,
                "balance_rel_threshold": the_plan.router.balance_rel_threshold,
                # Workers come from Kubernetes discovery: the leaders of each role, by label.
                "service_discovery": True,
                "service_discovery_namespace": names.namespace(the_plan),
                "service_discovery_port": SGLANG_PORT,
                "prefill_selector": names.leader_selector(the_plan, "prefill"),
                "decode_selector": names.leader_selector(the_plan, "decode"),
                "prometheus_port": ROUTER_METRICS_PORT,
            },
        }
    )
    return cases


def _replace(argv: list[str], old: list[str], new: list[str]) -> list[str]:
    for i in range(len(argv) - len(old) + 1):
        if argv[i : i + len(old)] == old:
            return argv[:i] + new + argv[i + len(old) :]
    raise SystemExit(f"conformance: {old} not in the rendered command line; update the negative cases")


def _drop_flag(argv: list[str], flag: str, values: int) -> list[str]:
    i = argv.index(flag)
    return argv[:i] + argv[i + 1 + values :]


def negative_cases(default: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Known-bad variants of the default profile's command lines, each with the rejection expected."""
    by_role = {c["id"].rsplit("/", 1)[1]: c for c in default}
    prefill, decode, router = by_role["prefill"], by_role["decode"], by_role["router"]

    def bad(base: dict[str, Any], name: str, argv: list[str], stage: str, message: str) -> dict[str, Any]:
        case = copy.deepcopy(base)
        case.update(id=f"reject/{name}", argv=argv, expect_reject={"stage": stage, "message": message})
        case.pop("expect", None)
        return case

    p, d = prefill["argv"], decode["argv"]
    tp_at = p.index("--tp-size")
    cross_node_cp = _drop_flag([*p[: tp_at + 1], "16", *p[tp_at + 2 :]], "--pp-size", 1)
    cross_node_cp = _replace(cross_node_cp, ["--attn-cp-size", "8"], ["--attn-cp-size", "16"])
    return [
        bad(decode, "cuda-graph-max-bs", [*d, "--cuda-graph-max-bs", "32"], "parse", "ambiguous option"),
        # AWS's serve-pd.sh spelling (SGLang 0.5.13); 0.5.23 split it per phase.
        bad(decode, "cuda-graph-bs", _replace(d, ["--cuda-graph-bs-decode"], ["--cuda-graph-bs"]), "parse", "ambiguous option"),
        bad(
            decode,
            "enable-deepep-moe",
            _replace(d, ["--moe-a2a-backend", "deepep"], ["--enable-deepep-moe"]),
            "parse",
            "unrecognized arguments",
        ),
        bad(prefill, "nsa-prefill-backend", [*p, "--nsa-prefill-backend", "flashmla_sparse"], "parse", "unrecognized arguments"),
        bad(
            prefill,
            "enable-nsa-prefill-context-parallel",
            _replace(p, ["--enable-prefill-cp"], ["--enable-nsa-prefill-context-parallel"]),
            "parse",
            "unrecognized arguments",
        ),
        bad(prefill, "cross-node-context-parallel", cross_node_cp, "resolve", "single machine"),
        bad(
            router,
            "router-unknown-policy",
            _replace(router["argv"], ["--decode-policy", router["expect"]["decode_policy"]], ["--decode-policy", "least_loaded"]),
            "parse",
            "invalid choice",
        ),
        # bucket is a prefill-only policy in smg 1.13.0 (--decode-policy choices lack it).
        bad(
            router,
            "router-bucket-decode-policy",
            _replace(router["argv"], ["--decode-policy", router["expect"]["decode_policy"]], ["--decode-policy", "bucket"]),
            "parse",
            "invalid choice",
        ),
    ]


def all_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    default_name = profile_files.default_profile_name()
    default_cases: list[dict[str, Any]] = []
    for name in profile_files.available_profiles():
        the_plan = deployment.load(name)
        found = plan_cases(name, the_plan)
        cases += found
        if name == default_name:
            default_cases = found
    raw = yaml.safe_load(profile_files.resolve(None).read_text())
    for variant, field, value in VARIANTS:
        the_plan = plan_mod.build(profile_files.parse(_set(raw, field, value)), profile_path=f"<{variant}>")
        cases += [c for c in plan_cases(f"{default_name}+{variant}", the_plan) if c["kind"] == "sglang"]
    return cases + negative_cases(default_cases)


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--model-config"):
        print("usage: python -m conformance.export_cases OUT_DIR [--model-config CONFIG_JSON]", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    if len(argv) == 3:
        use_model_config(Path(argv[2]), out)
        print(f"conformance: resolving against {argv[2]} instead of the synthesized model config")
    cases = all_cases()
    pins = {"sglang": SGLANG_VERSION, ROUTER_PACKAGE: ROUTER_VERSION}
    (out / "cases.json").write_text(json.dumps({"pins": pins, "cases": cases}, indent=1) + "\n")
    print(f"conformance: exported {len(cases)} cases to {out / 'cases.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
