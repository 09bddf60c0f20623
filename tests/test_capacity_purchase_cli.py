"""`pdkit preflight` and `pdkit status` with capacity.purchase: the block is the one the purchase stack bought, read from
its ReservationId output (cloudformation DescribeStacks, Outputs), or when that stack is gone by the block's own purchase
tag; before the purchase they say `make deploy` buys it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from pdkit.cli.main import main
from pdkit.model.plan import purchase_id
from pdkit.ops.purchase import PURCHASE_TAG
from tests.fixtures.cmd_support import CR, instances_page, stub_reservation
from tests.fixtures.purchase_fixtures import held_block
from tests.test_cmd_capacity import purchase_profile, stub_capacity_stack
from tests.test_cmd_preflight import rows, stub_checks

pytest_plugins = ["tests.fixtures.cmd_fixtures"]  # aws, and pins: the add-on pins fixture preflight reads

OUTPUTS = [{"OutputKey": "ReservationId", "OutputValue": CR}]


def test_preflight_checks_the_block_the_stack_bought(aws, pins, tmp_path, capsys):
    """The reservation, interconnect and topology checks run against the bought id, as on a profile that names it."""
    stub_capacity_stack(aws, outputs=OUTPUTS)
    stub_checks(aws)
    assert main(["preflight", "--profile", purchase_profile(tmp_path), "--output", "json"]) == 0
    found = rows(capsys)
    assert found["Reservation"]["status"] == "PASS"
    assert CR in found["Reservation"]["detail"]
    assert found["Reservation topology"]["status"] == "PASS"


def test_preflight_before_the_purchase_passes_and_names_the_next_step(aws, pins, tmp_path, capsys):
    """Before the first deploy there is nothing to check yet: the row says `make deploy` buys it, and preflight does not fail."""
    stub_capacity_stack(aws, exists=False)
    stub_checks(aws, placeholder=True)
    assert main(["preflight", "--profile", purchase_profile(tmp_path), "--output", "json"]) == 0
    row = rows(capsys)["Reservation"]
    assert row["status"] == "PASS"
    assert row["detail"].startswith("Capacity Block not bought yet: `make deploy` buys it")


def test_preflight_names_the_missing_describe_stacks_permission(aws, pins, tmp_path, capsys):
    """AccessDenied on DescribeStacks is one FAIL row naming cloudformation:DescribeStacks, not a traceback."""
    aws("cloudformation").add_client_error(
        "describe_stacks", "AccessDenied", "not authorized", 403, expected_params={"StackName": "glm51-2p2d-purchase"}
    )
    stub_checks(aws, placeholder=True)
    assert main(["preflight", "--profile", purchase_profile(tmp_path), "--output", "json"]) == 1
    row = rows(capsys)["Reservation"]
    assert row["status"] == "FAIL"
    assert "cloudformation:DescribeStacks" in row["detail"]


def test_status_names_the_bought_block(aws, tmp_path, capsys):
    """`pdkit status` describes the bought reservation (its id from the stack output), not the profile's placeholder."""
    from tests.test_cmd_status import stub_aws

    stub_capacity_stack(aws, outputs=OUTPUTS)
    stub_aws(aws, desired=0)
    main(["status", "--profile", purchase_profile(tmp_path), "--output", "json"])
    items = [r["item"] for r in json.loads(capsys.readouterr().out)["rows"]]
    assert f"block {CR}" in items


# --- the purchase stack is gone (a failed first create rolled it back) but the block it bought is billing -------------
# EC2 keeps the reservation and its tags whatever happens to the stack; the tag's value is the plan's purchase id
# (pdkit.model.plan.purchase_id), which `pdkit` computes from the profile without the stack.
PID = purchase_id("glm51-2p2d", "eu-south-2", "cb-0123456789abcdef0")
START = datetime(2026, 12, 5, 11, 30, tzinfo=UTC)


def tagged_block(value: str = PID, state: str = "scheduled") -> dict[str, Any]:
    """AWS ParallelCluster's recorded Capacity Block (tests/fixtures/purchase_fixtures.py) carrying a purchase tag."""
    return held_block(
        CR,
        instance_type="p5en.48xlarge",
        availability_zone="eu-south-2a",
        start=START,
        end=START + timedelta(hours=48),
        tags={PURCHASE_TAG: value},
        state=state,
    )


def test_capacity_status_finds_the_billing_block_by_its_tag_when_the_stack_is_gone(aws, tmp_path, capsys):
    """Issue 25: after a rolled-back first create the stack and its output are gone but the block bills; `capacity
    status` reports that block (found by the tag), not "not bought yet"."""
    stub_capacity_stack(aws, exists=False, tagged=[tagged_block()])
    stub_reservation(aws, State="scheduled", StartDate=START, CapacityBlockId=None)
    aws("ec2").add_response("describe_instances", instances_page())
    assert main(["capacity", "status", "--profile", purchase_profile(tmp_path), "--output", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["reservation"]["id"] == CR
    assert "not bought yet" not in out + err


def test_preflight_checks_the_block_found_by_its_tag(aws, pins, tmp_path, capsys):
    """`pdkit preflight` checks the block the tag names, as it would the stack's output."""
    stub_capacity_stack(aws, exists=False, tagged=[tagged_block()])
    stub_checks(aws)
    assert main(["preflight", "--profile", purchase_profile(tmp_path), "--output", "json"]) == 0
    row = rows(capsys)["Reservation"]
    assert row["status"] == "PASS"
    assert CR in row["detail"]


def test_nodes_up_speaks_of_the_tagged_block_not_of_a_purchase(aws, tmp_path, capsys):
    """`pdkit nodes up` on a block found by its tag that has not started: it says when it starts (the block's own
    state), never "not bought yet", which would send the operator to buy again."""
    stub_capacity_stack(aws, exists=False, tagged=[tagged_block()])
    stub_reservation(aws, State="scheduled", StartDate=START)
    assert main(["nodes", "up", "--profile", purchase_profile(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "starts" in err
    assert "not bought yet" not in err


def test_a_block_with_another_purchase_tag_is_not_taken(aws, tmp_path, capsys):
    """Another deployment's (or another offering's) block carries another tag value: not this deployment's block."""
    stub_capacity_stack(aws, exists=False, tagged=[tagged_block(value=purchase_id("other", "eu-south-2", "cb-0123456789abcdef0"))])
    assert main(["capacity", "status", "--profile", purchase_profile(tmp_path)]) == 2
    assert "Capacity Block not bought yet: `make deploy` buys it" in capsys.readouterr().err
