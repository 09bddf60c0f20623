"""Rules about a Capacity Reservation, shared by the deploy-time guard (Lambda), the block
lifecycle automation (Lambda) and `pdkit preflight`. Standard library only: it is bundled into
Lambda functions as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

PLACEHOLDER = "cr-00000000000000000"
# Node groups can be created (desired 0) on a block that has not started yet.
DEPLOYABLE_STATES = ("scheduled", "active", "payment-pending")
# EventBridge detail-types; some EC2 doc versions print "Capacity Block Reservation ...", so match both.
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-monitor.html
DELIVERED = ("Capacity Block Delivered", "Capacity Block Reservation Delivered")
EXPIRING = ("Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning")


@dataclass(frozen=True)
class Expected:
    reservation_id: str
    instance_type: str
    instance_count: int
    availability_zone: str


def problems(reservation: dict[str, Any] | None, want: Expected) -> list[str]:
    """Why this reservation cannot carry the deployment; empty when it can. Each entry says the fix."""
    if want.reservation_id == PLACEHOLDER:
        return [
            f"capacity.reservation_id is the placeholder {PLACEHOLDER}: buy a block with `pdkit capacity offerings` and "
            "`pdkit capacity buy OFFERING_ID`, then put its cr- id in the profile"
        ]
    if reservation is None:
        return [
            f"reservation {want.reservation_id} does not exist in this account and region: check capacity.reservation_id and aws.region"
        ]
    found: list[str] = []
    state = reservation.get("State", "unknown")
    if state not in DEPLOYABLE_STATES:
        found.append(
            f"reservation {want.reservation_id} is {state}: buy a new block (`pdkit capacity offerings`) and update capacity.reservation_id"
        )
    for label, key, wanted in (
        ("instance type", "InstanceType", want.instance_type),
        ("instance count", "TotalInstanceCount", want.instance_count),
        ("Availability Zone", "AvailabilityZone", want.availability_zone),
    ):
        if reservation.get(key) != wanted:
            found.append(
                f"reservation {want.reservation_id} has {label} {reservation.get(key)!r} but the profile says {wanted!r}: make the profile match the block"
            )
    return found


def drain_due(end: datetime, now: datetime, lead_minutes: int) -> bool:
    """True once the block ends within `lead_minutes`: ahead of EC2's T-40 warning and T-30 termination."""
    return now >= end - timedelta(minutes=lead_minutes)
