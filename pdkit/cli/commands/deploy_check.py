"""`pdkit deploy-check`: run by `make deploy` before `cdk deploy`; refuses a change that would roll GPU nodes in a block."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from pdkit.cli.commands import summary

if TYPE_CHECKING:
    from pdkit.model.plan import PurchasePlan
    from pdkit.ops.aws_clients import Aws


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "deploy-check",
        parents=[common],
        help=summary("deploy-check"),
    )
    p.add_argument("--cdk-out", type=Path, default=Path("cdk.out"), metavar="DIR", help="the synthesized cloud assembly (default cdk.out)")
    p.add_argument(
        "--yes",
        action="store_true",
        help="with capacity.purchase: buy without typing the fee (for CI; the fee must still match the profile)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pdkit import console
    from pdkit.cli.context import load_plan
    from pdkit.ops import addon_versions, aws_errors, deploy_check
    from pdkit.ops.aws_clients import Aws

    plan = load_plan(args.profile)
    aws = Aws.for_args(args, plan)
    addon_versions.gate(plan, aws)  # before anything is deployed: a pin EKS does not list fails the cluster stack's create
    stack = plan.stack_names["capacity"]
    with aws_errors.translated(region=aws.region):
        verdict = deploy_check.check(
            plan, cdk_out=args.cdk_out, cloudformation=aws.client("cloudformation"), eks=aws.eks, ssm=aws.client("ssm")
        )
    if verdict is not None and verdict.earlier_purchase is not None:
        raise deploy_check.earlier_purchase_refusal(plan, verdict.earlier_purchase, profile_ref=args.profile)
    if verdict is None:
        console.say(f"deploy check: {stack} is not deployed yet; its node groups are created at desired 0, nothing can roll.")
    elif verdict.on_demand:
        what = "; ".join(verdict.changes) or "no GPU launch template or node group change"
        console.say(
            f"deploy check: {what}. On-demand node groups roll as EKS always does, replacements launched first, "
            "so nothing is refused (the rule guards a Capacity Block, which has no spare instance)."
        )
    elif verdict.refused:
        raise deploy_check.refusal(verdict, profile_ref=args.profile)
    elif verdict.changes:
        console.say(f"deploy check: {'; '.join(verdict.changes)}. The GPU node groups are at 0, so EKS updates them without instances.")
    else:
        console.say(f"deploy check: {stack} leaves the GPU launch templates and node groups as they are; nothing rolls.")
    if plan.purchase is not None:
        from pdkit.ops import capacity

        with aws_errors.translated(region=aws.region):
            pending = deploy_check.purchase_pending(plan, cdk_out=args.cdk_out, cloudformation=aws.client("cloudformation"))
            # A first create that bought and then rolled back left the block, tagged, and no stack: the purchase
            # stack's Create adopts it, so there is no fee to type (and its offering, sold, is not listed any more).
            adopted = capacity.tagged_reservation_id(aws.ec2, plan) if pending else None
            if adopted:
                console.say(
                    f"deploy check: {adopted} already carries this purchase's tag {plan.purchase.purchase_id} (bought by an earlier "
                    f"deploy); the {plan.purchase_stack_name} stack adopts it and this deploy buys nothing."
                )
            elif pending:
                _confirm_purchase(args, plan.purchase, aws)
            else:
                console.say(f"deploy check: {plan.purchase_stack_name} already holds the block it bought; this deploy buys nothing.")
    return 0


def _confirm_purchase(args: argparse.Namespace, buy: PurchasePlan, aws: Aws) -> None:
    """Show what `cdk deploy` is about to buy and have the operator type the fee (pdkit.cli.fee_prompt), before anything is deployed."""
    from pdkit import console
    from pdkit.cli import fee_prompt
    from pdkit.errors import KitError
    from pdkit.functions import capacity_purchase
    from pdkit.ops import capacity

    props = buy.resource_properties()
    offer = capacity_purchase.find_offer(aws.ec2, props)
    if offer is None:
        raise KitError(
            f"capacity.purchase.offering_id {buy.offering_id} is not offered any more for {capacity_purchase.query(props).describe()} "
            f"in {aws.region}; nothing was deployed. Fix: `pdkit capacity offerings`, then put a current offering id and its fee in capacity.purchase"
        )
    problems = capacity_purchase.mismatches(offer, props)
    if problems:
        raise KitError(
            f"offering {offer.id} differs from capacity.purchase ({'; '.join(problems)}); nothing was deployed. "
            "Fix: check `pdkit capacity offerings` and set capacity.purchase to the fee and block you mean to pay for"
        )
    console.say(f"deploy check: `cdk deploy` will buy Capacity Block offering {offer.id} (capacity.purchase):")
    console.say(
        f"  {offer.instance_count} x {offer.instance_type} in {offer.availability_zone}, "
        f"{console.when(offer.start)} -> {console.when(offer.end)} ({offer.hours} h, {offer.instance_count * offer.hours} instance-hours)"
    )
    console.say(f"  Upfront fee: {capacity.money(offer.upfront_fee, offer.currency)}, charged at purchase, cannot be cancelled.")
    fee_prompt.confirm(
        offer.upfront_fee, offer.currency, assume_yes=args.yes, what=f"{offer.instance_count} x {offer.instance_type} for {offer.hours} h"
    )
