"""The market switch and the rehearsal profile (issue 15, item 1).

A rehearsal (`capacity.market: on-demand`) launches its GPU nodes without a reservation: EC2's launch template
then carries neither InstanceMarketOptions (MarketType capacity-block is only for Capacity Blocks) nor a
CapacityReservationSpecification (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html),
and EKS managed node groups take capacityType ON_DEMAND instead of CAPACITY_BLOCK
(https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateNodegroup.html, capacityType;
https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html). Every stack is still synthesized.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from syrupy.extensions.json import JSONSnapshotExtension

from pdkit import deployment
from pdkit.deployment import RehearsalMismatch
from pdkit.errors import KitError, ProfileError
from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.model.plan import STACKS
from tests.conftest import synth
from tests.test_snapshots import normalize

REHEARSAL = "rehearsal-glm51-fp8-2p2d"
BLOCK = "glm51-fp8-2p2d"


@pytest.fixture(scope="module")
def rehearsal_kit():
    return synth(REHEARSAL)


def _raw(name: str) -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load(profile_files.resolve(name).read_text()))


def _build(raw: dict[str, Any]) -> plan_mod.Plan:
    return deployment.build(profile_files.parse(raw), profile_path=str(profile_files.resolve(REHEARSAL)))


def _set(raw: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    *parents, leaf = dotted.split(".")
    node = raw
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return raw


def _resources(kit: Any, stack: str, kind: str) -> dict[str, Any]:
    return {k: v for k, v in kit.template_json(stack)["Resources"].items() if v["Type"] == kind}


def test_shipped_rehearsal_plans_on_demand_for_its_block():
    """The shipped rehearsal names the block profile it stands in for and runs Hopper GPUs: the images build
    UCCL-EP for compute capability 9.0 only (containers/)."""
    plan = _build(_raw(REHEARSAL))
    assert plan.market == "on-demand"
    assert plan.rehearses == BLOCK
    assert plan.instance.gpu_model in ("H100", "H200")
    assert plan.instance.efa_devices >= 1
    assert profile_files.load(BLOCK)[0].capacity.market == "capacity-block"


def test_rehearsal_node_groups_are_on_demand_without_capacity_block_resources(rehearsal_kit, kit):
    """ON_DEMAND node groups, a launch template without market options or reservation target, no guard, no block
    lifecycle function or events, no block clock; the block profile keeps all of them."""
    for group in _resources(rehearsal_kit, "capacity", "AWS::EKS::Nodegroup").values():
        assert group["Properties"]["CapacityType"] == "ON_DEMAND"
    for template in _resources(rehearsal_kit, "capacity", "AWS::EC2::LaunchTemplate").values():
        data = template["Properties"]["LaunchTemplateData"]
        assert "InstanceMarketOptions" not in data
        assert "CapacityReservationSpecification" not in data
        assert data["InstanceType"] == "p5.4xlarge"
    assert not _resources(rehearsal_kit, "capacity", "Custom::CapacityBlockGuard")
    rules = _resources(rehearsal_kit, "capacity", "AWS::Events::Rule")
    assert not [r for r in rules.values() if "capacity-reservation-id" in str(r["Properties"].get("EventPattern", ""))]
    functions = _resources(rehearsal_kit, "capacity", "AWS::Lambda::Function") | _resources(
        rehearsal_kit, "observability", "AWS::Lambda::Function"
    )
    descriptions = " ".join(str(f["Properties"].get("Description", "")) for f in functions.values())
    assert "Capacity Block" not in descriptions
    assert _resources(rehearsal_kit, "capacity", "AWS::SNS::Topic"), "the alarms still need their topic"
    assert set(rehearsal_kit.stacks) == set(STACKS)
    # The block profile keeps its reservation on the same template and its guard.
    for group in _resources(kit, "capacity", "AWS::EKS::Nodegroup").values():
        assert group["Properties"]["CapacityType"] == "CAPACITY_BLOCK"
    assert _resources(kit, "capacity", "Custom::CapacityBlockGuard")


def test_rehearsal_launch_template_is_the_blocks_minus_market_options(rehearsal_kit, kit):
    """Same shape (interface kinds and security-group pattern, user data, root volume, metadata): only the instance
    type, the per-instance interface count, the market options and the placement differ. The placement differs on
    purpose: EC2 places a block's instances together, so the block has no placement group, while on demand a cluster
    placement group is what keeps the rehearsal's instances close (pdkit/model/plan.py _placement_group)."""

    def shape(k: Any) -> dict[str, Any]:
        (template,) = _resources(k, "capacity", "AWS::EC2::LaunchTemplate").values()
        data = normalize(dict(template["Properties"]["LaunchTemplateData"]))
        for key in ("InstanceType", "InstanceMarketOptions", "CapacityReservationSpecification", "Placement"):
            data.pop(key, None)
        data["NetworkInterfaces"] = sorted(
            {
                (n["InterfaceType"], len(n["Groups"]), n["DeleteOnTermination"], n["AssociatePublicIpAddress"])
                for n in data["NetworkInterfaces"]
            }
        )
        return data

    assert shape(rehearsal_kit) == shape(kit)
    (rehearsal,) = _resources(rehearsal_kit, "capacity", "AWS::EC2::LaunchTemplate").values()
    (block,) = _resources(kit, "capacity", "AWS::EC2::LaunchTemplate").values()
    assert "Placement" in rehearsal["Properties"]["LaunchTemplateData"]
    assert "Placement" not in block["Properties"]["LaunchTemplateData"]


