"""The two small functions behind the dashboards and alarms, each on a one-minute schedule:
the block clock (pdkit/functions/block_clock.py) and the serving figures (pdkit/functions/serving_metrics.py).

One minute for both, so the serving alarms can gate on the block clock at the same 60 s period.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from pdkit.model.plan import Plan
from pdkit.render.observability import catalog as c
from pdkit.render.observability.alarms import Purpose, function_name
from stacks.kit_function import KitFunction
from stacks.policy import acknowledge

EVERY = cdk.Duration.minutes(1)
SHARED = ("render/observability/catalog.py",)
BLOCK_CLOCK_MODULES = (*SHARED, "model/reservation.py", "functions/block_clock.py")
SERVING_METRICS_MODULES = (*SHARED, "render/observability/figures.py", "functions/serving_metrics.py")
PUT_METRIC_DATA = "cloudwatch:PutMetricData has no resource-level permissions; the condition limits this function to its own namespace"


def _named(function: KitFunction, plan: Plan, purpose: Purpose) -> None:
    """Fixed names: the pipeline alarms and the runbook refer to them."""
    cfn = function.function.node.default_child
    assert isinstance(cfn, lambda_.CfnFunction)
    cfn.function_name = function_name(plan, purpose)


def _put_metrics(namespace: str) -> iam.PolicyStatement:
    return iam.PolicyStatement(
        actions=["cloudwatch:PutMetricData"], resources=["*"], conditions={"StringEquals": {"cloudwatch:namespace": namespace}}
    )


def _every_minute(scope: Construct, function: KitFunction, plan: Plan, purpose: Purpose, description: str) -> events.Rule:
    return function.rule(
        scope,
        "Schedule",
        rule_name=f"{function_name(plan, purpose)}-schedule",
        description=description,
        schedule=events.Schedule.rate(EVERY),
        # A missed minute is superseded by the next one: no retries.
        retry_attempts=0,
    )


class BlockClock(Construct):
    def __init__(self, scope: Construct, id_: str, *, plan: Plan, vpc: ec2.IVpc, key: kms.IKey, log_retention_days: int) -> None:
        super().__init__(scope, id_)
        self.function = KitFunction(
            self,
            "Function",
            handler="pdkit.functions.block_clock.handler",
            modules=BLOCK_CLOCK_MODULES,
            description=f"{plan.name}: minutes left in Capacity Block {plan.reservation_label}, every minute",
            vpc=vpc,
            key=key,
            log_retention_days=log_retention_days,
            environment={"CLUSTER_NAME": plan.cluster_name, "RESERVATION_ID": plan.reservation_id},
            timeout_minutes=1,
            reserved_concurrency=plan.function_concurrency.per_function,
        )
        _named(self.function, plan, "block-clock")
        policy = self.function.allow(
            "Read",
            iam.PolicyStatement(actions=["ec2:DescribeCapacityReservations"], resources=["*"]),
            _put_metrics(c.BLOCK_NAMESPACE),
        )
        acknowledge(
            policy,
            {
                "AwsSolutions-IAM5[Resource::*]": "ec2:DescribeCapacityReservations supports no resource-level permissions (read only); "
                + PUT_METRIC_DATA,
            },
        )
        self.schedule = _every_minute(self, self.function, plan, "block-clock", f"every minute: {plan.reservation_id} clock to CloudWatch")


class ServingMetrics(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        plan: Plan,
        vpc: ec2.IVpc,
        key: kms.IKey,
        log_retention_days: int,
        workspace_arn: str,
        workspace_endpoint: str,
    ) -> None:
        super().__init__(scope, id_)
        self.function = KitFunction(
            self,
            "Function",
            handler="pdkit.functions.serving_metrics.handler",
            modules=SERVING_METRICS_MODULES,
            description=f"{plan.name}: serving figures from Prometheus to CloudWatch, every minute",
            vpc=vpc,
            key=key,
            log_retention_days=log_retention_days,
            environment={
                "CLUSTER_NAME": plan.cluster_name,
                "ROLES": ",".join(plan.roles),
                "WORKSPACE_ENDPOINT": workspace_endpoint,
            },
            timeout_minutes=1,
            reserved_concurrency=plan.function_concurrency.per_function,
        )
        _named(self.function, plan, "serving-metrics")
        policy = self.function.allow(
            "Query",
            iam.PolicyStatement(actions=["aps:QueryMetrics"], resources=[workspace_arn]),
            _put_metrics(c.SERVING_NAMESPACE),
        )
        acknowledge(policy, {"AwsSolutions-IAM5[Resource::*]": PUT_METRIC_DATA})
        self.schedule = _every_minute(self, self.function, plan, "serving-metrics", "every minute: serving figures (PromQL) to CloudWatch")
