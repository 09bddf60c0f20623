"""`make deploy` with capacity.purchase: `pdkit deploy-check` shows the fee, the dates and the instance-hours, and
needs the fee typed (or --yes) before `cdk deploy` runs; only when this deploy creates the purchase resource.

AWS calls go through botocore's Stubber (cloudformation GetTemplate, ec2 DescribeCapacityBlockOfferings, checked
against their service models). The purchase itself cannot be cancelled
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-pricing-billing.html), so the fee is confirmed
by a person before CloudFormation is asked to create the resource that buys it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pdkit import console
from pdkit.cli.main import main
from pdkit.model.profile import PLACEHOLDER_RESERVATION
from tests.conftest import PURCHASE, Kit
from tests.fixtures import cmd_support
from tests.fixtures.addon_versions import stub_gate
from tests.fixtures.cmd_support import profile, stub_nodegroups
from tests.fixtures.purchase_fixtures import held_block
from tests.test_cmd_capacity import TAG_LOOKUP
from tests.test_deploy_check import stub_template

pytest_plugins = ["tests.fixtures.cmd_fixtures"]


@pytest.fixture(autouse=True)
def addons_listed(request: pytest.FixtureRequest) -> None:
    """deploy-check first gates the add-on pins (tests/test_addon_versions.py): EKS lists each of them here."""
    if "aws" in request.fixturenames:
        stub_gate(request.getfixturevalue("aws"))


STACK = "glm51-2p2d-capacity"
PURCHASE_STACK = "glm51-2p2d-purchase"
OFFERING, FEE = PURCHASE["offering_id"], PURCHASE["confirm_upfront_fee_usd"]
START = datetime(2026, 12, 3, 11, 30, tzinfo=UTC)


def not_deployed(aws: Any, tagged: list[dict[str, Any]] | None = None) -> None:
    """CloudFormation answers GetTemplate for an unknown stack with ValidationError 'Stack with id ... does not exist';
    then the purchase's tag is looked for (DescribeCapacityReservations, documented filters): `tagged` (none by default)."""
    for _ in range(2):  # the roll check, then the purchase check
        aws("cloudformation").add_client_error(
            "get_template",
            service_error_code="ValidationError",
            service_message=f"Stack with id {STACK} does not exist",
            http_status_code=400,
        )
    aws("ec2").add_response("describe_capacity_reservations", {"CapacityReservations": tagged or []}, TAG_LOOKUP)


def offering(aws: Any, fee: str = FEE) -> None:
    aws("ec2").add_response(
        "describe_capacity_block_offerings",
        {"CapacityBlockOfferings": [cmd_support.offering(OFFERING, fee=fee, start=START)]},
        {"InstanceType": "p5en.48xlarge", "InstanceCount": 4, "CapacityDurationHours": 48},
    )


def run(aws: Any, kit: Kit, tmp_path: Path, *extra: str) -> int:
    aws("eks")
    aws("ssm")
    path = profile(tmp_path, capacity__reservation_id=PLACEHOLDER_RESERVATION, capacity__purchase=PURCHASE)
    return main(["deploy-check", "--cdk-out", str(Path(kit.assembly.directory)), "--profile", path, *extra])


def test_first_deploy_shows_the_money_and_needs_the_fee_typed(aws, bought, tmp_path, capsys, monkeypatch):
    """Fee, dates and instance-hours (4 x 48 h = 192) are printed, then the operator types the fee."""
    not_deployed(aws)
    offering(aws)
    monkeypatch.setattr(console, "interactive", lambda: True)
    typed: list[str] = []
    monkeypatch.setattr(console, "ask", lambda prompt: typed.append(prompt) or "98,765.43")
    assert run(aws, bought, tmp_path) == 0
    out = capsys.readouterr().out
    assert f"will buy Capacity Block offering {OFFERING}" in out
    assert "2026-12-03 11:30 UTC -> 2026-12-05 11:30 UTC (48 h, 192 instance-hours)" in out
    assert "USD 98,765.43" in out
    assert len(typed) == 1


def test_a_wrong_fee_typed_stops_the_deploy(aws, bought, tmp_path, capsys, monkeypatch):
    not_deployed(aws)
    offering(aws)
    monkeypatch.setattr(console, "interactive", lambda: True)
    monkeypatch.setattr(console, "ask", lambda prompt: "98765")
    assert run(aws, bought, tmp_path) == 2
    assert "cancelled: what you typed is not the fee; nothing was bought" in capsys.readouterr().err


def test_without_a_terminal_it_needs_yes(aws, bought, tmp_path, capsys):
    """CI has no terminal: refuse unless --yes (YES=1 in make deploy), as `pdkit capacity buy` does."""
    not_deployed(aws)
    offering(aws)
    assert run(aws, bought, tmp_path) == 2
    assert "add --yes once you have checked the fee" in capsys.readouterr().err


def test_yes_skips_the_prompt_but_not_the_fee_check(aws, bought, tmp_path, capsys):
    not_deployed(aws)
    offering(aws, fee="99000.00")
    assert run(aws, bought, tmp_path, "--yes") == 2
    err = capsys.readouterr().err
    assert "upfront fee is now USD 99,000.00, the profile confirmed USD 98,765.43" in err
    assert err.count("\n") == 1


