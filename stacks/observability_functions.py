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


class MinuteFunction(Construct):
    """A KitFunction with the fixed name the pipeline alarms and the runbook use (function_name), allowed to read
    what `reads` grants and to publish into its own CloudWatch namespace, run every minute."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        plan: Plan,
        purpose: Purpose,
        module: str,
        modules: tuple[str, ...],
        what: str,
        environment: dict[str, str],
        reads: tuple[str, iam.PolicyStatement],
        namespace: str,
        acknowledgment: str,
        schedule: str,
        vpc: ec2.IVpc,
        key: kms.IKey,
        log_retention_days: int,
    ) -> None:
        super().__init__(scope, id_)
        self.function = KitFunction(
            self,
            "Function",
            handler=f"pdkit.functions.{module}.handler",
            modules=modules,
            description=f"{plan.name}: {what}",
            vpc=vpc,
            key=key,
            log_retention_days=log_retention_days,
            environment={"CLUSTER_NAME": plan.cluster_name, **environment},
            timeout_minutes=1,
            reserved_concurrency=plan.function_concurrency.per_function,
        )
        cfn = self.function.function.node.default_child
        assert isinstance(cfn, lambda_.CfnFunction)
        cfn.function_name = function_name(plan, purpose)
        publish = iam.PolicyStatement(
            actions=["cloudwatch:PutMetricData"], resources=["*"], conditions={"StringEquals": {"cloudwatch:namespace": namespace}}
        )
        acknowledge(self.function.allow(reads[0], reads[1], publish), {"AwsSolutions-IAM5[Resource::*]": acknowledgment})
        self.schedule = self.function.rule(
            self,
            "Schedule",
            rule_name=f"{function_name(plan, purpose)}-schedule",
            description=schedule,
            schedule=events.Schedule.rate(EVERY),
            # A missed minute is superseded by the next one: no retries.
            retry_attempts=0,
        )


def block_clock(scope: Construct, *, plan: Plan, vpc: ec2.IVpc, key: kms.IKey, log_retention_days: int) -> MinuteFunction:
    return MinuteFunction(
        scope,
        "BlockClock",
        plan=plan,
        purpose="block-clock",
        module="block_clock",
        modules=BLOCK_CLOCK_MODULES,
        what=f"minutes left in Capacity Block {plan.reservation_label}, every minute",
        environment={"RESERVATION_ID": plan.reservation_id},
        reads=("Read", iam.PolicyStatement(actions=["ec2:DescribeCapacityReservations"], resources=["*"])),
        namespace=c.BLOCK_NAMESPACE,
        acknowledgment="ec2:DescribeCapacityReservations supports no resource-level permissions (read only); " + PUT_METRIC_DATA,
        schedule=f"every minute: {plan.reservation_id} clock to CloudWatch",
        vpc=vpc,
        key=key,
        log_retention_days=log_retention_days,
    )


def serving_metrics(
    scope: Construct, *, plan: Plan, workspace_arn: str, workspace_endpoint: str, vpc: ec2.IVpc, key: kms.IKey, log_retention_days: int
) -> MinuteFunction:
    return MinuteFunction(
        scope,
        "ServingMetrics",
        plan=plan,
        purpose="serving-metrics",
        module="serving_metrics",
        modules=SERVING_METRICS_MODULES,
        what="serving figures from Prometheus to CloudWatch, every minute",
        environment={"ROLES": ",".join(plan.roles), "WORKSPACE_ENDPOINT": workspace_endpoint},
        reads=("Query", iam.PolicyStatement(actions=["aps:QueryMetrics"], resources=[workspace_arn])),
        namespace=c.SERVING_NAMESPACE,
        acknowledgment=PUT_METRIC_DATA,
        schedule="every minute: serving figures (PromQL) to CloudWatch",
        vpc=vpc,
        key=key,
        log_retention_days=log_retention_days,
    )
