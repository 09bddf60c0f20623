"""`pdkit status`: node groups, nodes, GPUs and EFA devices, LeaderWorkerSet groups and the router, against the plan."""

from __future__ import annotations

import argparse

from pdkit.cli.commands import summary


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("status", parents=[common], help=summary("status"))
    p.add_argument("--kube-context", metavar="NAME", help="kubeconfig context (default: the current one; KUBECONFIG is honoured)")
    p.add_argument(
        "--metrics", action="store_true", help="add the dashboards' headline figures from CloudWatch (needs cloudwatch:GetMetricData)"
    )
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pdkit import console
    from pdkit.cli.context import in_context, load_plan, pdkit_command
    from pdkit.ops import aws_errors, capacity, kube, status
    from pdkit.ops.aws_clients import Aws

    plan = load_plan(args.profile)
    aws = Aws.for_args(args, plan)
    with aws_errors.translated(region=aws.region):
        plan = capacity.with_bought_block(plan, aws)  # capacity.purchase: the block the stack bought
        report = status.gather(plan, aws, now=capacity.now(), kube=lambda: kube.connect(args.kube_context))
        if args.metrics:
            status.add_metrics(report, plan, aws, now=capacity.now())
    access = kube.access_path(plan, aws.region) if report.kube_error else []
    if args.output == "json":
        console.print_json(report.to_dict() | {"access_path": access})
        return 0 if report.ok else 1
    console.table(
        ("area", "item", "state", "detail"),
        ((r.area, r.item, r.state, r.detail) for r in report.rows),
        title=f"{plan.name}: {plan.prefill.replicas} prefill x {plan.prefill.nodes_per_replica} + {plan.decode.replicas} decode x {plan.decode.nodes_per_replica} nodes",
        status_column=2,
    )
    if report.kube_error:
        console.say(f"Kubernetes: {report.kube_error}")
        console.say(
            "The endpoint is private; open the access path through the SSM-managed host (its id is the cluster stack output AccessHostId):"
        )
        for step, command in enumerate(access, 1):
            console.say(f"  {step}. {command}")
        return 1
    if report.ok:
        console.say(f"Everything matches the plan. Next: {pdkit_command(args, 'smoke')}")
        return 0
    console.say(
        in_context(
            args, "Not everything is ready yet (WAIT) or matches the plan (FAIL); run `pdkit status` again, or fix the FAIL rows first."
        )
    )
    return 1
