"""`pdkit status`: AWS node groups plus Kubernetes nodes, GPUs, EFA devices, LeaderWorkerSets and router, against the plan."""

from __future__ import annotations

import json

from botocore.stub import ANY
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from pdkit.cli.context import load_plan
from pdkit.cli.main import main
from pdkit.ops import status_metrics
from tests.fixtures.cmd_support import (
    HEALTHY_NODES,
    NOW,
    k8s_node,
    lws,
    real_profile,
    router_deployment,
    stub_nodegroups,
    stub_reservation,
)

pytest_plugins = ["tests.fixtures.cmd_fixtures"]


def stub_aws(aws, *, desired: int = 2, real: bool = True, issues: list[dict[str, str]] | None = None) -> None:
    aws("eks").add_response(
        "describe_cluster", {"cluster": {"name": "glm51-2p2d", "status": "ACTIVE", "version": "1.36"}}, {"name": "glm51-2p2d"}
    )
    if real:
        stub_reservation(aws)
    stub_nodegroups(aws, desired, issues=issues)


def test_everything_as_planned_exits_zero(aws, cluster, tmp_path, capsys):
    stub_aws(aws)
    fakes = cluster()
    assert main(["status", "--profile", real_profile(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Everything matches the plan. Next: pdkit smoke" in out
    assert "8 GPUs, 16 EFA devices" in out
    assert "2 Ready of 2 planned" in out
    assert "1 of 1 groups ready" in out
    assert fakes["core"].selectors == ["pdkit/role in (prefill,decode)"]
    assert fakes["custom"].calls == [("leaderworkerset.x-k8s.io", "v1", "pd-serving", "leaderworkersets", "pdkit/role")]
    assert fakes["apps"].calls == [("pd-serving", "pdkit/role=router")]


def test_a_node_with_too_few_efa_devices_fails(aws, cluster, tmp_path, capsys):
    """Fewer EFA devices than planned means NCCL/UCCL silently lose bandwidth (stale device-plugin allowlist)."""
    stub_aws(aws)
    cluster(nodes=[*HEALTHY_NODES[:3], k8s_node("ip-10-0-0-4", "decode", efa=0, instance_id="i-0d2")])
    assert main(["status", "--profile", real_profile(tmp_path), "--output", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    bad = [r for r in data["rows"] if r["state"] == "FAIL"]
    assert len(bad) == 1
    assert "0 of 16 EFA devices allocatable" in bad[0]["detail"]
    assert "i-0d2" in bad[0]["item"]


def test_missing_gpus_and_not_ready_nodes(aws, cluster, tmp_path, capsys):
    stub_aws(aws)
    cluster(nodes=[k8s_node("n1", "prefill", gpus=0), k8s_node("n2", "prefill", ready=False), *HEALTHY_NODES[2:]])
    assert main(["status", "--profile", real_profile(tmp_path), "--output", "json"]) == 1
    data = {r["item"].split(" (")[0]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert data["node n1"]["state"] == "FAIL"
    assert "0 of 8 GPUs" in data["node n1"]["detail"]
    assert data["node n2"]["state"] == "WAIT"
    assert data["prefill nodes"]["detail"] == "1 Ready of 2 planned"


def test_serving_not_ready(aws, cluster, tmp_path, capsys):
    stub_aws(aws)
    cluster(sets=[lws("glm51-decode", "decode", ready=0)], routers=[router_deployment(1)])
    assert main(["status", "--profile", real_profile(tmp_path), "--output", "json"]) == 1
    data = {r["item"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert data["prefill groups"]["state"] == "WAIT"
    assert "no LeaderWorkerSet labelled pdkit/role=prefill" in data["prefill groups"]["detail"]
    assert data["decode groups"]["detail"].startswith("0 of 1 groups ready")
    assert data["router"]["detail"] == "1 of 2 replicas ready"


def test_lws_not_installed(aws, cluster, tmp_path, capsys):
    stub_aws(aws)
    cluster(sets=ApiException(status=404, reason="Not Found"))
    main(["status", "--profile", real_profile(tmp_path), "--output", "json"])
    rows = {r["item"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["LeaderWorkerSet"]["state"] == "FAIL"


def test_scaled_down_groups_say_nodes_up(aws, cluster, tmp_path, capsys):
    stub_aws(aws, desired=0)
    cluster(nodes=[], sets=[], routers=[])
    assert main(["status", "--profile", real_profile(tmp_path)]) == 1
    assert "(scaled down: pdkit nodes up)" in capsys.readouterr().out


def test_node_group_health_issue_fails(aws, cluster, tmp_path, capsys):
    stub_aws(aws, issues=[{"code": "Ec2LaunchTemplateInvalidConfiguration", "message": "bad template"}])
    cluster()
    assert main(["status", "--profile", real_profile(tmp_path)]) == 1
    assert "Ec2LaunchTemplateInvalidConfiguration: bad template" in capsys.readouterr().out


def test_unreachable_cluster_explains_the_ssm_access_path(aws, cluster, capsys):
    stub_aws(aws, real=False)
    cluster(nodes=MaxRetryError(None, "/api/v1/nodes", reason="connection timed out"))
    assert main(["status"]) == 1
    out = capsys.readouterr().out
    assert "cannot reach the Kubernetes API" in out
    assert "aws ssm start-session --region eu-south-2 --target <instance> --document-name AWS-StartPortForwardingSessionToRemoteHost" in out
    assert "OutputKey=='AccessHostId'" in out
    assert "--stack-name glm51-2p2d-cluster" in out
    assert "--tls-server-name <endpoint host>" in out


def test_refused_identity_names_the_access_entry_fix(aws, cluster, capsys):
    stub_aws(aws, real=False)
    cluster(nodes=ApiException(status=403, reason="Forbidden"))
    assert main(["status", "--output", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert "cluster.admin_principal_arns" in data["kubernetes_error"]
    assert data["access_path"]


def test_no_kubeconfig_is_unreachable_not_a_traceback(aws, monkeypatch, tmp_path, capsys):
    stub_aws(aws, real=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert main(["status"]) == 1
    assert "no usable kubeconfig" in capsys.readouterr().out


def test_cluster_not_deployed(aws, capsys):
    aws("eks").add_client_error("describe_cluster", "ResourceNotFoundException", "No cluster found for name: glm51-2p2d.", 404)
    assert main(["status"]) == 2
    assert "cluster glm51-2p2d is not deployed in eu-south-2" in capsys.readouterr().err


# --- --metrics: the dashboards' headline figures ------------------------------------------------


def _metric_data(aws, profile_path: str, values: dict[str, float]):
    plan = load_plan(profile_path)
    queries = status_metrics.queries(plan)
    results = [
        {
            "Id": q["Id"],
            "Label": q["Id"],
            "Timestamps": [NOW] if q["Id"] in values else [],
            "Values": [values[q["Id"]]] if q["Id"] in values else [],
            "StatusCode": "Complete",
        }
        for q in queries
    ]
    aws("cloudwatch").add_response(
        "get_metric_data",
        {"MetricDataResults": results},
        {"MetricDataQueries": queries, "StartTime": ANY, "EndTime": ANY, "ScanBy": "TimestampDescending"},
    )
    return queries


def test_metrics_without_data_wait_but_do_not_fail_status(aws, cluster, tmp_path, capsys):
    """Outside a block there is no traffic: WAIT rows, and the exit code still says the deployment is fine."""
    stub_aws(aws)
    cluster()
    path = real_profile(tmp_path)
    _metric_data(aws, path, {})
    assert main(["status", "--metrics", "--profile", path, "--output", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    metrics = [r for r in rows if r["area"] == "metrics"]
    assert metrics
    assert {r["state"] for r in metrics} == {"WAIT"}


def test_a_figure_past_its_threshold_fails_status(aws, cluster, tmp_path, capsys):
    stub_aws(aws)
    cluster()
    path = real_profile(tmp_path)
    queries = status_metrics.queries(load_plan(path))
    # Push every figure far up: at least the TPOT p99 (threshold from the profile) must then FAIL.
    _metric_data(aws, path, {q["Id"]: 1e9 for q in queries})
    assert main(["status", "--metrics", "--profile", path, "--output", "json"]) == 1
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert any(r["area"] == "metrics" and r["state"] == "FAIL" for r in rows)


def test_without_the_flag_cloudwatch_is_not_called(aws, cluster, tmp_path):
    stub_aws(aws)
    cluster()
    assert main(["status", "--profile", real_profile(tmp_path), "--output", "json"]) == 0
    assert "cloudwatch" not in {service for service, _, _ in aws.requested}
