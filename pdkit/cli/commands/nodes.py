"""`pdkit nodes up|down`: size the GPU node groups to the plan (or to 0) and wait until the instances follow."""

from __future__ import annotations

import argparse

from pdkit.cli.commands import summary


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("nodes", help=summary("nodes"))
    actions = p.add_subparsers(dest="nodes_command", metavar="ACTION", required=True)
    for name, text in (
        ("up", "scale each GPU node group to the plan's node count (on a block: refused unless it is active)"),
        ("down", "scale the GPU node groups to 0 (a block stays paid until its end; on-demand billing stops)"),
    ):
        a = actions.add_parser(name, parents=[common], help=text)
        a.add_argument("--no-wait", action="store_true", help="return after EKS accepted the new sizes")
        a.add_argument("--timeout", type=float, default=30.0, metavar="MINUTES", help="how long to wait for instances (default 30)")
        a.add_argument(
            "--no-serving",
            action="store_true",
            help="leave the DisaggregatedSet's roles alone (default: up restores the plan's replicas, down scales them to 0 first)",
        )
        a.add_argument("--kube-context", metavar="NAME", help="kubeconfig context for the DisaggregatedSet (default: the current one)")
        a.set_defaults(handler=run, up=name == "up")


def run(args: argparse.Namespace) -> int:
    from pdkit import console
    from pdkit.cli.context import in_context, load_plan, pdkit_command
    from pdkit.errors import KitError
    from pdkit.ops import aws_errors, capacity, kube, nodes
    from pdkit.ops.aws_clients import Aws

    plan = load_plan(args.profile)
    aws = Aws.for_args(args, plan)
    polls = max(1, int(args.timeout * 60 / nodes.POLL_SECONDS))
    verb = "up" if args.up else "down"
    with aws_errors.translated(region=aws.region):
        block: str | None = None
        if nodes.needs_block(plan):
            bought = capacity.with_bought_block(plan, aws)
            block = None if bought.reservation_is_placeholder else bought.reservation_id
        if args.up and nodes.needs_block(plan):
            reservation_id = capacity.require_reservation(bought)
            res = capacity.describe_reservation(aws.ec2, reservation_id)
            nodes.require_block_for_up(res, now=capacity.now(), drain_minutes=plan.drain_lead_minutes, need=plan.instance_count)
        # Marked before the groups change: a lifecycle check running meanwhile then leaves them alone.
        warning = nodes.mark_block(aws.ec2, block, up=args.up, now=capacity.now()) if block else None
        if warning:
            console.say(warning, stderr=True)
        targets = {name: nodes.target(role, up=args.up) for name, role in plan.roles.items()}
        if not args.up and not args.no_serving:
            # Pods first: with the LeaderWorkerSets at 0 no disruption budget can hold the node drain.
            for line in nodes.scale_serving(plan, lambda: kube.connect(args.kube_context), up=False):
                console.say(line)
        updates: dict[str, str] = {}
        for name, role in plan.roles.items():
            current = nodes.Scaling.of(nodes.describe(aws.eks, plan, role).get("scalingConfig", {}))
            if current == targets[name]:
                console.say(f"{role.node_group_name}: already min {current.min} / desired {current.desired} / max {current.max}")
                continue
            updates[name] = nodes.request(aws.eks, plan, role, targets[name])
            console.say(
                f"{role.node_group_name}: desired {current.desired} -> {targets[name].desired} (min {targets[name].min}, max {targets[name].max}); "
                f"EKS update {updates[name]}"
            )
        with console.progress() as bar:
            for name, update_id in updates.items():
                task = bar.add_task(f"{plan.roles[name].node_group_name}: EKS applies the new size", total=1)
                nodes.wait_update(aws.eks, plan, plan.roles[name], update_id, polls=polls)
                bar.update(task, completed=1)
        if args.up and not args.no_serving and args.no_wait:
            # No wait, so no placement: pods pend until the nodes join and prefer their node group's role.
            for line in nodes.scale_serving(plan, lambda: kube.connect(args.kube_context), up=True):
                console.say(line)
        if args.no_wait:
            console.say(f"Sizes accepted; instances follow in minutes. Watch: {pdkit_command(args, 'status')}")
            return 0
        with console.progress() as bar:
            tasks = {
                name: bar.add_task(f"{plan.roles[name].node_group_name}: instances running", total=max(t.desired, 1))
                for name, t in targets.items()
            }

            def show(name: str, running: int, desired: int) -> None:
                bar.update(tasks[name], completed=running if desired else (0 if running else 1), total=max(desired, 1))

            try:
                nodes.wait_instances(aws.ec2, plan, targets, polls=polls, report=show)
            except TimeoutError as stuck:
                issues = [
                    f"{plan.roles[n].node_group_name}: {i}"
                    for n in targets
                    for i in nodes.health_issues(nodes.describe(aws.eks, plan, plan.roles[n]))
                ]
                detail = "; ".join(issues) or f"instance states {stuck.args[0]}"
                raise KitError(
                    in_context(
                        args,
                        f"after {args.timeout:g} min the node groups have not reached their sizes ({detail}). "
                        "Fix: if it is InsufficientInstanceCapacity with a placement group, set capacity.placement_group: none and follow "
                        "runbooks/01-cluster.md (nodes down, make deploy, nodes up); " + nodes.launch_hint(plan),
                    )
                ) from None
        if args.up and not args.no_serving:
            # Labels first: a pod already scheduled keeps its node, so serving comes back after the placement.
            for line in nodes.place_nodes(aws.ec2, plan, lambda: kube.connect(args.kube_context), polls=nodes.JOIN_POLLS):
                console.say(line)
            for line in nodes.scale_serving(plan, lambda: kube.connect(args.kube_context), up=True):
                console.say(line)
    if args.up:
        console.say(
            in_context(
                args,
                f"GPU node groups are {verb}: {plan.instance_count} instances running. "
                f"Next: {pdkit_command(args, 'status')} (the nodes' placement and serving start-up)",
            )
        )
    else:
        console.say(
            in_context(
                args,
                "GPU node groups are at 0. " + nodes.down_note(plan) + " `pdkit nodes up` brings them back.",
            )
        )
    return 0