@pytest.mark.parametrize(
    ("dotted", "value", "field"),
    [
        ("capacity.reservation_id", "cr-0123456789abcdef0", "capacity.reservation_id"),
        ("capacity.purchase", {"offering_id": "cb-0123456789abcdef0", "confirm_upfront_fee_usd": 100}, "capacity.purchase"),
    ],
)
def test_on_demand_refuses_a_reservation(dotted, value, field):
    """On-demand instances launch without a reservation: a real reservation id or a purchase is a mistake."""
    with pytest.raises(ProfileError) as err:
        _build(_set(_raw(REHEARSAL), dotted, value))
    assert err.value.field == field
    assert "capacity.market" in err.value.fix


def test_only_a_rehearsal_names_a_block():
    raw = _set(_raw(BLOCK), "rehearses", BLOCK)
    with pytest.raises(ProfileError) as err:
        deployment.build(profile_files.parse(raw), profile_path="<test>")
    assert err.value.field == "rehearses"
    assert "only an on-demand rehearsal" in err.value.problem


def test_a_rehearsal_of_a_rehearsal_is_refused():
    with pytest.raises(ProfileError) as err:
        _build(_set(_raw(REHEARSAL), "rehearses", REHEARSAL))
    assert "itself an on-demand profile" in str(err.value)


def test_rehearsal_that_differs_from_its_block_is_refused_one_line_per_difference():
    """KV transfer, MoE backend per role, DeepEP mode and the node image (user data) must be the block's: they are
    what the block would otherwise meet for the first time. Scale and model may differ."""
    raw = _raw(REHEARSAL)
    _set(raw, "serving.kv_transfer", "nixl")
    _set(raw, "roles.prefill.parallelism.moe_a2a_backend", "none")
    raw["roles"]["prefill"]["parallelism"].pop("deepep_mode")
    _set(raw, "ami.source", "custom")
    with pytest.raises(RehearsalMismatch) as err:
        _build(raw)
    lines = str(err.value).splitlines()
    named = [line.split(": ", 1)[1].split(" = ")[0] for line in lines]
    assert {
        "serving.kv_transfer",
        "roles.prefill.parallelism.moe_a2a_backend",
        "roles.prefill.parallelism.deepep_mode",
        "ami.source",
    } <= set(named)
    assert all("Fix: " in line for line in lines)
    assert isinstance(err.value, KitError)


def test_scale_and_model_may_differ():
    raw = _set(_raw(REHEARSAL), "roles.decode.max_running_requests", 8)
    _set(raw, "roles.decode.context_length", 8192)
    assert _build(raw).rehearses == BLOCK


def test_rehearsal_capacity_snapshot(rehearsal_kit, snapshot):
    """The rehearsal's capacity stack, recorded: a change to what it deploys shows up as a diff."""
    assert normalize(rehearsal_kit.template_json("capacity")) == snapshot.use_extension(JSONSnapshotExtension)


def test_plan_command_shows_the_rehearsal_and_its_next_step(capsys):
    """An on-demand plan says it has no reservation and points at preflight and `pdkit rehearse`, not at buying a block."""
    from pdkit.cli.main import main

    assert main(["plan", "--profile", REHEARSAL]) == 0
    out = capsys.readouterr().out
    assert "no reservation: a rehearsal of glm51-fp8-2p2d" in out
    assert "placeholder" not in out
    assert f"Next: pdkit preflight --profile {REHEARSAL}" in out
    assert f"pdkit rehearse --profile {REHEARSAL}" in out


def test_mismatch_reaches_the_operator_as_one_line_per_difference(tmp_path, capsys):
    """Through the CLI: exit 2, one line per difference, each with the field and the fix, no traceback."""
    from pdkit.cli.main import main

    raw = _set(_raw(REHEARSAL), "serving.kv_transfer", "nixl")
    _set(raw, "roles.decode.parallelism.deepep_mode", "normal")
    raw["rehearses"] = str(profile_files.resolve(BLOCK))
    path = tmp_path / "rehearsal.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["plan", "--profile", str(path)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 2
    assert "serving.kv_transfer = 'nixl'" in lines[0]
    assert "roles.decode.parallelism.deepep_mode = 'normal'" in lines[1]
    assert all("Fix: use " in line for line in lines)
    assert "Traceback" not in err


