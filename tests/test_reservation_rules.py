"""pdkit/model/reservation.py at its edges: the drain boundary itself, a reservation without a State, and each
mismatch naming what the block really has.

EC2 terminates Capacity Block instances 30 minutes before the block's end time and sends the expiration
warning 40 minutes before it (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-monitor.html);
the kit drains at T-lead, and at exactly T-lead the drain is due. DescribeCapacityReservations returns State,
InstanceType, TotalInstanceCount and AvailabilityZone (botocore ec2 service-2.json, CapacityReservation).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pdkit.model import reservation

RID = "cr-0123456789abcdef0"
END = datetime(2026, 12, 3, 11, 30, tzinfo=UTC)
WANT = reservation.Expected(reservation_id=RID, instance_type="p5en.48xlarge", instance_count=4, availability_zone="eu-south-2a")
BLOCK = {"State": "active", "InstanceType": "p5en.48xlarge", "TotalInstanceCount": 4, "AvailabilityZone": "eu-south-2a"}


@pytest.mark.parametrize(("before_end", "due"), [(timedelta(minutes=60), True), (timedelta(minutes=60, seconds=1), False)])
def test_the_drain_is_due_at_exactly_the_lead_time(before_end, due):
    assert reservation.drain_due(END, END - before_end, 60) is due


def test_the_placeholder_says_how_to_buy_a_block():
    placeholder = reservation.Expected(reservation.PLACEHOLDER, "p5en.48xlarge", 4, "eu-south-2a")
    (problem,) = reservation.problems(BLOCK, placeholder)
    assert problem == (
        f"capacity.reservation_id is the placeholder {reservation.PLACEHOLDER}: buy a block with `pdkit capacity offerings` and "
        "`pdkit capacity buy OFFERING_ID`, then put its cr- id in the profile"
    )


def test_a_reservation_without_a_state_is_refused_as_unknown():
    state_less = {k: v for k, v in BLOCK.items() if k != "State"}
    assert reservation.problems(state_less, WANT) == [
        f"reservation {RID} is unknown (a state the kit does not know): check the reservation in the EC2 console"
    ]


@pytest.mark.parametrize(
    ("key", "value", "label", "wanted"),
    [
        ("InstanceType", "p5.48xlarge", "instance type", "'p5en.48xlarge'"),
        ("AvailabilityZone", "eu-south-2b", "Availability Zone", "'eu-south-2a'"),
    ],
)
def test_a_mismatch_names_the_field_and_what_the_block_has(key, value, label, wanted):
    assert reservation.problems(BLOCK | {key: value}, WANT) == [
        f"reservation {RID} has {label} {value!r} but the profile says {wanted}: make the profile match the block"
    ]


def test_a_count_mismatch_names_what_the_block_has():
    assert reservation.problems(BLOCK | {"TotalInstanceCount": 2}, WANT) == [
        f"reservation {RID} has 2 instances but the profile says 4: make the profile match the block"
    ]
