"""SGLang 0.5.23 command lines for the prefill and decode roles, rendered from the plan.

Every flag here is spelled the way SGLang 0.5.23 accepts it; `make conformance` feeds each rendered
command line to SGLang's own `prepare_server_args` + `ServerArgs.resolve_once()`.
"""

from __future__ import annotations

from pdkit.model.images import component
from pdkit.model.plan import Plan, RolePlan
from pdkit.render.serving.environment import role_fabric_env

# The pin lives in containers/versions.yaml (what the image installs); conformance checks this version.
SGLANG_VERSION = str(component("sglang")["version"])
SGLANG_PORT = 30000
# Prefill's bootstrap server; the router hands this port to decode with every request.
BOOTSTRAP_PORT = 8998
# torch.distributed rendezvous on the group's leader (LWS_LEADER_ADDRESS).
DIST_INIT_PORT = 20000
WEIGHTS_ROOT = "/models"
# interleave is the strategy validated for GLM-5.1 and the only one SGLang accepts for DeepSeek-V3.2's DSA.
CP_STRATEGY = "interleave"
# LeaderWorkerSet injects these into every container; kubelet expands $(VAR) in args.
LWS_LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
LWS_GROUP_SIZE = "$(LWS_GROUP_SIZE)"
LWS_WORKER_INDEX = "$(LWS_WORKER_INDEX)"

# Spellings public LWS/RBG/OME manifests still use and SGLang 0.5.23's parser rejects, with the
# 0.5.23 spelling. `--nsa-*` is a prefix (every NSA backend flag became `--dsa-*`).
REJECTED_SPELLINGS = {
    "--cuda-graph-max-bs": "--cuda-graph-max-bs-decode (the old name is ambiguous in 0.5.23)",
    "--cuda-graph-bs": "--cuda-graph-bs-decode (the old name is ambiguous in 0.5.23)",
    "--enable-nsa-prefill-context-parallel": "--enable-prefill-cp --cp-strategy interleave --attn-cp-size N",
    "--nsa-": "--dsa-prefill-backend / --dsa-decode-backend",
    "--enable-deepep-moe": "--moe-a2a-backend deepep",
}
# Accepted by 0.5.23 but deprecated: rewritten internally, so the kit never renders them.
DEPRECATED_SPELLINGS = {
    "--enable-dp-attention": "--attn-dp-size N",
    "--dp-size": "--attn-dp-size N (multi-node DP replicas are refused)",
    "--disable-cuda-graph": "--cuda-graph-backend-decode disabled",
}

# Prometheus only: the server_log form prints a line per forward pass.
EXPERT_BALANCEDNESS_REPORT = "prometheus"


def model_dir(plan: Plan) -> str:
    """Where the staged checkpoint sits inside the pod (the node-local weights volume)."""
    return f"{WEIGHTS_ROOT}/{plan.model.id.replace('/', '--')}"


def served_model_name(plan: Plan) -> str:
    return plan.served_model_name


def launch_argv(plan: Plan, role: str) -> list[str]:
    """The container command of one role's SGLang server (leader and workers run the same one)."""
    r = plan.roles[role]
    s = r.settings
    kv = plan.kv_transfer
    argv = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        model_dir(plan),
        "--served-model-name",
        served_model_name(plan),
        "--device",
        "cuda",
        "--host",
        "0.0.0.0",  # noqa: S104 - the pod IP; the Service and the router reach it there
        "--port",
        str(SGLANG_PORT),
        "--disaggregation-mode",
        role,
        "--disaggregation-transfer-backend",
        kv,
        "--disaggregation-bootstrap-port",
        str(BOOTSTRAP_PORT),
        "--dist-init-addr",
        f"{LWS_LEADER_ADDRESS}:{DIST_INIT_PORT}",
        "--nnodes",
        LWS_GROUP_SIZE,
        "--node-rank",
        LWS_WORKER_INDEX,
        *parallelism_flags(r),
        "--context-length",
        str(r.context_length),
        "--mem-fraction-static",
        f"{r.mem_fraction_static:g}",
        "--max-running-requests",
        str(r.max_running_requests),
    ]
    if s.chunked_prefill_size is not None:
        argv += ["--chunked-prefill-size", str(s.chunked_prefill_size)]
    if r.decode_graph_bs:
        # The plan's list, not a maximum: SGLang would otherwise capture its whole default list on every DP rank.
        argv += ["--cuda-graph-bs-decode", *(str(bs) for bs in r.decode_graph_bs)]
    elif s.cuda_graph_max_bs is not None:
        argv += ["--cuda-graph-max-bs-decode", str(s.cuda_graph_max_bs)]
    if s.two_batch_overlap:
        argv += ["--enable-two-batch-overlap"]
    if s.mtp.enabled:
        argv += [
            "--speculative-algorithm",
            "EAGLE",
            "--speculative-num-steps",
            str(s.mtp.steps),
            "--speculative-eagle-topk",
            str(s.mtp.topk),
            "--speculative-num-draft-tokens",
            str(s.mtp.draft_tokens),
        ]
    argv += [
        "--reasoning-parser",
        plan.model.reasoning_parser,
        "--tool-call-parser",
        plan.model.tool_call_parser,
        "--enable-metrics",
    ]
    if r.reports_expert_balancedness:
        # Starts the expert distribution recorder (mode stat) and exports sglang:eplb_balancedness.
        # Per-DP-rank series need no flag: --enable-metrics-for-all-schedulers would add the other
        # TP/CP ranks of each attention group, which repeat the same requests (pdkit/render/observability/catalog.py).
        argv += ["--expert-balancedness-report-mode", EXPERT_BALANCEDNESS_REPORT]
    return argv


def parallelism_flags(r: RolePlan) -> list[str]:
    # `--tp` works only as an argparse abbreviation of --tp-size; a future --tp-* flag would make it ambiguous.
    flags = ["--tp-size", str(r.tp)]
    if r.pp > 1:
        flags += ["--pp-size", str(r.pp)]
    if r.attn_cp > 1:
        flags += ["--attn-cp-size", str(r.attn_cp), "--enable-prefill-cp", "--cp-strategy", CP_STRATEGY]
    if r.attn_dp > 1:
        flags += ["--attn-dp-size", str(r.attn_dp)]
    if r.moe_dense_tp_size is not None:
        flags += ["--moe-dense-tp-size", str(r.moe_dense_tp_size)]
    if r.enable_dp_lm_head:
        flags += ["--enable-dp-lm-head"]
    if r.moe_a2a_backend == "deepep":
        # DeepEP (UCCL-EP on EFA) sizes EP from TP itself; the plan already made ep = tp.
        flags += ["--moe-a2a-backend", "deepep", "--deepep-mode", str(r.deepep_mode)]
    elif r.ep > 1:
        flags += ["--ep-size", str(r.ep)]
    return flags


def role_env(plan: Plan, role: str) -> dict[str, str]:
    """Environment only this role needs (everything shared is in the ConfigMap)."""
    # No SGLANG_ENABLE_SPEC_V2 for MTP: the recipe's variable is read nowhere in SGLang 0.5.23, and conformance refuses an
    # SGLANG_* variable the pinned SGLang does not read (conformance/check_sglang.py, unread_sglang_variables).
    return role_fabric_env(plan, plan.roles[role])