def test_rehearsal_observability_has_no_block_clock_or_reservation_keyed_alarm(rehearsal_kit, kit):
    """The block clock reads DescribeCapacityReservations and publishes minutes left per CapacityReservationId
    (pdkit/functions/block_clock.py); on demand there is no reservation (EC2 launches without a
    CapacityReservationSpecification), so no widget, alarm or metric query may name one: it would only show
    no data, and the healthy-replica gate reading it would never open. The stack still synthesizes, with the
    serving metrics, dashboards and alarms; the block profile keeps all of the clock."""
    import json

    body = json.dumps(rehearsal_kit.template_json("observability"))
    assert "CapacityReservationId" not in body
    assert "MinutesLeft" not in body
    alarms = {a["Properties"]["AlarmName"] for a in _resources(rehearsal_kit, "observability", "AWS::CloudWatch::Alarm").values()}
    assert "rehearsal-glm51-2p2d-block-ending" not in alarms
    assert "rehearsal-glm51-2p2d-block-clock-failing" not in alarms
    assert {"rehearsal-glm51-2p2d-no-healthy-prefill", "rehearsal-glm51-2p2d-no-healthy-decode"} <= alarms
    assert len(_resources(rehearsal_kit, "observability", "AWS::CloudWatch::Dashboard")) == 2
    block = json.dumps(kit.template_json("observability"))
    assert "CapacityReservationId" in block
    assert "MinutesLeft" in block


def test_rehearsal_healthy_replica_alarm_waits_the_grace_without_a_clock(rehearsal_kit):
    """Without a block clock the alarm reads HealthyWorkers alone and waits the plan's grace (nodes joining,
    staging, start-up budget) as consecutive 1-minute periods; CloudWatch allows EvaluationPeriods x Period up
    to one day (https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html)."""
    from pdkit.render.observability.alarms import serving_grace_minutes

    grace = serving_grace_minutes(rehearsal_kit.plan)
    (alarm,) = [
        a["Properties"]
        for a in _resources(rehearsal_kit, "observability", "AWS::CloudWatch::Alarm").values()
        if a["Properties"]["AlarmName"].endswith("-no-healthy-decode")
    ]
    assert [m["MetricStat"]["Metric"]["MetricName"] for m in alarm["Metrics"]] == ["HealthyWorkers"]
    assert alarm["EvaluationPeriods"] == alarm["DatapointsToAlarm"] == grace
    assert grace * 60 <= 86400


def test_rehearsal_builds_no_image_and_runs_the_blocks(rehearsal_kit, kit):
    """p5.4xlarge is not offered in the block's region, so the rehearsal deploys in another one; "the same
    images" then means the block's ECR images, pulled across regions, not a second build that could differ.
    The images stack stays (every stack synthesizes) but creates no repository, CodeBuild project or build,
    and every image the serving stack names is <account>.dkr.ecr.<block region>.amazonaws.com/<block repo>:<tag>,
    byte-for-byte the block plan's own reference."""
    import json

    images = rehearsal_kit.template_json("images")
    kinds = {r["Type"] for r in images["Resources"].values()}
    assert not kinds & {"AWS::CodeBuild::Project", "AWS::ECR::Repository", "Custom::ImageBuild", "AWS::KMS::Key"}
    outputs = json.dumps(images["Outputs"])
    serving = json.dumps(rehearsal_kit.template_json("serving"))
    block_plan, plan = kit.plan, rehearsal_kit.plan
    assert plan.region != block_plan.region
    assert set(plan.images) == set(block_plan.images)
    for name, image in plan.images.items():
        # Tags are content hashes of containers/ (equal to the block's: deployment.check), repositories the block's.
        assert image.repository == block_plan.images[name].repository
        assert f".dkr.ecr.{block_plan.region}.amazonaws.com/{image.repository}:{image.tag}" in outputs, name
    assert f".dkr.ecr.{block_plan.region}." in serving
    assert f".dkr.ecr.{plan.region}." not in serving
    assert f"{plan.name}/sglang" not in serving
    # The block still builds its own.
    assert _resources(kit, "images", "AWS::CodeBuild::Project")
    # Node ECR read is AmazonEC2ContainerRegistryReadOnly, Resource "*" (every repository in every region,
    # https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AmazonEC2ContainerRegistryReadOnly.html):
    # the GPU nodes need no extra grant for the block region's repositories.
    assert "AmazonEC2ContainerRegistryReadOnly" in json.dumps(_resources(rehearsal_kit, "capacity", "AWS::IAM::Role"))


def test_a_rehearsal_in_another_account_is_refused():
    """The block's registry lives in the block's account; a rehearsal elsewhere could not pull its images."""
    raw = _raw(REHEARSAL)
    _set(raw, "aws.account", "111122223333")
    with pytest.raises(RehearsalMismatch, match=r"aws\.account"):
        _build(raw)
