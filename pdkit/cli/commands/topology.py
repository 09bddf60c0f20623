"""`pdkit topology`: which GPU nodes share a bottom network node, how far apart they are, and where each role landed."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from pdkit.cli.commands import summary

if TYPE_CHECKING:
    from pdkit.model.placement import Placement
    from pdkit.model.plan import Plan
    from pdkit.model.topology import GpuNode


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("topology", parents=[common], help=summary("topology"))
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.add_argument(
        "--assign",
        action="store_true",
        help="label each GPU node pdkit/placed-role from the topology (the closest instances serve decode); the serving pods prefer it",
    )
    p.add_argument("--kube-context", metavar="NAME", help="kubeconfig context for --assign (default: the current one)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pdkit import console
    from pdkit.cli.context import in_context, load_plan
    from pdkit.errors import KitError
    from pdkit.model import placement, topology
    from pdkit.ops import aws_errors
    from pdkit.ops.aws_clients import Aws

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
    chosen = placement.assign(plan, nodes)
    applied = _apply(args, plan, chosen) if args.assign else []
    if args.output == "json":
        console.print_json(report.to_dict() | {"placement": chosen.to_dict() | {"applied": applied}})
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
    _say_placement(args, chosen, applied)
    return 0


def _apply(args: argparse.Namespace, plan: Plan, chosen: Placement) -> list[str]:
    """Label the Kubernetes nodes with their placed role; returns one line per node labelled."""
    from pdkit.cli.context import in_context
    from pdkit.errors import KitError
    from pdkit.model.placement import PLACED_ROLE_LABEL
    from pdkit.ops import kube

    cluster = kube.connect(args.kube_context)
    by_instance = {n.instance_id: n.name for n in cluster.gpu_nodes() if n.instance_id}
    missing = [i for ids in chosen.roles.values() for i in ids if i not in by_instance]
    if missing:
        raise KitError(
            in_context(
                args,
                f"{', '.join(missing)} not registered in Kubernetes yet. Fix: wait for `pdkit status` to show every node Ready, then run this again",
            )
        )
    lines = []
    for role, ids in chosen.roles.items():
        for instance_id in ids:
            cluster.label_node(by_instance[instance_id], {PLACED_ROLE_LABEL: role})
            lines.append(f"{by_instance[instance_id]} ({instance_id}): {PLACED_ROLE_LABEL}={role}")
    return lines


def _say_placement(args: argparse.Namespace, chosen: Placement, applied: list[str]) -> None:
    from pdkit import console
    from pdkit.cli.context import in_context

    for warning in chosen.warnings:
        console.say(f"WARN: {warning}")
    roles = "; ".join(f"{role}: {', '.join(ids) or 'none'}" for role, ids in chosen.roles.items())
    moved = f" ({', '.join(chosen.moved)} change role from their node group)" if chosen.moved else ""
    console.say(f"Placement from the topology: {roles}{moved}.")
    if applied:
        console.say("Labelled: " + "; ".join(applied))
        console.say(
            "Pods already running keep their node (the role is preferred, not required). "
            + in_context(args, "Next: `pdkit status` shows the placement; a pod on the wrong node moves when it restarts")
        )
    else:
        console.say(in_context(args, "Next: `pdkit topology --assign` labels the nodes; the serving pods prefer the labelled role"))


def _role(nodes: list[GpuNode], instance_id: str) -> str:
    return next((n.role for n in nodes if n.instance_id == instance_id), "?")


def _hops(value: int | None) -> str:
    return "?" if value is None else str(value)
