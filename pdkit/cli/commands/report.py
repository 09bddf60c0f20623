"""`pdkit report`: Markdown and PNG plots from saved benchmark results, beside the seed and the latency model (offline)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pdkit.cli.commands import summary


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "report",
        parents=[common],
        help=summary("report"),
    )
    p.add_argument("--bench", metavar="DIR", required=True, help="a `pdkit bench --out` directory (or bench_serving JSONL / logs)")
    p.add_argument("--validate", metavar="FILE", help="a `pdkit validate --out` JSON to include")
    p.add_argument(
        "--compare",
        metavar="DIR",
        help="a second `pdkit bench --out` directory (run B of an A/B): also writes compare.md, both runs side by side per concurrency",
    )
    p.add_argument("--out", metavar="DIR", required=True, help="where to write report.md and the PNG plots")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pdkit import console
    from pdkit.cli.context import load_plan
    from pdkit.model import seed
    from pdkit.ops.bench import model, report, results, workload
    from pdkit.ops.fabric import validate

    plan = load_plan(args.profile)
    bench_dir = Path(args.bench)
    sweep = results.load_dir(bench_dir)
    for item in sweep.skipped:
        console.say(f"pdkit: skipped {item}", stderr=True)
    for item in sweep.warnings:
        console.say(f"pdkit: warning: {item}", stderr=True)
    meta = _run_meta(bench_dir)
    validation = validate.load(Path(args.validate)) if args.validate else None
    if warning := workload.deployment_warning(workload.from_run(sweep, meta), plan.name):
        console.say(f"pdkit: warning: {warning}", stderr=True)
    the_seed = seed.load()
    written = report.write(
        sweep, Path(args.out), plan=plan, seed=the_seed, model=model.from_plan(plan, the_seed), validation=validation, run_meta=meta
    )
    if args.compare:
        other_dir = Path(args.compare)
        other = results.load_dir(other_dir)
        text = report.compare_markdown(sweep, other, a_name=str(bench_dir), b_name=str(other_dir), a_meta=meta, b_meta=_run_meta(other_dir))
        compare_file = Path(args.out) / report.COMPARE_REPORT
        compare_file.write_text(text)
        written.append(compare_file)
    for path in written:
        console.say(f"wrote {path}")
    return 0


def _run_meta(bench_dir: Path) -> dict[str, Any] | None:
    import json

    from pdkit.errors import KitError

    meta_file = bench_dir / "run.json"
    try:
        meta = json.loads(meta_file.read_text()) if meta_file.is_file() else None
    except json.JSONDecodeError as err:
        raise KitError(
            f"{meta_file} is not JSON ({err.msg}, line {err.lineno}). Fix: restore the run.json `pdkit bench` wrote, or remove it"
        ) from None
    if meta is not None and not isinstance(meta, dict):
        raise KitError(
            f"{meta_file} is not a `pdkit bench` run record (a JSON object). Fix: restore the run.json `pdkit bench` wrote, or remove it"
        )
    return meta
