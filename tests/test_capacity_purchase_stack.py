"""capacity.purchase in the profile: the purchase stack buys the block, and every consumer of the reservation id
reads it from that purchase resource (its ReservationId attribute, through the purchase stack's output), never from
the profile's placeholder.

Without capacity.purchase there is no purchase stack: tests/test_snapshots.py pins the shipped profiles' stacks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pdkit.errors import ProfileError
from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.model.profile import PLACEHOLDER_RESERVATION
from tests.conftest import PURCHASE, policy_findings
from tests.test_control_tower import Finding, _allowed, _paths, allowlist, guard, run_guard

__all__ = ["guard"]  # the session fixture with the cfn-guard binary and Control Tower rules

OFFERING, FEE = PURCHASE["offering_id"], PURCHASE["confirm_upfront_fee_usd"]


def _of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def _purchase_id(template: dict[str, Any]) -> str:
    (logical_id,) = _of_type(template, "Custom::CapacityBlockPurchase")
    return logical_id


def test_the_purchase_stack_contains_the_purchase_resource(bought):
    """The offering, the confirmed fee and the query that finds the offering again (DescribeCapacityBlockOfferings
    has no offering-id filter: InstanceType, InstanceCount, CapacityDurationHours are required) travel in its properties."""
    template = bought.template_json("purchase")
    props = _of_type(template, "Custom::CapacityBlockPurchase")[_purchase_id(template)]["Properties"]
    assert props["OfferingId"] == OFFERING
    assert props["UpfrontFeeUsd"] == FEE
    assert (props["InstanceType"], props["InstanceCount"], props["AvailabilityZone"], props["DurationHours"]) == (
        bought.plan.instance.name,
        str(bought.plan.instance_count),
        bought.plan.block_az,
        str(bought.plan.block_duration_hours),
    )


def test_every_consumer_reads_the_id_from_the_purchase_resource(bought):
    """Launch template, guard, lifecycle function and its event rule, and the block clock all name the bought block;
    the placeholder id appears nowhere, so no resource can target a block that does not exist."""
    capacity = bought.template_json("capacity")
    bought_stack = bought.template_json("purchase")
    att = {"Fn::GetAtt": [_purchase_id(bought_stack), "ReservationId"]}
    (published,) = [name for name, o in bought_stack["Outputs"].items() if name.startswith("PublishOutput") and o["Value"] == att]
    att = {"Fn::GetStackOutput": {"StackName": bought.plan.stack_names["purchase"], "Region": bought.plan.region, "OutputName": published}}
    for template in _of_type(capacity, "AWS::EC2::LaunchTemplate").values():
        target = template["Properties"]["LaunchTemplateData"]["CapacityReservationSpecification"]["CapacityReservationTarget"]
        assert target["CapacityReservationId"] == att
    (guard,) = _of_type(capacity, "Custom::CapacityBlockGuard").values()
    assert guard["Properties"]["ReservationId"] == att
    lifecycle = [f for k, f in _of_type(capacity, "AWS::Lambda::Function").items() if k.startswith("BlockLifecycle")]
    assert lifecycle[0]["Properties"]["Environment"]["Variables"]["RESERVATION_ID"] == att
    (rule,) = [r for k, r in _of_type(capacity, "AWS::Events::Rule").items() if k.startswith("BlockLifecycleBlockEvents")]
    assert att in rule["Properties"]["EventPattern"]["detail"]["capacity-reservation-id"]
    observability = bought.template_json("observability")
    clock = next(f for k, f in _of_type(observability, "AWS::Lambda::Function").items() if k.startswith("BlockClock"))
    assert clock["Properties"]["Environment"]["Variables"]["RESERVATION_ID"] == att
    for name in ("capacity", "observability"):
        assert PLACEHOLDER_RESERVATION not in json.dumps(bought.template_json(name)), name


def test_the_guard_waits_only_for_a_bought_id(bought, kit):
    """EC2 may answer NotFound for a block bought moments ago (eventual consistency:
    https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html), so the guard beside the purchase
    resource is told the id comes from it; with a hand-entered id the property is absent and an unknown id is refused at once."""
    (with_purchase,) = _of_type(bought.template_json("capacity"), "Custom::CapacityBlockGuard").values()
    assert with_purchase["Properties"]["ReservationFrom"] == "purchase"
    (by_hand,) = _of_type(kit.template_json("capacity"), "Custom::CapacityBlockGuard").values()
    assert "ReservationFrom" not in by_hand["Properties"]


def test_lambda_never_retries_the_purchase_invocation(bought):
    """Lambda retries a failed asynchronous invocation twice unless MaximumRetryAttempts is 0, and keeps throttled or
    system-error events for up to 6 hours unless MaximumEventAgeInSeconds is lower (AWS::Lambda::EventInvokeConfig;
    Lambda developer guide, asynchronous invocation error handling): a minute, so a queued Create never buys after
    CloudFormation has rolled back."""
    capacity = bought.template_json("purchase")
    configs = [c["Properties"] for c in _of_type(capacity, "AWS::Lambda::EventInvokeConfig").values()]
    purchase_fn = next(k for k in _of_type(capacity, "AWS::Lambda::Function") if k.startswith("PurchaseFunction"))
    assert {
        "FunctionName": {"Ref": purchase_fn},
        "MaximumEventAgeInSeconds": 60,
        "MaximumRetryAttempts": 0,
        "Qualifier": "$LATEST",
    } in configs


def _purchase_statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    policies = [p["Properties"] for k, p in _of_type(template, "AWS::IAM::ManagedPolicy").items() if k.startswith("PurchaseFunction")]
    return [s for p in policies for s in p["PolicyDocument"]["Statement"]]


def test_the_function_may_buy_only_tagged_blocks_and_read(bought):
    """Only the four EC2 actions of a purchase (plus its own stack's status and the kit function basics); the
    purchase needs the kit's tag (aws:RequestTag), and CreateTags only as part of PurchaseCapacityBlock
    (ec2:CreateAction), per the Service Authorization Reference for Amazon EC2."""
    statements = _purchase_statements(bought.template_json("purchase"))
    ec2_actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]) if a.startswith("ec2:")}
    basics = {"ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DeleteNetworkInterface"}
    # AWSLambdaVPCAccessExecutionRole v3 (stacks/kit_function.py VPC_ACCESS_ACTIONS)
    basics |= {"ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses", "ec2:DescribeSubnets"}
    assert ec2_actions - basics == {
        "ec2:DescribeCapacityBlockOfferings",
        "ec2:PurchaseCapacityBlock",
        "ec2:DescribeCapacityReservations",
        "ec2:CreateTags",
    }
    buy = next(s for s in statements if s["Action"] == "ec2:PurchaseCapacityBlock")
    assert "capacity-reservation/*" in json.dumps(buy["Resource"])
    tags = next(s for s in statements if s["Action"] == "ec2:CreateTags")
    assert tags["Condition"]["StringEquals"]["ec2:CreateAction"] == "PurchaseCapacityBlock"


def test_the_role_buys_only_with_this_deployments_tag_in_its_region(bought):
    """A direct invoke cannot make the role buy under another tag or in another region: PurchaseCapacityBlock and its
    CreateTags need this purchase's tag value (aws:RequestTag, tag-on-create: EC2 User Guide, supported-iam-actions-
    tagging) and the plan's region (aws:RequestedRegion, supported by every EC2 action: EC2 User Guide,
    ExamplePolicies_EC2), and no other tag key (aws:TagKeys). The Service Authorization Reference's own condition keys
    for the action (instance type, AZ) could not be read from a stored copy of the reference, so none is guessed: a key
    the action does not set makes a StringEquals deny the real purchase."""
    statements = _purchase_statements(bought.template_json("purchase"))
    pid = bought.plan.purchase.purchase_id
    buy = next(s for s in statements if s["Action"] == "ec2:PurchaseCapacityBlock")
    assert buy["Condition"] == {
        "StringEquals": {"aws:RequestTag/pdkit:purchase-id": pid, "aws:RequestedRegion": bought.plan.region},
        "ForAllValues:StringEquals": {"aws:TagKeys": ["pdkit:purchase-id"]},
    }
    tags = next(s for s in statements if s["Action"] == "ec2:CreateTags")
    assert tags["Condition"] == {"StringEquals": {"ec2:CreateAction": "PurchaseCapacityBlock", "aws:RequestTag/pdkit:purchase-id": pid}}


def test_the_function_environment_holds_what_it_may_buy(bought):
    """The handler acts on its environment, never on the request (pdkit/functions/capacity_purchase.py): the purchase
    properties, its tag, the stack's own AWS::StackId and the resource's logical id are synthesized into it."""
    from pdkit.functions import capacity_purchase as handler

    template = bought.template_json("purchase")
    (fn,) = [r for k, r in _of_type(template, "AWS::Lambda::Function").items() if k.startswith("PurchaseFunction")]
    env = fn["Properties"]["Environment"]["Variables"]
    assert json.loads(env[handler.ENV_PURCHASE]) == bought.plan.purchase.resource_properties()
    assert env[handler.ENV_PURCHASE_ID] == bought.plan.purchase.purchase_id
    assert env[handler.ENV_STACK_ID] == {"Ref": "AWS::StackId"}
    assert env[handler.ENV_RESOURCE_ID] == _purchase_id(template)


def test_the_purchase_answers_within_its_service_timeout(bought):
    """ServiceTimeout (1-3600 s, default an hour of a waiting stack: AWS::CloudFormation::CustomResource) is set, and
    longer than the function's own timeout, which the handler answers within."""
    from stacks.capacity_purchase import SERVICE_TIMEOUT_MINUTES, TIMEOUT_MINUTES

    template = bought.template_json("purchase")
    (resource,) = _of_type(template, "Custom::CapacityBlockPurchase").values()
    (fn,) = [r for k, r in _of_type(template, "AWS::Lambda::Function").items() if k.startswith("PurchaseFunction")]
    assert resource["Properties"]["ServiceTimeout"] == str(SERVICE_TIMEOUT_MINUTES * 60)
    assert fn["Properties"]["Timeout"] == TIMEOUT_MINUTES * 60 < int(resource["Properties"]["ServiceTimeout"]) <= 3600


