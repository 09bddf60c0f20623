"""`pdkit topology`: which GPU nodes share a bottom network node, how far apart they are, and where each role landed."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pdkit.topology import GpuNode


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("topology", parents=[common], help="network placement of the running GPU nodes per role (DescribeInstanceTopology)")
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pdkit import aws_errors, console, topology
    from pdkit.aws_clients import Aws
    from pdkit.context import in_context, load_plan
    from pdkit.errors import KitError

    plan = load_plan(args.profile)
    aws = Aws.for_args(args, plan)
    with aws_errors.translated(region=aws.region):
        nodes = topology.find_gpu_nodes(aws.ec2, plan)
        if not nodes:
            groups = ", ".join(r.node_group_name for r in plan.roles.values())
            raise KitError(
                in_context(
                    args,
                    f"no running GPU nodes in node groups {groups} of cluster {plan.cluster_name}. "
                    "Fix: once the block is active, `pdkit nodes up`; before launch, `pdkit preflight` shows the reservation's topology",
                )
            )
        nodes = topology.with_topology(aws.ec2, nodes)
    report = topology.analyse(plan, nodes)
    if args.output == "json":
        console.print_json(report.to_dict())
        return 0
    console.table(
        ("instance", "role", "state", "AZ", "network nodes (top > bottom)"),
        ((n.instance_id, n.role, n.state, n.availability_zone, " > ".join(n.network_nodes) or "not reported") for n in nodes),
        title=f"GPU nodes of {plan.cluster_name}",
    )
    console.table(
        ("bottom network node", "instances (role)"),
        ((bottom, ", ".join(f"{i} ({_role(nodes, i)})" for i in ids)) for bottom, ids in report.groups.items()),
        title="Grouped by bottom network node (same node = closest)",
    )
    ids = [n.instance_id for n in nodes]
    console.table(
        ("network nodes between", *ids),
        ((a, *("-" if a == b else _hops(report.hops[a][b]) for b in ids)) for a in ids),
        title="Network nodes on the path between instances (1 = same bottom node)",
    )
    for warning in report.warnings:
        console.say(f"WARN: {warning}")
    if report.decode_together:
        console.say("Decode nodes share their bottom network node: the EP all-to-all crosses a single network node.")
    return 0


def _role(nodes: list[GpuNode], instance_id: str) -> str:
    return next((n.role for n in nodes if n.instance_id == instance_id), "?")


def _hops(value: int | None) -> str:
    return "?" if value is None else str(value)
