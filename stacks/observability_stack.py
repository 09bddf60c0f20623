"""Observability: serving metrics in Amazon Managed Service for Prometheus (managed collector), the
serving figures and the Capacity Block clock in CloudWatch, two dashboards and the alarms that page
through the kit's encrypted SNS topic.

Infrastructure metrics (GPU, EFA, nodes, pods) come from the Container Insights add-on, which the
cluster stack installs (stacks/observability_addon.py). Why the pieces sit where they do:
runbooks/06-observability.md, "How it fits together".
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_sns as sns
from constructs import Construct

from pdkit.model.plan import Plan
from stacks.encrypted_log_group import logs_key
from stacks.kit_stack import KitStack
from stacks.observability_alarms import Alarms
from stacks.observability_dashboards import Dashboards
from stacks.observability_functions import block_clock, serving_metrics
from stacks.observability_prometheus import ServingPrometheus


class ObservabilityStack(KitStack):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        plan: Plan,
        vpc: ec2.IVpc,
        cluster: eks.ICluster,
        reservation_id: str,
        topic: sns.Topic,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id_, zones=plan.availability_zones, **kwargs)
        # With capacity.purchase the block's id exists once the capacity stack has bought it: the clock, alarms and
        # dashboards read it from there (the same id as the profile's otherwise).
        plan = plan.with_reservation_id(reservation_id)
        retention = plan.log_retention_days
        key = logs_key(self, "ObservabilityKey", description=f"{plan.name}: observability functions (logs, dead letters)")

        self.prometheus = ServingPrometheus(self, "Prometheus", plan=plan, cluster=cluster, subnets=vpc.private_subnets)
        # An on-demand rehearsal has no block whose minutes to count.
        self.block_clock = (
            block_clock(self, plan=plan, vpc=vpc, key=key, log_retention_days=retention) if plan.market == "capacity-block" else None
        )
        workspace = self.prometheus.workspace
        self.serving_metrics = serving_metrics(
            self,
            plan=plan,
            workspace_arn=workspace.attr_arn,
            workspace_endpoint=workspace.attr_prometheus_endpoint,
            vpc=vpc,
            key=key,
            log_retention_days=retention,
        )
        self.dashboards = Dashboards(self, "Dashboards", plan=plan)
        self.alarms = Alarms(self, "Alarms", plan=plan, topic=topic)
        cdk.CfnOutput(self, "PrometheusQueryEndpoint", value=self.prometheus.workspace.attr_prometheus_endpoint)
