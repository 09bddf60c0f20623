"""`pdkit deploy-check`: run by `make deploy` before `cdk deploy`; refuses a change that would roll GPU nodes in a block."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "deploy-check",
        parents=[common],
        help="refuse a deploy that changes the GPU launch template or node groups while they run nodes (make deploy runs it)",
    )
    p.add_argument("--cdk-out", type=Path, default=Path("cdk.out"), metavar="DIR", help="the synthesized cloud assembly (default cdk.out)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pdkit import aws_errors, console, deploy_check
    from pdkit.aws_clients import Aws
    from pdkit.context import load_plan

    plan = load_plan(args.profile)
    aws = Aws.for_args(args, plan)
    stack = plan.stack_names["capacity"]
    with aws_errors.translated(region=aws.region):
        verdict = deploy_check.check(
            plan, cdk_out=args.cdk_out, cloudformation=aws.client("cloudformation"), eks=aws.eks, ssm=aws.client("ssm")
        )
    if verdict is None:
        console.say(f"deploy check: {stack} is not deployed yet; its node groups are created at desired 0, nothing can roll.")
    elif verdict.refused:
        raise deploy_check.refusal(verdict, profile_ref=args.profile)
    elif verdict.changes:
        console.say(f"deploy check: {'; '.join(verdict.changes)}. The GPU node groups are at 0, so EKS updates them without instances.")
    else:
        console.say(f"deploy check: {stack} leaves the GPU launch templates and node groups as they are; nothing rolls.")
    return 0
