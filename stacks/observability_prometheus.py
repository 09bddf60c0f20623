"""Serving metrics store: an Amazon Managed Service for Prometheus workspace and its managed collector.

Why this and not the CloudWatch agent: the agent's Prometheus path keeps counters, gauges and
summaries but drops histograms, and SGLang's latency and KV-transfer metrics are histograms. Why
not an in-cluster Prometheus: the managed collector is agentless (nothing to schedule on the tainted
GPU nodes, size on two system nodes or keep alive across node-group scale-downs), it reaches the
pods through ENIs in the private subnets, and on a cluster in API authentication mode AMP creates
its access entry itself. https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-collector-how-to.html
"""

from __future__ import annotations

import base64

from aws_cdk import aws_aps as aps
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from pdkit.model.plan import Plan
from pdkit.render.observability import scrape


class ServingPrometheus(Construct):
    def __init__(self, scope: Construct, id_: str, *, plan: Plan, cluster: eks.ICluster, subnets: list[ec2.ISubnet]) -> None:
        super().__init__(scope, id_)
        self.workspace = aps.CfnWorkspace(self, "Workspace", alias=plan.name)
        self.scrape_configuration = scrape.render(plan)
        self.scraper = aps.CfnScraper(
            self,
            "Collector",
            alias=f"{plan.name}-serving",
            source=aps.CfnScraper.SourceProperty(
                eks_configuration=aps.CfnScraper.EksConfigurationProperty(
                    cluster_arn=cluster.cluster_arn,
                    # The collector's ENIs go where the nodes are (at least two AZs) and take the cluster
                    # security group, which every node (system and GPU) accepts all traffic from.
                    subnet_ids=[s.subnet_id for s in subnets],
                    security_group_ids=[cluster.cluster_security_group_id],
                )
            ),
            destination=aps.CfnScraper.DestinationProperty(
                amp_configuration=aps.CfnScraper.AmpConfigurationProperty(workspace_arn=self.workspace.attr_arn)
            ),
            scrape_configuration=aps.CfnScraper.ScrapeConfigurationProperty(
                configuration_blob=base64.b64encode(self.scrape_configuration.encode()).decode()
            ),
        )
