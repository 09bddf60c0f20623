"""The serving and infrastructure dashboards (bodies rendered by pdkit/render/observability/dashboards.py)."""

from __future__ import annotations

import json

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from constructs import Construct

from pdkit.model.plan import Plan
from pdkit.render.observability import dashboards


class Dashboards(Construct):
    def __init__(self, scope: Construct, id_: str, *, plan: Plan) -> None:
        super().__init__(scope, id_)
        stack = cdk.Stack.of(self)
        alarm_arn_prefix = f"arn:{stack.partition}:cloudwatch:{plan.region}:{stack.account}:alarm:"
        names = dashboards.dashboard_names(plan)
        bodies = {
            "serving": dashboards.serving(plan, alarm_arn_prefix=alarm_arn_prefix),
            "infrastructure": dashboards.infrastructure(plan, alarm_arn_prefix=alarm_arn_prefix),
        }
        self.dashboards = {
            kind: cw.CfnDashboard(self, kind.capitalize(), dashboard_name=names[kind], dashboard_body=json.dumps(body))
            for kind, body in bodies.items()
        }
        for kind, name in names.items():
            cdk.CfnOutput(
                stack,
                f"{kind.capitalize()}Dashboard",
                value=f"https://{plan.region}.console.aws.amazon.com/cloudwatch/home?region={plan.region}#dashboards/dashboard/{name}",
            )
