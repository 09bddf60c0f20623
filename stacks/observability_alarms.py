"""CloudWatch alarms (definitions in pdkit/render/observability/alarms.py) to the kit's encrypted SNS topic.

The topic belongs to the capacity stack and is encrypted with its customer-managed key. CloudWatch
publishes to it as the service principal cloudwatch.amazonaws.com, which needs the topic policy to
let it publish and the key policy to let it use the key; both are scoped to this account's alarms.
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarms-and-actions.html
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from constructs import Construct

from pdkit.model.plan import Plan
from pdkit.render.observability.alarms import Alarm, Query, alarms

CLOUDWATCH = "cloudwatch.amazonaws.com"


def allow_alarm_notifications(topic: sns.Topic) -> None:
    """Let this account's CloudWatch alarms publish to the topic (and use its key, when it has one)."""
    stack = cdk.Stack.of(topic)
    alarms_arn = f"arn:{stack.partition}:cloudwatch:{stack.region}:{stack.account}:alarm:*"
    conditions = {"ArnLike": {"aws:SourceArn": alarms_arn}, "StringEquals": {"aws:SourceAccount": stack.account}}
    topic.add_to_resource_policy(
        iam.PolicyStatement(
            principals=[iam.ServicePrincipal(CLOUDWATCH)], actions=["sns:Publish"], resources=[topic.topic_arn], conditions=conditions
        )
    )
    if topic.master_key is not None:
        topic.master_key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal(CLOUDWATCH)],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions=conditions,
            )
        )


def _query(q: Query, period: int) -> cw.CfnAlarm.MetricDataQueryProperty:
    if q.expression is not None:
        return cw.CfnAlarm.MetricDataQueryProperty(id=q.id, expression=q.expression, period=period, return_data=q.return_data)
    assert q.namespace is not None
    assert q.metric is not None
    metric = cw.CfnAlarm.MetricProperty(
        namespace=q.namespace, metric_name=q.metric, dimensions=[cw.CfnAlarm.DimensionProperty(name=k, value=v) for k, v in q.dimensions]
    )
    return cw.CfnAlarm.MetricDataQueryProperty(
        id=q.id, metric_stat=cw.CfnAlarm.MetricStatProperty(metric=metric, period=period, stat=q.stat), return_data=q.return_data
    )


class Alarms(Construct):
    def __init__(self, scope: Construct, id_: str, *, plan: Plan, topic: sns.Topic) -> None:
        super().__init__(scope, id_)
        allow_alarm_notifications(topic)
        self.specs: list[Alarm] = alarms(plan)
        self.alarms: dict[str, cw.CfnAlarm] = {}
        for spec in self.specs:
            self.alarms[spec.key] = cw.CfnAlarm(
                self,
                "".join(part.capitalize() for part in spec.key.split("-")),
                alarm_name=spec.name,
                alarm_description=spec.description,
                metrics=[_query(q, spec.period) for q in spec.queries],
                comparison_operator=spec.comparison,
                threshold=spec.threshold,
                evaluation_periods=spec.evaluation_periods,
                datapoints_to_alarm=spec.datapoints_to_alarm,
                # No data means no block, no nodes or no traffic; the pipeline alarms cover a silent feed.
                treat_missing_data="notBreaching",
                actions_enabled=True,
                alarm_actions=[topic.topic_arn],
                ok_actions=[topic.topic_arn],
            )
