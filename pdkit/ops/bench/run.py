"""`pdkit bench` end to end: start the Job, save each level's results as soon as the pod prints them,
and leave a directory that `pdkit report` reads with no cluster.

Written to the output directory:
- `bench-c<N>.jsonl`: bench_serving's JSONL record for concurrency N (generated texts dropped);
- `bench.log`: the pod's whole log, with bench_serving's printed summaries;
- `failed.json`: levels whose bench_serving exited non-zero, with its last lines;
- `run.json`: what ran (plan, image, levels, lengths, the exact command) and when.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pdkit.model.plan import Plan
from pdkit.ops.bench.results import Level, levels_from_log
from pdkit.ops.kube import Cluster, JobState, PodState, Waiting, run_jobs
from pdkit.pods import bench_compact as compact
from pdkit.render import bench as manifests
from pdkit.render.serving import names

# Slack on top of the plan's worst-case duration: image pull on a system node (the serving image is
# 20+ GB), the tokenizer and ShareGPT downloads, the readiness wait.
DEADLINE_SLACK_SECONDS = 1800


@dataclass
class BenchRun:
    out_dir: Path
    saved: dict[int, Level] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return not self.failed and self.problem is None and bool(self.saved)


def deadline_seconds(plan: Plan, levels: tuple[int, ...]) -> int:
    """Every request at the profile's p99 alarm limits (TTFT + output_len x TPOT), level by level."""
    b, obs = plan.bench, plan.alarms
    per_request = obs.ttft_p99_ms / 1000 + b.output_len * obs.tpot_p99_ms / 1000
    total = sum(math.ceil((b.prompts_per_level + b.warmup_requests) / c) * per_request for c in levels)
    return int(total) + DEADLINE_SLACK_SECONDS


def _failure_reason(log: str, concurrency: int, status: int) -> str:
    start = f"pdkit-bench-level concurrency={concurrency}"
    section = log.split(start, 1)[1] if start in log else log
    section = section.split(compact.BEGIN, 1)[0]
    lines = [x.strip() for x in section.splitlines() if x.strip()]
    tail = " | ".join(lines[-3:]) if lines else "no output"
    return f"bench_serving exited {status}: {tail}"[:400]


def run(
    plan: Plan,
    cluster: Cluster,
    *,
    image: str,
    out_dir: Path,
    levels: tuple[int, ...],
    waiting: Waiting,
    tokenizer: str | None = None,
    workload: str = "random",
    keep: bool = False,
    say: Callable[[str], None] = lambda _line: None,
    run_id: str | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> BenchRun:
    levels = manifests.check_levels(levels)
    run_id = run_id or secrets.token_hex(3)
    objs = manifests.render(
        plan, image=image, run_id=run_id, levels=levels, tokenizer=tokenizer, deadline_s=int(waiting.timeout_s), workload=workload
    )
    config_map, job = objs
    ns = names.namespace(plan)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = BenchRun(out_dir=out_dir)
    started = now()
    meta = {
        "kind": "pdkit-bench",
        "plan": plan.name,
        "profile": plan.profile_path,
        "model": plan.model.id,
        "image": image,
        # What each role served with, so `pdkit report --compare` can label an A/B by backend from the records.
        "roles": {
            r.name: {"moe_a2a_backend": r.a2a_backend, "deepep_mode": r.deepep_mode, "image": plan.images[r.image].tag}
            for r in plan.roles.values()
        },
        "router": manifests.router_url(plan),
        # How the router chose workers, so `pdkit report --compare` can label a cache-aware vs round-robin A/B.
        "router_policies": {
            "prefill": plan.router.prefill_policy,
            "decode": plan.router.decode_policy,
            "dp_aware": plan.router.dp_aware,
        },
        "workload": workload,
        "levels": list(levels),
        "input_len": manifests.prompt_len(plan, workload),
        "output_len": plan.bench.output_len,
        "prompts_per_level": plan.bench.prompts_per_level,
        "warmup_requests": plan.bench.warmup_requests,
        "command": manifests.bench_argv(
            plan, concurrency=levels[0], base_url=manifests.router_url(plan), tokenizer=tokenizer or plan.model.id, workload=workload
        ),
        "job": f"{ns}/{job['metadata']['name']}",
        "started": started.isoformat(timespec="seconds"),
    }

    def harvest(text: str) -> None:
        for c, (status, found) in levels_from_log(text).items():
            if c in result.saved or c in result.failed:
                continue
            if status != 0 or not found:
                result.failed[c] = _failure_reason(text, c, status)
                say(f"c={c}: FAILED ({result.failed[c]})")
                continue
            _, records = compact.decode_blocks(text)[c]
            (out_dir / f"bench-c{c}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            level = found[-1]
            result.saved[c] = level
            say(
                f"c={c}: {level.completed} requests, mean TTFT {level.get('mean_ttft_ms') or 0:.0f} ms, "
                f"mean TPOT {level.get('mean_tpot_ms') or 0:.2f} ms, max ITL {level.max_itl_ms or 0:.0f} ms"
            )

    def on_poll(_name: str, _state: JobState, pods: list[PodState]) -> None:
        for pod in pods:
            if pod.phase in ("Running", "Succeeded", "Failed"):
                harvest(cluster.logs(ns, pod.name))

    runs = run_jobs(cluster, [(job, [config_map])], waiting=waiting, keep=keep, on_poll=on_poll)
    outcome = runs[job["metadata"]["name"]]
    log = "\n".join(outcome.logs[i] for i in sorted(outcome.logs))
    harvest(log)
    if log:
        (out_dir / "bench.log").write_text(log)
    missing = [c for c in levels if c not in result.saved and c not in result.failed]
    if outcome.problem:
        result.problem = outcome.problem
    for c in missing:
        result.failed[c] = outcome.problem or "no result in the pod's log (interrupted, or the log rotated: lower bench.prompts_per_level)"
    (out_dir / "failed.json").write_text(json.dumps({str(k): v for k, v in sorted(result.failed.items())}, indent=2) + "\n")
    meta["finished"] = now().isoformat(timespec="seconds")
    meta["problem"] = result.problem
    (out_dir / "run.json").write_text(json.dumps(meta, indent=2) + "\n")
    return result