def test_the_purchase_stack_needs_only_the_network(bought):
    """Deployed first by `make deploy`, right after the fee is typed: it depends on the network alone, not on the
    cluster (20-40 minutes to create), and the capacity and observability stacks depend on it, so `cdk deploy --all`
    never deploys a consumer of the bought id before it (weak references are ordered by these dependencies)."""
    names = bought.plan.stack_names
    assert [d.stack_name for d in bought.stacks["purchase"].dependencies] == [names["network"]]
    for consumer in ("capacity", "observability"):
        assert names["purchase"] in [d.stack_name for d in bought.stacks[consumer].dependencies], consumer


def test_the_purchase_stack_publishes_the_bought_id(bought):
    """`pdkit` reads the purchase stack's ReservationId output (pdkit.ops.capacity.RESERVATION_OUTPUT)."""
    from pdkit.ops.capacity import RESERVATION_OUTPUT

    template = bought.template_json("purchase")
    assert template["Outputs"][RESERVATION_OUTPUT]["Value"] == {"Fn::GetAtt": [_purchase_id(template), "ReservationId"]}
    assert "ReservationId" not in bought.template_json("capacity").get("Outputs", {})


def test_there_is_a_purchase_stack_only_with_a_purchase(kit, bought):
    """The one stack a switch adds (pdkit.model.plan.PURCHASE_STACK: an empty template is refused by CloudFormation)."""
    from pdkit.model.plan import PURCHASE_STACK, STACKS

    assert set(kit.stacks) == set(STACKS) == set(kit.plan.stack_names)
    assert set(bought.stacks) == {*STACKS, PURCHASE_STACK} == set(bought.plan.stack_names)


