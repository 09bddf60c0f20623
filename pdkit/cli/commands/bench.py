"""`pdkit bench`: SGLang's bench_serving against the PD router, the profile's concurrency sweep, saved for `pdkit report`."""

from __future__ import annotations

import argparse

from pdkit.cli.commands import summary

EPILOG = """\
Runs one Job in the serving namespace, on a system node: `python -m sglang.bench_serving --backend
sglang --pd-separated` against the router Service, random dataset with --random-range-ratio 1.0,
warm-up before each level, lengths, prompts and concurrency from the profile's bench section. Each
level's JSONL is saved as soon as it finishes.

  pdkit bench --render > bench.yaml          # the manifests, no cluster needed
  pdkit bench --out results/bench-1          # then: pdkit report --bench results/bench-1 --out report/
  pdkit bench --workload shared-prefix       # prefix-sharing prompts: prefix cache hit rate and TTFT; A/B it
                                             # against a run with serving.router.prefill_policy: round_robin
                                             # via pdkit report --compare
"""


def _levels(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 1,4,16,64") from None


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "bench",
        parents=[common],
        help=summary("bench"),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--kube-context", metavar="NAME", help="kubeconfig context (default: the current one; KUBECONFIG is honoured)")
    p.add_argument("--out", metavar="DIR", help="results directory (default: results/<name>/bench-<time>)")
    p.add_argument("--concurrency", type=_levels, metavar="N,N,...", help="levels to run (default: the profile's bench.concurrency)")
    p.add_argument(
        "--workload",
        choices=("random", "shared-prefix"),
        default="random",
        help="random: fixed-length random prompts; shared-prefix: prompt groups sharing a long system prompt "
        "(bench_serving generated-shared-prefix, sizes from bench.shared_prefix), reports the prefix cache hit rate",
    )
    p.add_argument("--tokenizer", metavar="ID|PATH", help="tokenizer for bench_serving (default: the model's Hugging Face id)")
    p.add_argument("--image", metavar="URI", help="image with SGLang (default: the plan's serving image)")
    p.add_argument(
        "--registry",
        metavar="HOST",
        help="ECR registry host (default: <account>.dkr.ecr.<region>.amazonaws.com from aws.account; required when the profile sets none)",
    )
    p.add_argument(
        "--timeout", type=float, metavar="MINUTES", help="stop waiting after this long (default: from the profile's p99 alarm limits)"
    )
    p.add_argument("--keep", action="store_true", help="leave the Job and its pod in place (they expire after a day)")
    p.add_argument("--render", action="store_true", help="print the manifests as YAML and exit; touches no cluster")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime
    from pathlib import Path

    from pdkit.cli.context import load_plan, pdkit_command, refuse_placeholders
    from pdkit.ops.bench.run import deadline_seconds
    from pdkit.render import bench as manifests
    from pdkit.render.pod import to_yaml
    from pdkit.render.serving.inputs import default_registry

    plan = load_plan(args.profile)
    levels = manifests.check_levels(args.concurrency or plan.bench.concurrency)
    image = args.image or plan.images["sglang-efa"].uri(args.registry or default_registry(plan))
    refuse_placeholders(plan, "pdkit bench", ((image, "--registry"),))
    deadline = int(args.timeout * 60) if args.timeout else deadline_seconds(plan, levels)
    if args.render:
        objs = manifests.render(
            plan, image=image, run_id="render", levels=levels, tokenizer=args.tokenizer, deadline_s=deadline, workload=args.workload
        )
        print(to_yaml(objs), end="")
        return 0

    from pdkit import console
    from pdkit.ops import kube
    from pdkit.ops.bench import run as bench_run

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path("results") / plan.name / f"bench-{stamp}"
    cluster = kube.connect(args.kube_context)
    console.say(
        f"Benchmarking {manifests.router_url(plan)} at concurrency {', '.join(map(str, levels))} (up to {deadline / 60:.0f} min) ...",
        stderr=True,
    )
    result = bench_run.run(
        plan,
        cluster,
        image=image,
        out_dir=out,
        levels=levels,
        tokenizer=args.tokenizer,
        workload=args.workload,
        keep=args.keep,
        waiting=kube.Waiting(timeout_s=deadline, poll_s=30),
        say=lambda line: console.say(line, stderr=True),
    )
    console.table(
        ("concurrency", "status", "mean TTFT (ms)", "mean TPOT (ms)", "p99 TPOT (ms)", "max ITL (ms)", "output tok/s"),
        [
            (
                c,
                "OK" if c in result.saved else "FAIL",
                f"{lv.get('mean_ttft_ms') or 0:.0f}" if (lv := result.saved.get(c)) else "-",
                f"{lv.get('mean_tpot_ms') or 0:.2f}" if lv else "-",
                f"{lv.get('p99_tpot_ms') or 0:.2f}" if lv else "-",
                f"{lv.max_itl_ms or 0:.0f}" if lv else "-",
                f"{lv.get('output_throughput') or 0:.0f}" if lv else result.failed.get(c, "-"),
            )
            for c in levels
        ],
        title=f"{plan.name}: bench_serving through the router",
        status_column=1,
    )
    console.say(f"Saved in {out}. Next: {pdkit_command(args, f'report --bench {out} --out {out}/report')}")
    if result.problem:
        console.say(f"The Job stopped early: {result.problem}")
    return 0 if result.ok else 1
