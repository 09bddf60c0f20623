"""The benchmark Job: SGLang's bench_serving against the PD router, one concurrency level after another.

`python -m sglang.bench_serving --backend sglang --pd-separated` sends `/generate` requests to the
router, which pairs a prefill and a decode server per request. The random dataset with
`--random-range-ratio 1.0` fixes every prompt at input_len tokens and every answer at output_len
(bench_serving ignores EOS unless told otherwise); without it lengths are drawn from [0, len]. Each
level runs `warmup_requests` first at the same concurrency (bench_serving caps warm-up answers at 32
tokens) and then `prompts_per_level` requests with at most `concurrency` in flight. All numbers come
from the profile's `bench` section. `--workload shared-prefix` swaps the random dataset for
bench_serving's generated-shared-prefix one (`bench.shared_prefix`) with `--cache-report`, the run
that shows prefill's prefix cache and the router's cache-aware policy.

The pod runs on the on-demand system nodes, never on a GPU node: a client on a decode node would take
CPU from UCCL-EP's proxy threads, the very path the seed measures. bench_serving fetches the
tokenizer and, for the random dataset, the ShareGPT file it samples token ids from, from the Hugging
Face Hub (through the VPC's NAT gateway); `pdkit bench --tokenizer` can point elsewhere.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from pdkit.errors import KitError
from pdkit.model.plan import Plan
from pdkit.pods import bench_compact as compact
from pdkit.render import pod
from pdkit.render.pod import Obj
from pdkit.render.serving import names
from pdkit.render.serving.manifests import router_service
from pdkit.render.serving.sglang_args import served_model_name

SCRIPT_DIR = "/opt/pdkit"
RESULTS_DIR = "/results"
CACHE_DIR = "/cache"
COMPACT_SOURCE = Path(compact.__file__)
RUN_LABEL = "pdkit/bench-run"
# random: fixed-length random prompts; shared-prefix: groups of prompts sharing a long system prompt,
# the workload where prefill's prefix cache and cache-aware routing show.
WORKLOADS = ("random", "shared-prefix")
# Same prompts on every run and every level: comparisons between runs are like for like.
DATASET_SEED = 1
# The router waits for the model; so does bench_serving's readiness check (GET /v1/models).
READY_TIMEOUT_SECONDS = 1800
TTL_AFTER_FINISHED_SECONDS = 24 * 3600
CPU_REQUEST = "3"
MEMORY_REQUEST = "12Gi"
MEMORY_LIMIT = "16Gi"
# The image is built for linux/amd64 (containers/README.md).
IMAGE_ARCH = "x86_64"


def router_url(plan: Plan) -> str:
    """The router's in-cluster address: its Service's DNS name and port, as the serving renderer makes them."""
    port = router_service(plan)["spec"]["ports"][0]["port"]
    return f"http://{names.router_name(plan)}.{names.namespace(plan)}.svc:{port}"


def job_name(plan: Plan, run_id: str) -> str:
    return f"{plan.name}-bench-{run_id}"


def results_file(concurrency: int) -> str:
    return f"{RESULTS_DIR}/bench-c{concurrency}.jsonl"


def shared_prefix_prompts(plan: Plan) -> int:
    """bench_serving sends groups x prompts-per-group requests; at least prompts_per_level of them."""
    b = plan.bench
    return b.shared_prefix.groups * -(-b.prompts_per_level // b.shared_prefix.groups)


def prompt_len(plan: Plan, workload: str) -> int:
    """Prompt tokens per request: the shared system prompt plus the question for shared-prefix."""
    b = plan.bench
    return b.shared_prefix.system_prompt_len + b.shared_prefix.question_len if workload == "shared-prefix" else b.input_len


def dataset_argv(plan: Plan, workload: str) -> list[str]:
    """The dataset flags of one workload (SGLang 0.5.23 bench_serving; tests/fixtures/bench/bench_serving_help.txt)."""
    b = plan.bench
    if workload == "random":
        return [
            "--dataset-name",
            "random",
            "--random-input-len",
            str(b.input_len),
            "--random-output-len",
            str(b.output_len),
            "--random-range-ratio",
            "1.0",
            "--num-prompts",
            str(b.prompts_per_level),
        ]
    if workload == "shared-prefix":
        gsp = b.shared_prefix
        return [
            "--dataset-name",
            "generated-shared-prefix",
            "--gsp-num-groups",
            str(gsp.groups),
            "--gsp-prompts-per-group",
            str(shared_prefix_prompts(plan) // gsp.groups),
            "--gsp-system-prompt-len",
            str(gsp.system_prompt_len),
            "--gsp-question-len",
            str(gsp.question_len),
            "--gsp-output-len",
            str(b.output_len),
            "--gsp-num-turns",
            str(gsp.turns),
            "--num-prompts",
            str(shared_prefix_prompts(plan)),
            # Each answer's meta_info.cached_tokens (prefill's prefix hit, passed on to decode with the KV)
            # summed into the record's cache_report.cache_hit_rate_pct (sglang/benchmark/serving.py).
            "--cache-report",
        ]
    raise KitError(f"unknown workload {workload!r}. Fix: use one of {', '.join(WORKLOADS)}")


def bench_argv(plan: Plan, *, concurrency: int, base_url: str, tokenizer: str, workload: str = "random") -> list[str]:
    b = plan.bench
    return [
        "python3",
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang",
        "--pd-separated",
        "--base-url",
        base_url,
        "--model",
        served_model_name(plan),
        "--tokenizer",
        tokenizer,
        *dataset_argv(plan, workload),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        "inf",
        "--warmup-requests",
        str(b.warmup_requests),
        "--seed",
        str(DATASET_SEED),
        "--ready-check-timeout-sec",
        str(READY_TIMEOUT_SECONDS),
        "--output-file",
        results_file(concurrency),
        "--output-details",
        "--tag",
        f"{plan.name}-c{concurrency}",
        "--disable-tqdm",
    ]


def bench_script(plan: Plan, *, levels: tuple[int, ...], base_url: str, tokenizer: str, workload: str = "random") -> str:
    steps = []
    for c in levels:
        steps.append(
            f'echo "pdkit-bench-level concurrency={c}"\n'
            f"{shlex.join(bench_argv(plan, concurrency=c, base_url=base_url, tokenizer=tokenizer, workload=workload))}\n"
            "status=$?\n"
            '[ "$status" -eq 0 ] || failed=1\n'
            f'python3 {SCRIPT_DIR}/compact.py {results_file(c)} {c} "$status"'
        )
    body = "\n".join(steps)
    return f"set -u\nfailed=0\n{body}\nexit $failed\n"


def check_levels(levels: tuple[int, ...]) -> tuple[int, ...]:
    if not levels or any(c < 1 for c in levels):
        raise KitError(
            f"concurrency levels {list(levels)} must be positive integers. Fix: e.g. --concurrency 1,4,16,64 (or bench.concurrency)"
        )
    return tuple(sorted(dict.fromkeys(levels)))


def render(
    plan: Plan,
    *,
    image: str,
    run_id: str,
    levels: tuple[int, ...],
    tokenizer: str | None = None,
    deadline_s: int,
    workload: str = "random",
) -> list[Obj]:
    """The script ConfigMap and the Job, in apply order."""
    if plan.system_node_arch != IMAGE_ARCH:
        raise KitError(
            f"the benchmark runs on the system nodes, which are {plan.system_node_arch} ({plan.system_nodes.instance_type}), "
            f"but the serving image is linux/amd64. Fix: set cluster.system_nodes.instance_type to an x86_64 type such as m7i.2xlarge"
        )
    levels = check_levels(levels)
    ns = names.namespace(plan)
    name = job_name(plan, run_id)
    labels = {**names.common_labels(plan, "bench"), RUN_LABEL: run_id}
    meta = {"name": name, "namespace": ns, "labels": labels}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": dict(meta), "data": {"compact.py": COMPACT_SOURCE.read_text()}}
    container = {
        "name": "bench",
        "image": image,
        "command": [
            "/bin/bash",
            "-c",
            bench_script(plan, levels=levels, base_url=router_url(plan), tokenizer=tokenizer or plan.model.id, workload=workload),
        ],
        "env": [
            {"name": "HOME", "value": f"{CACHE_DIR}/home"},
            {"name": "HF_HOME", "value": f"{CACHE_DIR}/huggingface"},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ],
        "resources": {"requests": {"cpu": CPU_REQUEST, "memory": MEMORY_REQUEST}, "limits": {"memory": MEMORY_LIMIT}},
        "securityContext": pod.container_security(),
        "volumeMounts": [
            {"name": "results", "mountPath": RESULTS_DIR},
            {"name": "cache", "mountPath": CACHE_DIR},
            {"name": "scripts", "mountPath": SCRIPT_DIR, "readOnly": True},
        ],
    }
    pod_spec = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": pod.pod_security(),
        "nodeSelector": dict(plan.system_node_labels),
        "containers": [container],
        "volumes": [
            {"name": "results", "emptyDir": {"sizeLimit": "4Gi"}},
            {"name": "cache", "emptyDir": {"sizeLimit": "8Gi"}},
            {"name": "scripts", "configMap": {"name": name, "defaultMode": 0o444}},
        ],
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": dict(meta),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline_s,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_SECONDS,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }
    return [config_map, job]
