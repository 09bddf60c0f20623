"""The `pdkit` operator CLI. Starts fast: never imports aws_cdk, and boto3 only inside commands that call AWS."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from pdkit.errors import KitError

Handler = Callable[[argparse.Namespace], int]


def _cmd_plan(args: argparse.Namespace) -> int:
    from pdkit import plan, plan_report, profile_files

    profile, path = profile_files.load(args.profile)
    the_plan = plan.build(profile, profile_path=path)
    print(plan_report.as_json(the_plan) if args.output == "json" else plan_report.as_text(the_plan))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pdkit",
        description="Operate a prefill/decode-disaggregated MoE deployment on an EC2 Capacity Block with EKS and EFA.",
        epilog="Deployment profile: --profile NAME|PATH (default: cdk.json context 'profile'). AWS credentials: --aws-profile or AWS_PROFILE.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--profile", metavar="NAME|PATH", help="deployment profile: a name in config/ or a YAML path")
    common.add_argument("--aws-profile", metavar="NAME", help="AWS credentials profile (default: AWS_PROFILE / the SDK chain)")
    common.add_argument("--region", help="AWS region (default: the deployment profile's aws.region)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("plan", parents=[common], help="show what the profile deploys: nodes, parallelism, memory, messages per token")
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(handler=_cmd_plan)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KitError as err:
        print(f"pdkit: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pdkit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
