"""`pdkit plan`: what the profile deploys, before anything is paid for."""

from __future__ import annotations

import argparse

from pdkit.cli.commands import summary


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("plan", parents=[common], help=summary("plan"))
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pdkit.cli.context import load_plan, make_command, pdkit_command
    from pdkit.render import plan_report

    the_plan = load_plan(args.profile)
    if args.output == "json":
        print(plan_report.as_json(the_plan))
        return 0
    next_step = (
        f"{make_command(args, 'synth')}   (then `{pdkit_command(args, 'capacity offerings')}` when you are ready to buy a block)"
        if the_plan.market == "capacity-block"
        else f"{pdkit_command(args, 'preflight')}   (then `{pdkit_command(args, 'rehearse')}`: runbooks/00b-rehearsal.md)"
    )
    print(plan_report.as_text(the_plan, next_step=next_step))
    return 0
