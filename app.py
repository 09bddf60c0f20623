#!/usr/bin/env python3
"""CDK entry point: load the deployment profile (-c profile=NAME|PATH), derive the plan, build the stacks."""

import sys

import aws_cdk as cdk

from pdkit import deployment
from pdkit.errors import KitError
from stacks.kit import build_kit


def main() -> None:
    app = cdk.App()
    try:
        the_plan = deployment.load(app.node.try_get_context("profile"))
    except KitError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    build_kit(app, the_plan)
    app.synth()


if __name__ == "__main__":
    main()
