"""`pdkit rehearse`: the cost estimate, the step sequencing, the teardown check and the refusal of a block profile."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pdkit.cli.commands.rehearse import admin_key_shell
from pdkit.cli.context import load_plan
from pdkit.cli.main import main
from pdkit.errors import KitError
from pdkit.ops import rehearsal
from pdkit.ops.timeline import bundle, phases
from tests.conftest import plan_of
from tests.fixtures.cmd_support import AwsStubs, profile

pytest_plugins = ["tests.fixtures.cmd_fixtures"]

PROFILE = "config/glm51-fp8-2p2d.yaml"
ACCOUNT = "123456789012"


# --- cost estimate --------------------------------------------------------------------------------------


@pytest.fixture
def priced_plan(tmp_path: Path) -> Any:
    """The default profile moved to a region pdkit/model/data/prices.yaml prices."""
    return load_plan(profile(tmp_path, aws__region="us-east-1", aws__availability_zone="us-east-1a"))


def test_estimate_is_gpu_price_times_count_times_hours_plus_cluster_and_nat(priced_plan: Any) -> None:
    """On-demand is billed per instance-hour (https://aws.amazon.com/ec2/pricing/on-demand/), the EKS cluster per
    hour (https://aws.amazon.com/eks/pricing/) and each NAT gateway per hour (https://aws.amazon.com/vpc/pricing/):
    every number comes from pdkit/model/data/prices.yaml for the plan's region."""
    plan = priced_plan
    table = rehearsal.prices()
    gpu = table["on_demand_usd_per_hour"][plan.region][plan.instance.name]
    nat = table["nat_gateway_usd_per_hour"][plan.region]
    est = rehearsal.estimate(plan, hours=1.5)
    expected = 1.5 * (gpu * plan.instance_count + table["eks_cluster_usd_per_hour"] + nat * plan.network.nat_gateways)
    assert est.usd == pytest.approx(expected)
    assert [line.hours for line in est.lines] == [1.5, 1.5, 1.5]
    assert est.as_of == table["as_of"]


def test_an_unconfirmed_price_says_so_on_its_line(tmp_path: Path, priced_plan: Any) -> None:
    """A price no source confirmed is listed under `unconfirmed` in pdkit/model/data/prices.yaml and the estimate marks
    its line; a confirmed one (us-east-1 on-demand: the AWS Price List API as Karpenter's generated table has it,
    2026-07-20) carries no mark. Every listed key names a number the file really holds."""
    table = rehearsal.prices()
    for key in table["unconfirmed"]:
        section, entry = key.split(".", 1)  # <section>.<entry>: a region's row or one kept price
        assert entry in table[section], key
    confirmed = rehearsal.estimate(priced_plan, hours=1)
    assert not any(rehearsal.UNCONFIRMED in line.what for line in confirmed.lines)
    ohio = load_plan(profile(tmp_path, aws__region="us-east-2", aws__availability_zone="us-east-2a"))
    gpu_line = rehearsal.estimate(ohio, hours=1).lines[0]
    assert gpu_line.what.endswith(f", {rehearsal.UNCONFIRMED})")
    assert "kept_usd_per_month.s3_gb" in table["unconfirmed"]  # no source found for the S3 Standard price


def test_estimate_refuses_a_type_without_a_price(priced_plan: Any) -> None:
    """A missing price is one line naming the type, the region and the fix, not a KeyError."""
    plan = priced_plan
    table = {**rehearsal.prices(), "on_demand_usd_per_hour": {}}
    with pytest.raises(KitError, match=rf"no on-demand price for {plan.instance.name} in {plan.region}.*--gpu-usd-per-hour"):
        rehearsal.estimate(plan, hours=1, table=table)
    assert rehearsal.estimate(plan, hours=1, gpu_usd_per_hour=10.0, table=table).lines[0].usd_per_hour == 10.0 * plan.instance_count


# --- refusal ---------------------------------------------------------------------------------------------


def test_block_profile_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A Capacity Block is prepaid and cannot be cancelled (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html):
    tearing it down ends nothing, so a rehearsal of a block profile is refused before any cost is shown."""
    assert main(["rehearse", "--profile", PROFILE, "--yes"]) == 2
    err = capsys.readouterr().err
    assert "on-demand GPUs only" in err
    assert "capacity.market: on-demand" in err
    assert "Traceback" not in err
    assert "Estimate" not in err


# --- step sequencing -------------------------------------------------------------------------------------


class FakeRunner:
    def __init__(self, failing: str | None = None) -> None:
        self.failing = failing
        self.calls: list[list[str]] = []

    def __call__(self, argv: Any) -> int:
        self.calls.append(list(argv))
        return 1 if self.failing and self.failing in argv else 0


def _steps(runner: FakeRunner, verified: list[bool]) -> list[rehearsal.Step]:
    def verify() -> tuple[bool, str]:
        verified.append(True)
        return True, "nothing left running"

    return rehearsal.steps(profile=PROFILE, out=Path("/tmp/r"), runner=runner, verify=verify, startup=lambda d: d / "startup.md")


def test_steps_run_existing_targets_and_commands_in_order() -> None:
    """The rehearsal is the documented sequence of existing commands (Makefile deploy/destroy, pdkit nodes up, validate,
    bench, report, timeline --capture), each with the rehearsal profile."""
    runner, verified = FakeRunner(), []
    outcomes = rehearsal.run(_steps(runner, verified), offer_teardown=lambda _f: True)
    assert [c[:2] for c in runner.calls] == [
        ["make", "deploy"],
        ["pdkit", "nodes"],
        ["pdkit", "validate"],
        ["pdkit", "nodes"],
        ["pdkit", "bench"],
        ["pdkit", "report"],
        ["pdkit", "timeline"],
        ["make", "destroy"],
    ]
    assert all(f"PROFILE={PROFILE}" in c or PROFILE in c for c in runner.calls)
    assert "--capture" in runner.calls[6]
    assert {o.step: o.detail for o in outcomes}["timeline"] == "wrote /tmp/r/timeline/startup.md"
    assert verified == [True]
    assert {o.state for o in outcomes} == {rehearsal.PASS}


def test_validate_runs_before_serving_is_restored() -> None:
    """`pdkit validate` refuses while sglang pods are Pending or Running (pdkit/ops/fabric/validate.py,
    ensure_serving_stopped) and `pdkit nodes up` restores serving unless `--no-serving`: so the nodes come
    up with serving held back, validate runs, the admin-key Secret the SGLang pods need is made, and only
    then is serving restored for the benchmark."""
    runner, _verified = FakeRunner(), []
    all_steps = rehearsal.steps(
        profile=PROFILE, out=Path("/tmp/r"), runner=runner, verify=lambda: (True, ""), startup=lambda d: d, admin_key_shell="make-key"
    )
    rehearsal.run(all_steps, offer_teardown=lambda _f: True)
    order = [" ".join(c[:3]) if c[0] != "sh" else "admin-key" for c in runner.calls]
    first_up, validate = order.index("pdkit nodes up"), order.index("pdkit validate --profile")
    assert "--no-serving" in runner.calls[first_up]
    assert first_up < validate < order.index("admin-key") < order.index("pdkit bench --profile")
    restore = [i for i, c in enumerate(runner.calls) if c[:3] == ["pdkit", "nodes", "up"] and "--no-serving" not in c]
    assert restore
    assert validate < restore[0] < order.index("pdkit bench --profile")
    assert ["sh", "-c", "make-key"] in runner.calls


def test_admin_key_step_creates_the_secret_only_when_missing() -> None:
    """The pods read NAME-sglang-admin with optional: false; the step keeps an existing key (get || create)."""
    shell = admin_key_shell(plan_of(REHEARSAL))
    get, create = shell.split(" || ")
    assert get.startswith("kubectl -n pd-serving get secret ")
    assert get.endswith("-sglang-admin >/dev/null 2>&1")
    assert create.startswith("kubectl -n pd-serving create secret generic ")
    assert create.endswith('--from-literal=admin-api-key="$(openssl rand -hex 32)"')


def test_failing_step_stops_the_run_and_teardown_is_still_offered() -> None:
    """A failed validate must not go on to bench, but the on-demand instances keep billing: teardown is offered."""
    runner, verified = FakeRunner(failing="validate"), []
    offered: list[str] = []
    outcomes = rehearsal.run(_steps(runner, verified), offer_teardown=lambda f: offered.append(f) or True)
    states = {o.step: o.state for o in outcomes}
    assert states["validate"] == rehearsal.FAIL
    assert states["bench"] == states["report"] == states["timeline"] == rehearsal.NOT_RUN
    assert states["destroy"] == states["verify-teardown"] == rehearsal.PASS
    assert ["make", "destroy", f"PROFILE={PROFILE}"] in runner.calls
    assert not any(c[:2] == ["pdkit", "bench"] for c in runner.calls)
    assert set(offered) == {"validate"}
    assert rehearsal.first_failure(outcomes) == "validate"


def test_declined_teardown_is_not_run() -> None:
    runner, verified = FakeRunner(failing="deploy"), []
    outcomes = rehearsal.run(_steps(runner, verified), offer_teardown=lambda _f: False)
    assert runner.calls == [["make", "deploy", f"PROFILE={PROFILE}"]]
    assert [o.state for o in outcomes][1:] == [rehearsal.NOT_RUN] * 8
    assert verified == []


def test_from_step_and_only_select_steps() -> None:
    runner, verified = FakeRunner(), []
    all_steps = _steps(runner, verified)
    assert [s.name for s in rehearsal.select(all_steps, from_step="report")] == ["report", "timeline", "destroy", "verify-teardown"]
    assert [s.name for s in rehearsal.select(all_steps, only=["verify-teardown"])] == ["verify-teardown"]
    with pytest.raises(KitError, match=r"no rehearsal step 'bogus'\. Fix: use one of deploy, "):
        rehearsal.select(all_steps, from_step="bogus")


def test_startup_write_up_sets_the_measured_timeline_beside_the_plan(tmp_path: Path) -> None:
    """The rehearsal's start-up report is pdkit.ops.timeline's per-phase budget, built offline from a captured bundle; the
    fixture bundle is in the real formats of EC2 responses, Kubernetes events and SGLang/stager log lines
    (tests/fixtures/timeline/cold-boot/README.md)."""
    fixture = Path(__file__).parent / "fixtures" / "timeline" / "cold-boot"
    written = rehearsal.write_startup(plan_ := plan_of(), fixture, tmp_path / "report" / "startup.md")
    text = written.read_text()
    timeline = phases.build(plan_, bundle.read(fixture))
    staging = next(b for b in timeline.budget if b.phase == "weights staging")
    assert f"| weights staging | {plan_.estimates.staging_minutes:.1f} | {staging.measured_minutes:.1f} |" in text
    assert "| OVER |" in text
    assert f"First token possible at +{timeline.first_token_minutes:.1f} min" in text


# --- teardown check --------------------------------------------------------------------------------------


def _stub_running_checks(stubs: AwsStubs, plan: Any, *, instances: list[dict[str, Any]], cluster: bool, stack_status: str | None) -> None:
    stubs("ec2").add_response("describe_instances", {"Reservations": [{"Instances": instances}] if instances else []})
    stubs("ec2").add_response("describe_nat_gateways", {"NatGateways": []})
    if cluster:
        stubs("eks").add_response("list_nodegroups", {"nodegroups": ["glm51-2p2d-decode"]}, {"clusterName": plan.cluster_name})
    else:
        stubs("eks").add_client_error("list_nodegroups", "ResourceNotFoundException", "No cluster found for name", 404)
    for i, stack in enumerate(plan.stack_names.values()):
        if i == 0 and stack_status:
            stubs("cloudformation").add_response(
                "describe_stacks",
                {"Stacks": [{"StackName": stack, "CreationTime": datetime(2026, 1, 1, tzinfo=UTC), "StackStatus": stack_status}]},
                {"StackName": stack},
            )
        else:
            stubs("cloudformation").add_client_error(
                "describe_stacks", "ValidationError", f"Stack with id {stack} does not exist", 400, expected_params={"StackName": stack}
            )


def test_teardown_with_compute_left_fails_with_the_list(plan: Any) -> None:
    """EC2 DescribeInstances by the tag EKS puts on node group instances (eks:cluster-name), EKS ListNodegroups
    (ResourceNotFoundException once the cluster is gone) and CloudFormation DescribeStacks ("Stack with id X does not
    exist" once deleted): https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_DescribeStacks.html;
    an NLB the AWS Load Balancer Controller left behind, found by its elbv2.k8s.aws/cluster tag
    (https://github.com/kubernetes-sigs/aws-load-balancer-controller/issues/3701)."""
    stubs = AwsStubs()
    _stub_running_checks(
        stubs,
        plan,
        instances=[{"InstanceId": "i-0abc", "InstanceType": plan.instance.name, "State": {"Name": "running", "Code": 16}}],
        cluster=True,
        stack_status="DELETE_FAILED",
    )
    stubs("resourcegroupstaggingapi").add_response(
        "get_resources", {"ResourceTagMappingList": []}, {"TagFilters": [{"Key": "pdkit:deployment", "Values": [plan.name]}]}
    )
    stubs("resourcegroupstaggingapi").add_response(
        "get_resources",
        {"ResourceTagMappingList": [{"ResourceARN": f"arn:aws:elasticloadbalancing:{plan.region}:{ACCOUNT}:loadbalancer/net/k8s-x/1"}]},
        {
            "TagFilters": [{"Key": "elbv2.k8s.aws/cluster", "Values": [plan.cluster_name]}],
            "ResourceTypeFilters": ["elasticloadbalancing:loadbalancer"],
        },
    )
    found = rehearsal.check_teardown(plan, lambda s: stubs.clients[s])
    stubs.verify()
    assert not found.clean
    first_stack = next(iter(plan.stack_names.values()))
    assert found.left == [
        f"EC2 instance i-0abc ({plan.instance.name}, running)",
        f"EKS cluster {plan.cluster_name}",
        "EKS node group glm51-2p2d-decode",
        f"CloudFormation stack {first_stack} (DELETE_FAILED)",
        "load balancer loadbalancer/net/k8s-x/1",
    ]


def test_clean_teardown_passes_and_prices_what_is_kept(plan: Any) -> None:
    """Kept resources found by tag through GetResources
    (https://docs.aws.amazon.com/resourcegroupstagging/latest/APIReference/API_GetResources.html); a KMS key pending
    deletion costs nothing, an enabled one $1/month (https://aws.amazon.com/kms/pricing/); ECR, S3 and log storage per
    GB-month from pdkit/model/data/prices.yaml, sized by DescribeImages, ListObjectsV2 and DescribeLogGroups storedBytes."""
    stubs = AwsStubs()
    _stub_running_checks(stubs, plan, instances=[], cluster=False, stack_status=None)
    arn = f"arn:aws:{{}}:{plan.region}:{ACCOUNT}:{{}}"
    stubs("resourcegroupstaggingapi").add_response(
        "get_resources",
        {
            "ResourceTagMappingList": [
                {"ResourceARN": arn.format("kms", "key/k-pending")},
                {"ResourceARN": arn.format("kms", "key/k-enabled")},
                {"ResourceARN": arn.format("ecr", "repository/glm51-2p2d/sglang")},
                {"ResourceARN": "arn:aws:s3:::glm51-weights"},
                {"ResourceARN": arn.format("logs", "log-group:/pdkit/glm51-2p2d")},
            ]
        },
    )
    stubs("resourcegroupstaggingapi").add_response("get_resources", {"ResourceTagMappingList": []})
    stubs("kms").add_response(
        "describe_key",
        {"KeyMetadata": {"KeyId": "k-pending", "KeyState": "PendingDeletion", "DeletionDate": datetime(2026, 1, 8, tzinfo=UTC)}},
        {"KeyId": arn.format("kms", "key/k-pending")},
    )
    stubs("kms").add_response("describe_key", {"KeyMetadata": {"KeyId": "k-enabled", "KeyState": "Enabled"}})
    stubs("ecr").add_response(
        "describe_images",
        {"imageDetails": [{"imageSizeInBytes": 20 * 10**9}, {"imageSizeInBytes": 10 * 10**9}]},
        {"repositoryName": "glm51-2p2d/sglang"},
    )
    stubs("s3").add_response("list_objects_v2", {"Contents": [{"Key": "a", "Size": 100 * 10**9}]}, {"Bucket": "glm51-weights"})
    stubs("logs").add_response(
        "describe_log_groups",
        {
            "logGroups": [
                {"logGroupName": "/pdkit/glm51-2p2d", "storedBytes": 2 * 10**9},
                {"logGroupName": "/pdkit/glm51-2p2d-x", "storedBytes": 10**12},
            ]
        },
        {"logGroupNamePrefix": "/pdkit/glm51-2p2d"},
    )
    found = rehearsal.check_teardown(plan, lambda s: stubs.clients[s])
    stubs.verify()
    per_month = rehearsal.prices()["kept_usd_per_month"]
    assert found.clean
    assert found.left == []
    costs = {(k.kind, k.name): k.usd_per_month for k in found.kept}
    assert costs == {
        ("KMS key", "k-pending"): 0.0,
        ("KMS key", "k-enabled"): per_month["kms_key"],
        ("ECR repository", "glm51-2p2d/sglang"): pytest.approx(30 * per_month["ecr_gb"]),
        ("S3 bucket", "glm51-weights"): pytest.approx(100 * per_month["s3_gb"]),
        ("log group", "/pdkit/glm51-2p2d"): pytest.approx(2 * per_month["logs_gb"]),
    }
    assert found.usd_per_month == pytest.approx(sum(costs.values()))


# --- the command -----------------------------------------------------------------------------------------

REHEARSAL = "config/rehearsal-glm51-fp8-2p2d.yaml"


def test_command_shows_cost_first_then_stops_at_failure_tears_down_and_prints_resume(
    aws: AwsStubs, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """End to end with a fake subprocess runner: the estimate precedes any command, a failed `pdkit validate` stops the
    run before bench, --yes tears down, the teardown is verified against stubbed AWS (EC2/EKS/CloudFormation/tagging
    APIs as in the tests above) and the checklist ends with the exact resume command."""
    rplan = plan_of(REHEARSAL)
    calls: list[list[str]] = []

    def fake_call(argv: list[str]) -> int:
        calls.append(argv)
        print(f"RAN {argv[0]} {argv[1]}")
        return 3 if argv[:2] == ["pdkit", "validate"] else 0

    monkeypatch.setattr(subprocess, "call", fake_call)
    _stub_running_checks(aws, rplan, instances=[], cluster=False, stack_status=None)
    aws("resourcegroupstaggingapi").add_response("get_resources", {"ResourceTagMappingList": []})
    aws("resourcegroupstaggingapi").add_response("get_resources", {"ResourceTagMappingList": []})
    code = main(["rehearse", "--profile", REHEARSAL, "--gpu-usd-per-hour", "7", "--yes", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert out.index("Estimate: about $") < out.index("RAN make deploy")
    assert [c[:2] for c in calls] == [["make", "deploy"], ["pdkit", "nodes"], ["pdkit", "validate"], ["make", "destroy"]]
    assert "Rehearsal checklist" in out
    assert "not run" in out
    assert f"Resume from the failed step: pdkit rehearse --from-step validate --profile {REHEARSAL}" in out
