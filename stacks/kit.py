"""Build every stack of the kit from a plan. app.py and the tests both call this."""

from __future__ import annotations

import aws_cdk as cdk

from pdkit.plan import Plan
from stacks.network_stack import NetworkStack
from stacks.policy import CdkProviderLintConfig, attach


def build_kit(app: cdk.App, plan: Plan, *, with_policy: bool = True) -> dict[str, cdk.Stack]:
    env = cdk.Environment(account=plan.account, region=plan.region)
    cdk.Tags.of(app).add("pdkit:deployment", plan.name)
    stacks: dict[str, cdk.Stack] = {
        "network": NetworkStack(
            app, plan.stack_names["network"], plan=plan, env=env, description=f"{plan.name}: VPC, NAT, endpoints, flow logs"
        ),
    }
    cdk.Aspects.of(app).add(CdkProviderLintConfig())
    if with_policy:
        attach(app)
    return stacks
