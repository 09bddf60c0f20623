"""`pdkit timeline`: the measured start-up, per node and per pod, against the plan's start-up model."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from pdkit.cli.commands import summary

if TYPE_CHECKING:
    from datetime import datetime

    from pdkit.ops.timeline.phases import Timeline


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "timeline",
        parents=[common],
        help=summary("timeline"),
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--capture", metavar="DIR", type=Path, help="also save what EC2 and Kubernetes said into DIR (merged with earlier captures)"
    )
    source.add_argument("--from", dest="from_dir", metavar="DIR", type=Path, help="report from a captured bundle, offline")
    p.add_argument("--kube-context", metavar="NAME", help="kubeconfig context (default: the current one; KUBECONFIG is honoured)")
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pdkit import console
    from pdkit.cli.context import load_plan
    from pdkit.ops import aws_errors, capacity, kube
    from pdkit.ops.timeline import bundle as bundles
    from pdkit.ops.timeline import phases

    plan = load_plan(args.profile)
    if args.from_dir is not None:
        captured = bundles.read(args.from_dir)
    else:
        from pdkit.ops.aws_clients import Aws

        aws = Aws.for_args(args, plan)
        try:
            with aws_errors.translated(region=aws.region):
                # With capacity.purchase, the block the capacity stack bought; before that the capture has no block.
                plan = capacity.with_bought_block(plan, aws)
                if plan.purchase is not None and plan.reservation_is_placeholder:
                    console.say(capacity.missing_reservation(plan) or "", stderr=True)
                fresh = bundles.capture(plan, ec2=aws.ec2, core=kube.connect(args.kube_context).core, now=capacity.now())
        except kube.KubeUnreachable as err:
            console.say(f"Kubernetes: {err}", stderr=True)
            for step, command in enumerate(kube.access_path(plan, aws.region), 1):
                console.say(f"  {step}. {command}", stderr=True)
            return 1
        captured = bundles.capture_into(args.capture, fresh) if args.capture is not None else fresh
    timeline = phases.build(plan, captured)
    if args.output == "json":
        console.print_json(timeline.to_dict())
        return 0
    _print(args, timeline)
    return 0


def _print(args: argparse.Namespace, t: Timeline) -> None:
    from pdkit import console
    from pdkit.cli.context import pdkit_command

    def rel(moment: datetime | None) -> str:
        minutes = t.at(moment)
        return "-" if minutes is None else f"+{minutes:.1f}"

    def mins(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    origin = t.origin.strftime("%Y-%m-%d %H:%M:%S UTC") if t.origin else "unknown"
    console.say(f"{t.deployment}: start-up timeline, minutes after {t.origin_label} ({origin})")
    console.table(
        ("node", "role", "instance", "launch", "Ready", "join min"),
        ((s.name, s.role, s.where, rel(s.phases[0].start), rel(s.phases[0].end), mins(s.phases[0].minutes)) for s in t.nodes),
        title="GPU nodes",
    )
    precompiled = any(s.phase("DeepGEMM precompile") for s in t.pods)
    columns = (
        "image pull",
        "weights staging",
        *(("DeepGEMM precompile",) if precompiled else ()),
        "model load",
        "JIT, CUDA graphs, warm-up",
        "router registration",
    )
    console.table(
        ("pod", "role", "node", *[f"{c} min" for c in columns], "done"),
        ((s.name, s.role, s.where, *(mins(p.minutes if (p := s.phase(c)) else None) for c in columns), rel(s.end)) for s in t.pods),
        title="Serving pods",
    )
    console.table(
        ("phase", "planned min", "measured min (worst)", "worst", "state"),
        ((b.phase, mins(b.planned_minutes), mins(b.measured_minutes), b.worst or "-", b.state) for b in t.budget),
        title="Against the plan's start-up model (pdkit plan, Estimates)",
        status_column=4,
    )
    if t.critical_path:
        console.say("Where the minutes went (the last leader to be served):")
        for p in t.critical_path:
            console.say(
                f"  {rel(p.start):>7} -> {rel(p.end):>7}  {mins(p.minutes):>5} min  {p.name}" + (f"  ({p.detail})" if p.detail else "")
            )
    for warning in t.warnings:
        console.say(f"WARN: {warning}")
    if t.goal_met is None:
        waiting = ", ".join(t.missing_workers) or "the servers"
        console.say(f"No first token yet: the router has not registered {waiting}.")
        console.say(f"Next: capture again in a few minutes: {pdkit_command(args, 'timeline --capture DIR')}")
    else:
        verdict = "met" if t.goal_met else "MISSED"
        console.say(f"First token possible at +{t.first_token_minutes:.1f} min: the {t.goal_minutes:g}-minute goal was {verdict}.")
        over = [b.phase for b in t.budget if b.state == "OVER"]
        if over:
            console.say("Over the plan's budget: " + ", ".join(over) + ". See runbooks/06-observability.md, Start-up timeline.")
