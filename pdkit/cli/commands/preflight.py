"""`pdkit preflight`: PASS/WARN/FAIL for everything that must hold before deploying onto the paid block."""

from __future__ import annotations

import argparse

from pdkit.cli.commands import summary


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "preflight",
        parents=[common],
        help=summary("preflight"),
    )
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pdkit import console
    from pdkit.cli.context import load_plan, make_command, pdkit_command
    from pdkit.ops import aws_errors, capacity
    from pdkit.ops.aws_clients import Aws
    from pdkit.ops.preflight import Preflight

    plan = load_plan(args.profile)
    aws = Aws.for_args(args, plan)
    check = Preflight(plan, aws, now=capacity.now())
    with aws_errors.translated(region=aws.region):
        rows = check.run()
    if args.output == "json":
        console.print_json({"ok": check.ok, "profile": plan.profile_path, "region": aws.region, "checks": [r.to_dict() for r in rows]})
        return 0 if check.ok else 1
    console.table(
        ("check", "result", "detail", "fix"),
        ((r.name, r.status, r.detail, r.fix) for r in rows),
        title=f"Preflight for {plan.name} ({plan.instance_count} x {plan.instance.name} in {plan.block_az})",
        status_column=1,
    )
    failed = [r for r in rows if r.status == "FAIL"]
    if failed:
        console.say(f"{len(failed)} check(s) failed: do not deploy onto the block yet. First fix: {failed[0].fix or failed[0].detail}")
        return 1
    warned = sum(r.status == "WARN" for r in rows)
    console.say(
        f"Preflight passed{f' with {warned} warning(s)' if warned else ''}. "
        f"Next: {make_command(args, 'deploy')} (after {make_command(args, 'bootstrap')} once per account and region; the first deploy "
        f"asks you to approve its IAM changes), then {pdkit_command(args, 'nodes up')} once the block is active."
    )
    return 0