def test_a_stack_that_already_bought_is_not_asked_again(aws, bought, tmp_path, capsys):
    """Update never buys (pdkit/functions/capacity_purchase.py), so a deployed purchase resource needs no fee."""
    stub_template(aws, bought.template_json("capacity"))  # the roll check
    stub_template(aws, bought.template_json("purchase"), PURCHASE_STACK)  # the purchase check: the purchase stack holds it
    assert run(aws, bought, tmp_path) == 0
    assert "this deploy buys nothing" in capsys.readouterr().out


def _switch_to_literal(aws: Any, bought: Kit, output: str) -> None:
    """The deployed capacity stack read its block from the purchase stack (GetTemplate: the bought kit's capacity
    template; DescribeStacks of the purchase stack: its ReservationId output), and the new profile names a literal id
    (the default kit's launch template holds capacity.reservation_id)."""
    stub_template(aws, bought.template_json("capacity"))
    aws("cloudformation").add_response(
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackName": PURCHASE_STACK,
                    "CreationTime": START,
                    "StackStatus": "UPDATE_COMPLETE",
                    "Outputs": [{"OutputKey": "ReservationId", "OutputValue": output}],
                }
            ]
        },
        {"StackName": PURCHASE_STACK},
    )
    stub_nodegroups(aws, 2, ("glm51-2p2d-decode", "glm51-2p2d-prefill"))


def test_switching_a_bought_block_to_its_literal_id_names_the_safe_path(aws, bought, kit, capsys):
    """From Fn::GetAtt(purchase, ReservationId) to the literal id the deployed stack's ReservationId output holds: the
    same block, and deploy-check says so. It still counts as a new launch template version: AWS::EC2::LaunchTemplate
    makes a new version on an update of LaunchTemplateData, and the CloudFormation User Guide documents no rule that
    a changed property expression resolving to the same value skips the update
    (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ec2-launchtemplate.html)."""
    _switch_to_literal(aws, bought, PLACEHOLDER_RESERVATION)
    aws("ssm")
    assert main(["deploy-check", "--cdk-out", str(Path(kit.assembly.directory))]) == 2
    err = capsys.readouterr().err
    assert f"names the bought block {PLACEHOLDER_RESERVATION} by its literal id instead of the purchase resource's attribute" in err
    assert '"From a bought block to capacity.reservation_id"' in err
    assert "Fix: pdkit nodes down && make deploy && pdkit nodes up" in err


def test_a_literal_id_of_another_block_is_an_ordinary_change(aws, bought, kit, capsys):
    """Only the id the stack bought is the same block; any other literal is a new target for the node groups."""
    _switch_to_literal(aws, bought, "cr-0ffffffffffffffff")
    aws("ssm")
    assert main(["deploy-check", "--cdk-out", str(Path(kit.assembly.directory))]) == 2
    err = capsys.readouterr().err
    assert "gets a new version (CapacityReservationSpecification changed)" in err
    assert "names the bought block" not in err


def test_a_retry_after_a_rolled_back_first_create_adopts_without_a_fee(aws, bought, tmp_path, capsys, monkeypatch):
    """The first create bought and rolled back: no stack, but a block tagged with this purchase's id (AWS
    ParallelCluster's recorded block, tests/fixtures/purchase_fixtures.py). deploy-check asks no fee and looks up no
    offering (sold, it is not listed any more: the check would otherwise stop the very deploy that adopts the block)."""
    from pdkit.ops.purchase import PURCHASE_TAG

    block = held_block(
        "cr-0fedcba9876543210",
        instance_type="p5en.48xlarge",
        availability_zone="eu-south-2a",
        start=START,
        end=START,
        tags={PURCHASE_TAG: bought.plan.purchase.purchase_id},
    )
    not_deployed(aws, tagged=[block])
    monkeypatch.setattr(console, "ask", lambda prompt: (_ for _ in ()).throw(AssertionError("asked for the fee")))
    assert run(aws, bought, tmp_path) == 0
    out = capsys.readouterr().out
    assert "cr-0fedcba9876543210 already carries this purchase's tag" in out
    assert "this deploy buys nothing" in out


def test_a_capacity_stack_that_bought_with_the_earlier_kit_is_refused_with_the_fix(aws, bought, tmp_path, capsys):
    """Before issue 25 the capacity stack held the purchase resource, its block tagged with a hash of that stack's id.
    This kit buys in the purchase stack, whose tag would not match: deploying would delete the old resource (keeping
    the block) and create a purchase that cannot find it. Refused before anything is deployed, naming the block."""
    earlier = bought.template_json("capacity")
    # The earlier kit's capacity template: this kit's purchase resource, as it was, inside the capacity stack.
    (logical_id, resource) = next(
        (k, r) for k, r in bought.template_json("purchase")["Resources"].items() if r["Type"] == "Custom::CapacityBlockPurchase"
    )
    earlier = {**earlier, "Resources": {**earlier["Resources"], logical_id: resource}}
    stub_template(aws, earlier)
    aws("cloudformation").add_response(
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackName": STACK,
                    "CreationTime": START,
                    "StackStatus": "UPDATE_COMPLETE",
                    "Outputs": [{"OutputKey": "ReservationId", "OutputValue": "cr-0fedcba9876543210"}],
                }
            ]
        },
        {"StackName": STACK},
    )
    assert run(aws, bought, tmp_path) == 2
    err = capsys.readouterr().err
    assert "bought cr-0fedcba9876543210 with the kit's earlier purchase resource" in err
    assert "Fix: put cr-0fedcba9876543210 in capacity.reservation_id and remove capacity.purchase" in err
    assert err.count("\n") == 1