def test_policy_packs_have_no_unacknowledged_findings(bought):
    assert policy_findings(bought.app) == []


def test_every_aws_call_of_the_purchase_function_is_allowed(bought):
    """The role-actions check (tests/test_role_actions.py) over the kit with a purchase, where the function exists."""
    from tests.test_role_actions import test_every_aws_call_is_allowed_to_the_role_that_makes_it as check

    check(bought)


def test_control_tower_rules_pass_with_a_purchase(bought, guard):
    """AWS Control Tower's cfn-guard rules over the purchase stack; findings only as allow-listed, and no stale entry."""
    path = Path(bought.assembly.directory) / bought.stacks["purchase"].template_file
    paths = _paths(bought.stacks["purchase"])
    found = [Finding("purchase", "purchase", c, lid, paths.get(lid, lid)) for c, lid in run_guard(guard, {"purchase": path})["purchase"]]
    assert [str(f) for f in found if not any(_allowed(e, f) for e in allowlist())] == []
    # The allow-list's purchase-stack entries are kept honest here, the only place that stack exists.
    stale = [e for e in allowlist() if e["stack"] == "purchase" and not any(_allowed(e, f) for f in found)]
    assert stale == []


def test_purchase_and_a_real_reservation_id_are_refused(raw_with):
    """Both set would buy a second block next to the one the profile names."""
    raw = raw_with("capacity.reservation_id", "cr-0123456789abcdef0", "capacity.purchase", PURCHASE)
    with pytest.raises(ProfileError, match=r"capacity\.purchase = 'cb-0123456789abcdef0': set together with capacity\.reservation_id"):
        plan_mod.build(profile_files.parse(raw))


