"""Every state a Capacity Reservation can be in has one stated behaviour (pdkit/model/reservation.py STATES), and the
deploy-time guard, the purchase handler, preflight, `capacity status` and `nodes up` all read it.

The states come from the installed botocore's ec2 model (CapacityReservationState), so a state botocore adds later
fails here until the table says what it means. Their meanings: the EC2 API reference, CapacityReservation.State
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityReservation.html), and for Capacity Blocks the
EC2 User Guide, "View Capacity Blocks" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-view.html).
"""

from __future__ import annotations

import boto3
import botocore.session
import pytest
from botocore.stub import Stubber

from pdkit.functions import capacity_purchase, reservation_guard
from pdkit.model import reservation
from pdkit.ops import capacity
from tests.fixtures.cmd_support import CR, REGION, pending_block

pytest_plugins = ["tests.fixtures.cmd_fixtures"]

MODEL_STATES = botocore.session.get_session().get_service_model("ec2").shape_for("CapacityReservationState").enum


def test_every_state_of_the_ec2_model_has_a_row_and_no_row_is_invented():
    assert sorted(reservation.STATES) == sorted(MODEL_STATES)


@pytest.mark.parametrize("state", MODEL_STATES)
def test_each_row_says_what_it_means_and_what_to_do(state):
    rule = reservation.STATES[state]
    assert rule.meaning
    assert rule.source.startswith("https://docs.aws.amazon.com/AWSEC2/")
    if state != "active":
        assert rule.todo, "every state but active tells the operator the next step"
    assert not (rule.confirmed and not rule.live), "a confirmed block is a live one"


def _guard_verdict(state: str) -> bool:
    """What the deploy-time guard answers CloudFormation for a matching block in `state` (Create, Stubber)."""
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="test", aws_secret_access_key="test")  # noqa: S106
    stub = Stubber(ec2)
    stub.add_response(
        "describe_capacity_reservations", {"CapacityReservations": [pending_block(State=state)]}, {"CapacityReservationIds": [CR]}
    )
    event = {
        "RequestType": "Create",
        "RequestId": "unique id for this create request",
        "ResponseURL": "https://cloudformation-custom-resource-response.example/signed",
        "ResourceType": "Custom::CapacityBlockGuard",
        "LogicalResourceId": "ReservationGuardCheck",
        "StackId": "arn:aws:cloudformation:us-west-2:123456789012:stack/mystack/5b918d10-cd98-11ea-90d5-0a9cd3354c10",
        "ResourceProperties": {
            "ReservationId": CR,
            "InstanceType": "p5en.48xlarge",
            "InstanceCount": "4",
            "AvailabilityZone": "eu-south-2a",
        },
    }
    answers = []
    with stub:
        reservation_guard.handler(event, None, ec2=ec2, respond=lambda e, **kw: answers.append(kw))
    ((answer),) = answers
    return bool(answer["success"])


@pytest.mark.parametrize("state", MODEL_STATES)
def test_the_guard_and_the_purchase_handler_agree_on_every_state(state):
    """A block the purchase handler holds (adopts instead of buying again) must pass the guard that checks it next, or
    the deploy fails on a block it just kept; a block the guard lets a deploy onto must never be bought a second time.
    So for every state: the guard proceeds exactly where the purchase handler holds the block."""
    assert _guard_verdict(state) is (state in capacity_purchase.HELD_STATES)
    assert (state in capacity_purchase.HELD_STATES) is reservation.STATES[state].live


def test_a_state_the_kit_does_not_know_is_refused_and_never_held():
    """A state newer than the installed botocore (or a reply without State) stops the deploy with a pointer to the
    console, and the purchase handler does not treat it as its block."""
    want = reservation.Expected(CR, "p5en.48xlarge", 4, "eu-south-2a")
    (problem,) = reservation.problems(pending_block(State="hibernating"), want)
    assert problem == f"reservation {CR} is hibernating (a state the kit does not know): check the reservation in the EC2 console"
    assert "hibernating" not in capacity_purchase.HELD_STATES


@pytest.mark.parametrize("state", MODEL_STATES)
def test_capacity_status_tells_the_tables_meaning(state):
    """`pdkit capacity status` and `nodes up` print STATE_MEANING: the table's words, not a second list."""
    rule = reservation.STATES[state]
    assert capacity.STATE_MEANING[state] == (rule.meaning, rule.todo)


def test_extensions_and_the_serving_window_use_the_confirmed_states():
    """EC2 extends only active and scheduled blocks (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-extend.html)."""
    assert capacity.USABLE_STATES == {"active", "scheduled"} == reservation.CONFIRMED_STATES


def test_a_block_just_bought_is_live_but_not_confirmed():
    """pending (EC2 still provisioning: up to 5 minutes after a create, capacity-reservations-view), payment-pending
    (EC2 releases the block if payment fails within 12 h), assessing and delayed (the block may still come): a deploy
    may proceed, nothing launches before active, and preflight warns instead of passing."""
    for state in ("pending", "payment-pending", "assessing", "delayed"):
        assert (reservation.STATES[state].live, reservation.STATES[state].confirmed) == (True, False), state


@pytest.mark.parametrize("state", MODEL_STATES)
def test_preflight_grades_each_state_as_the_guard_would(state, aws, pins, tmp_path, capsys):
    """PASS where the block is paid and dated, WARN where the guard lets the deploy through but EC2 has not confirmed
    the block, FAIL where the guard refuses: preflight predicts the deploy's verdict."""
    from pdkit.cli.main import main
    from tests.fixtures.cmd_support import real_profile
    from tests.test_cmd_preflight import rows, stub_checks

    stub_checks(aws, reservation={"State": state})
    main(["preflight", "--profile", real_profile(tmp_path), "--output", "json"])
    rule = reservation.STATES[state]
    want = "PASS" if rule.confirmed else "WARN" if rule.live else "FAIL"
    assert rows(capsys)["Reservation state"]["status"] == want


def test_runbook_00_states_the_table_as_the_code_has_it():
    """The operator reads the state table in runbooks/00-capacity-block.md ("4. States"); every state has its row
    there, and its deploy, purchase and preflight columns say what the code does."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "runbooks" / "00-capacity-block.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`") and cells[0].strip("`") in reservation.STATES:
            rows[cells[0].strip("`")] = cells
    assert sorted(rows) == sorted(MODEL_STATES)
    for state, (_, _, deploy, bought, checked, _) in rows.items():
        rule = reservation.STATES[state]
        assert deploy == ("proceeds" if rule.live else "refused"), state
        assert bought == ("holds it" if rule.live else "not adopted"), state
        assert checked.split()[0].rstrip(":") == ("PASS" if rule.confirmed else "WARN" if rule.live else "FAIL"), state
