"""`pdkit init`: a deployment profile of one's own, copied from a shipped one into deployments/ (not tracked)."""

from __future__ import annotations

import argparse

from pdkit.cli.commands import summary


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("init", help=summary("init"))
    p.add_argument("name", help="the deployment's name (3-32 lowercase letters, digits, dashes): stack and resource names start with it")
    p.add_argument("--from", dest="source", required=True, metavar="PROFILE", help="a shipped profile in config/ to start from")
    p.add_argument("--account", help="your 12-digit AWS account id (deploys then refuse other accounts)")
    p.add_argument("--region", help="the region of your Capacity Block (default: the shipped profile's)")
    p.add_argument("--az", help="the block's Availability Zone (from `pdkit capacity offerings`)")
    p.add_argument(
        "--admin-arn", action="append", default=[], metavar="ARN", help="an IAM role or user ARN that administers the cluster (repeatable)"
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pdkit import console, deployment
    from pdkit.errors import KitError
    from pdkit.model import profile_files
    from pdkit.model.profile_copy import Own, copied

    shipped = profile_files.available_profiles()
    if args.source not in shipped:
        raise KitError(f"--from {args.source!r} is not a shipped profile. Fix: use one of {', '.join(shipped)}")
    if args.name in shipped:
        raise KitError(
            f"{args.name!r} is the name of a shipped profile; yours would hide it. Fix: choose another name, e.g. {args.name}-mine"
        )
    target = profile_files.OWN_DIR / f"{args.name}.yaml"
    if target.exists():
        raise KitError(f"{target} exists already; it is not overwritten. Fix: edit it, or choose another name")
    own = Own(name=args.name, account=args.account, region=args.region, availability_zone=args.az, admin_principal_arns=args.admin_arn)
    text = copied((profile_files.CONFIG_DIR / f"{args.source}.yaml").read_text(), own, source=args.source)
    # The copy must be a deployable profile before it is written: the same checks as every command.
    deployment.build(profile_files.parse_text(text, source=str(target)), profile_path=str(target))
    target.parent.mkdir(exist_ok=True)
    target.write_text(text)
    console.say(f"Wrote {target} from config/{args.source}.yaml. Use it with --profile {args.name} (and make ... PROFILE={args.name}).")
    console.say(f"Next: pdkit plan --profile {args.name}, then pdkit capacity offerings --profile {args.name}")
    return 0