def test_the_plan_carries_the_purchase(bought):
    the_plan = bought.plan
    assert the_plan.purchase is not None
    assert the_plan.purchase.instance_hours == the_plan.instance_count * the_plan.block_duration_hours
    assert str(the_plan.purchase.upfront_fee_usd) == FEE


def test_the_function_bundle_imports_without_the_cli_or_the_plan(bought):
    """The asset CDK bundles (stacks/function_code.py copies only the listed modules) must import on its own in the
    Lambda Python runtime, which has boto3 but not pydantic: no pdkit.model.plan, console or aws_clients on the import path."""
    capacity = bought.template_json("purchase")
    (fn,) = [r for k, r in _of_type(capacity, "AWS::Lambda::Function").items() if k.startswith("PurchaseFunction")]
    asset = Path(bought.assembly.directory) / f"asset.{fn['Properties']['Code']['S3Key'].removesuffix('.zip')}"
    probe = (
        "import sys; import pdkit.functions.capacity_purchase as m; "
        "bad = sorted(n for n in sys.modules if n in ('pydantic', 'pdkit.model.plan', 'pdkit.console', 'pdkit.ops.aws_clients', 'yaml')); "
        "print(m.__file__); print(bad)"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=asset, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    where, bad = done.stdout.splitlines()
    assert where.startswith(str(asset))
    assert bad == "[]"


def test_templates_with_a_purchase_are_cfn_lint_clean(bought):
    """cfn-lint (the CloudFormation resource specification) over the two stacks the purchase changes."""
    from cfnlint.api import ManualArgs, lint

    from tests.test_cfn_lint import _allowed as lint_allowed

    for name in ("purchase", "capacity", "observability"):
        template = bought.template_json(name)
        matches = lint(json.dumps(template), regions=[bought.plan.region], config=ManualArgs(regions=[bought.plan.region]))
        assert [f"{m.rule.id} {m.message}" for m in matches if not lint_allowed(m, template)] == [], name
