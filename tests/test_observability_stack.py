"""The observability stack and the Container Insights add-on construct, as the default kit synthesizes them:
the properties that decide whether anything is measured and whether anyone gets paged."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk.assertions import Match

from pdkit.model import profile_files
from pdkit.render.observability import alarms, catalog, scrape
from stacks.cluster_stack import ClusterStack
from stacks.network_stack import NetworkStack
from stacks.observability_addon import ADDON, ContainerInsightsAddon
from stacks.observability_functions import BLOCK_CLOCK_MODULES, SERVING_METRICS_MODULES
from tests.conftest import Kit, new_app, plan_of, synth

ADDON_VERSION = "v6.4.0-eksbuild.1"


def _alarm(kit: Kit, key: str) -> dict[str, Any]:
    (found,) = [a for a in kit.properties("observability", "AWS::CloudWatch::Alarm") if a["AlarmName"] == f"{kit.plan.name}-{key}"]
    return found


# ---- the Container Insights add-on ----


def test_addon_is_pinned_with_pod_identity_for_the_agent(kit):
    (addon,) = [a for a in kit.properties("cluster", "AWS::EKS::Addon") if a["AddonName"] == ADDON]
    assert addon["AddonVersion"] == ADDON_VERSION
    (association,) = addon["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "cloudwatch-agent"
    role = kit.template("cluster").find_resources("AWS::IAM::Role", {"Properties": {"Description": Match.string_like_regexp(ADDON)}})
    ((logical, props),) = role.items()
    assert association["RoleArn"] == {"Fn::GetAtt": [logical, "Arn"]}
    trust = props["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert "CloudWatchAgentServerPolicy" in json.dumps(props["Properties"]["ManagedPolicyArns"])


def test_addon_log_groups_are_encrypted_with_retention(kit):
    groups = [g for g in kit.properties("cluster", "AWS::Logs::LogGroup") if "containerinsights" in json.dumps(g.get("LogGroupName"))]
    assert len(groups) == 4
    assert all(g["RetentionInDays"] == 365 and "KmsKeyId" in g for g in groups)


@pytest.mark.parametrize("version", ["v1.5.2-eksbuild.1", "v3.0.9-eksbuild.2"])
def test_addon_refuses_versions_without_efa_p5en_or_pod_identity(version):
    app = new_app()
    plan = plan_of()
    env = cdk.Environment(region=plan.region)
    cl = ClusterStack(app, "c", plan=plan, vpc=NetworkStack(app, "n", plan=plan, env=env).vpc, env=env)
    with pytest.raises(ValueError, match="too old"):
        ContainerInsightsAddon(cl, "CI", cluster=cl.cluster, version=version)
    with pytest.raises(ValueError, match="not an EKS add-on version"):
        ContainerInsightsAddon(cl, "CI2", cluster=cl.cluster, version="6.4.0")


# ---- Prometheus ----


def test_collector_scrapes_the_cluster_into_the_workspace(kit):
    (scraper,) = kit.properties("observability", "AWS::APS::Scraper")
    (workspace,) = kit.template("observability").find_resources("AWS::APS::Workspace")
    assert scraper["Destination"]["AmpConfiguration"]["WorkspaceArn"] == {"Fn::GetAtt": [workspace, "Arn"]}
    eks = scraper["Source"]["EksConfiguration"]
    cluster_stack = kit.stacks["cluster"].stack_name
    # The cluster's ARN and its cluster security group (which every node accepts traffic from).
    assert re.search(r"FnGetAttCluster\w*Arn", json.dumps(eks["ClusterArn"]))
    (group,) = eks["SecurityGroupIds"]
    assert "ClusterSecurityGroupId" in json.dumps(group)
    assert cluster_stack in json.dumps([eks["ClusterArn"], group])
    # Private subnets in every AZ (the collector needs at least two).
    assert len(eks["SubnetIds"]) == len(kit.plan.availability_zones) >= 2
    assert all("privateSubnet" in json.dumps(s) for s in eks["SubnetIds"])


def test_collector_runs_the_rendered_scrape_configuration(kit):
    (scraper,) = kit.properties("observability", "AWS::APS::Scraper")
    blob = base64.b64decode(scraper["ScrapeConfiguration"]["ConfigurationBlob"]).decode()
    assert blob == scrape.render(kit.plan)
    jobs = [j["job_name"] for j in yaml.safe_load(blob)["scrape_configs"]]
    assert jobs == [catalog.SGLANG_JOB, catalog.ROUTER_JOB]


# ---- functions ----


def test_functions_run_every_minute_with_fixed_names(kit):
    functions = {f["FunctionName"]: f for f in kit.properties("observability", "AWS::Lambda::Function")}
    assert set(functions) == {alarms.function_name(kit.plan, "block-clock"), alarms.function_name(kit.plan, "serving-metrics")}
    rules = kit.properties("observability", "AWS::Events::Rule")
    assert [r["ScheduleExpression"] for r in rules] == ["rate(1 minute)"] * 2
    clock = functions[alarms.function_name(kit.plan, "block-clock")]
    assert clock["Environment"]["Variables"]["RESERVATION_ID"] == kit.plan.reservation_id
    serving = functions[alarms.function_name(kit.plan, "serving-metrics")]
    assert serving["Environment"]["Variables"]["ROLES"] == ",".join(kit.plan.roles)


def test_functions_may_only_write_their_own_namespace(kit):
    policies = json.dumps(kit.properties("observability", "AWS::IAM::ManagedPolicy"))
    for namespace in (catalog.SERVING_NAMESPACE, catalog.BLOCK_NAMESPACE):
        assert f'"cloudwatch:namespace": "{namespace}"' in policies
    assert "aps:QueryMetrics" in policies


@pytest.mark.parametrize("modules", [BLOCK_CLOCK_MODULES, SERVING_METRICS_MODULES])
def test_function_bundles_import_with_only_what_they_ship(tmp_path, modules):
    """The asset holds only the listed pdkit files: an import of anything else fails in Lambda, not here."""
    root = profile_files.ROOT / "pdkit"
    for module in ("__init__.py", "functions/__init__.py", *modules):
        (tmp_path / "pdkit" / module).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / module, tmp_path / "pdkit" / module)
    handler = "pdkit." + modules[-1].removesuffix(".py").replace("/", ".")
    code = f"import sys, {handler}; assert 'yaml' not in sys.modules and 'pydantic' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)}, check=True)


# ---- alarms ----


def test_every_alarm_notifies_the_capacity_topic_on_alarm_and_ok(kit):
    topic = kit.template("capacity").find_resources("AWS::SNS::Topic")
    (topic_id,) = topic
    found = kit.properties("observability", "AWS::CloudWatch::Alarm")
    assert len(found) == len(alarms.alarms(kit.plan))
    for alarm in found:
        assert alarm["ActionsEnabled"] is True
        for actions in (alarm["AlarmActions"], alarm["OKActions"]):
            (action,) = actions
            assert topic_id in json.dumps(action)


def test_cloudwatch_may_publish_to_the_encrypted_topic(kit):
    """Without these two statements CloudWatch's publish to a KMS-encrypted topic fails silently."""
    capacity = kit.template_json("capacity")
    policies = [r for r in capacity["Resources"].values() if r["Type"] == "AWS::SNS::TopicPolicy"]
    assert any(
        s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"} and s["Effect"] == "Allow"
        for p in policies
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    )
    keys = [r for r in capacity["Resources"].values() if r["Type"] == "AWS::KMS::Key"]
    grants = [
        s for k in keys for s in k["Properties"]["KeyPolicy"]["Statement"] if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert grants
    assert set(grants[0]["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}


def test_per_node_alarms_follow_nodes_that_join_with_the_block(kit):
    """Node names exist only while a block runs: per-node alarms must be queries, not fixed dimensions."""
    for key in ("node-not-ready", "gpus-missing", "efa-devices-missing", "efa-drops"):
        (query,) = _alarm(kit, key)["Metrics"]
        assert query["Expression"].startswith("SELECT")
        assert "GROUP BY NodeName" in query["Expression"]
        assert f"ClusterName = '{kit.plan.cluster_name}'" in query["Expression"]


def test_alarms_stay_quiet_without_data(kit):
    """No block, no nodes or no traffic is not an incident (the pipeline alarms watch the feeds)."""
    assert {a["TreatMissingData"] for a in kit.properties("observability", "AWS::CloudWatch::Alarm")} == {"notBreaching"}


def test_thresholds_from_the_profile_reach_the_template(raw_with):
    """Non-default values, so the template cannot pass on a constant; the default plan's alarm thresholds are
    tests/test_observability_catalog.py::test_alarm_thresholds_come_from_the_plan."""
    raw = raw_with("observability.tpot_p99_ms", 25, "observability.ttft_p99_ms", 2500, "observability.block_end_warning_minutes", 90)
    changed = synth(raw)
    assert _alarm(changed, "tpot-p99")["Threshold"] == 25
    assert _alarm(changed, "ttft-p99")["Threshold"] == 2500
    assert _alarm(changed, "block-ending")["Threshold"] == 90
    gate = _alarm(changed, "no-healthy-decode")["Metrics"][-1]["Expression"]
    assert "left > 90" in gate


def test_no_expert_imbalance_alarm_by_default(kit):
    """No role reports expert balancedness by default (its recorder's per-forward WORLD reduce: tests/test_observability_ranks.py),
    so no alarm waits on a figure that never comes; an opt-in role gets one (test_observability_ranks.py)."""
    names = [a["AlarmName"] for a in kit.properties("observability", "AWS::CloudWatch::Alarm")]
    assert not [n for n in names if "expert-imbalance" in n]
    assert names, "the template has its other alarms"


def test_serving_dashboard_in_the_template_has_per_rank_panels(kit):
    (serving,) = [d for d in kit.properties("observability", "AWS::CloudWatch::Dashboard") if d["DashboardName"].endswith("-serving")]
    body = json.dumps(serving["DashboardBody"])
    for metric in ("RankRunningRequests", "RankQueuedRequests", "RankKvCacheUsage", "DpTokenImbalance"):
        assert metric in body
    assert "ExpertBalancedness" not in body  # off by default (test_no_expert_imbalance_alarm_by_default)


# ---- dashboards ----


def test_two_dashboards_named_after_the_deployment(kit):
    names = sorted(d["DashboardName"] for d in kit.properties("observability", "AWS::CloudWatch::Dashboard"))
    assert names == [f"{kit.plan.name}-infrastructure", f"{kit.plan.name}-serving"]


# ---- policy ----


# cdk-nag and cfn-lint run on every stack of every profile in tests/test_policy.py and tests/test_cfn_lint.py.
