"""The `pdkit` operator CLI. Starts fast: `pdkit --help` imports no command module (pdkit.cli.commands.COMMANDS),
a command imports only its own module, never aws_cdk, and boto3 only inside commands that call AWS."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from pdkit.cli import commands
from pdkit.errors import Interrupted, KitError

Handler = Callable[[argparse.Namespace], int]


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`: only the command it names is imported and registered in full. Without `argv`
    (documentation and tests that walk every command) every command is."""
    parser = argparse.ArgumentParser(
        prog="pdkit",
        description="Operate a prefill/decode-disaggregated MoE deployment on an EC2 Capacity Block with EKS and EFA.",
        epilog="Deployment profile: --profile NAME|PATH (default: cdk.json context 'profile'). AWS credentials: --aws-profile or AWS_PROFILE.",
    )
    # Accepted before or after the command (`pdkit --profile X plan` == `pdkit plan --profile X`): the
    # top level holds the defaults, and the commands' copies only set what is given to them.
    common = argparse.ArgumentParser(add_help=False)
    for target, default in ((parser, None), (common, argparse.SUPPRESS)):
        target.add_argument(
            "--profile",
            metavar="NAME|PATH",
            default=default,
            help="deployment profile: a name in deployments/ (yours, from pdkit init) or config/, or a YAML path",
        )
        target.add_argument(
            "--aws-profile", metavar="NAME", default=default, help="AWS credentials profile (default: AWS_PROFILE / the SDK chain)"
        )
        target.add_argument("--region", default=default, help="AWS region (default: the deployment profile's aws.region)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    if argv is None:
        commands.register_every(sub, common)
    else:
        commands.register(sub, common, argv)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KitError as err:
        if isinstance(err, Interrupted):
            print(f"pdkit: interrupted: {err}", file=sys.stderr)
            return 130
        # A fix that names a pdkit command repeats this invocation's --profile/--aws-profile/--region.
        from pdkit.cli.context import in_context

        print(f"pdkit: error: {in_context(args, str(err))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pdkit: interrupted", file=sys.stderr)
        return 130
    except EOFError:
        # Ctrl-D or a closed stdin at a prompt (console.ask). Every prompt of the kit comes before the action it guards.
        print()  # the prompt's line on stdout ends here, so the error starts on its own line
        print(
            "pdkit: error: input ended at the prompt (Ctrl-D or a closed stdin) before an answer; nothing was done. "
            "Fix: run the command again and type the answer",
            file=sys.stderr,
        )
        return 2
    except BrokenPipeError:
        # The reader of stdout went away (`pdkit preflight --output json | head`). As the Python docs advise, point
        # stdout at devnull so the interpreter's own flush at exit cannot raise again, and exit non-zero
        # (https://docs.python.org/3/library/signal.html#note-on-sigpipe).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        print("pdkit: error: standard output closed before the command finished writing (a pipe such as `| head`)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
