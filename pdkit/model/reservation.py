"""Rules about a Capacity Reservation, shared by the deploy-time guard (Lambda), the purchase (Lambda), the block
lifecycle automation (Lambda) and the CLI (`pdkit preflight`, `capacity status`, `nodes up`). Standard library only:
it is bundled into Lambda functions as is.

Two readings live here, once:
- `STATES`: what each state of DescribeCapacityReservations' `State` means for the deployment;
- `instance_count`: how many instances the block has, or will have once it starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

PLACEHOLDER = "cr-00000000000000000"
# EventBridge detail-types; some EC2 doc versions print "Capacity Block Reservation ...", so match both.
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-monitor.html
DELIVERED = ("Capacity Block Delivered", "Capacity Block Reservation Delivered")
EXPIRING = ("Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning")

# Before a block starts EC2 reports TotalInstanceCount and AvailableInstanceCount 0; the count it will have is this
# AWS-set tag (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-view.html). AWS ParallelCluster
# reads the same tag (cli/src/pcluster/validators/ec2_validators.py, CapacityReservationSizeValidator).
REQUESTED_QUANTITY_TAG = "aws:ec2capacityreservation:incrementalRequestedQuantity"

BLOCK_STATES_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-view.html"
STATE_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityReservation.html"
VIEW_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservations-view.html"
BUY_AGAIN = "buy a new block (`pdkit capacity offerings`) and update capacity.reservation_id"


@dataclass(frozen=True)
class StateRule:
    """What one reservation state means for the kit.

    `live`: the block is paid for or may still be delivered. The deploy-time guard lets a deployment proceed on
    it (node groups are created at desired 0, so nothing launches before the block is active), and the purchase
    handler holds it: a Create that finds its own tag on it adopts it instead of buying again. One answer for
    both, because a block the purchase adopts is checked by the guard next, and a block the guard would pass
    must never be bought a second time.
    `confirmed`: paid and dated (active or scheduled): preflight passes it, EC2 extends only these.
    """

    live: bool
    confirmed: bool
    meaning: str
    todo: str
    source: str


# Every state of botocore's ec2 CapacityReservationState enum (tests/test_reservation_states.py reads the installed
# model, so a state botocore adds later fails that test until it has a row here).
STATES: dict[str, StateRule] = {
    "active": StateRule(True, True, "instances can launch", "", BLOCK_STATES_DOC),
    "scheduled": StateRule(
        True,
        True,
        f"paid, not started yet; EC2 reports 0 instances until the start, the count is the block's {REQUESTED_QUANTITY_TAG} tag",
        "wait for the start; `pdkit nodes up` then (the kit's lifecycle rule also scales up at start)",
        BLOCK_STATES_DOC,
    ),
    "payment-pending": StateRule(
        True,
        False,
        "bought, the upfront payment is not processed yet (EC2 releases the block if it fails within 12 h)",
        "wait, then run `pdkit capacity status` again",
        BLOCK_STATES_DOC,
    ),
    # A reservation just created can read pending for up to 5 minutes (eventual consistency); AWS ParallelCluster
    # mocks a just-bought Capacity Block as pending (tests/fixtures/ec2/parallelcluster-capacity-block-pending.json).
    "pending": StateRule(
        True,
        False,
        "the request succeeded, EC2 is still provisioning it (minutes after a purchase)",
        "wait a few minutes, then run `pdkit capacity status` again",
        VIEW_DOC,
    ),
    "assessing": StateRule(
        True, False, "EC2 is assessing the request (future-dated reservation)", "wait, then run `pdkit capacity status` again", STATE_DOC
    ),
    "delayed": StateRule(
        True,
        False,
        "EC2 cannot deliver it by the requested start (future-dated reservation); it may still come",
        "wait; check the new start in the EC2 console, `pdkit nodes up` once it is active",
        STATE_DOC,
    ),
    "payment-failed": StateRule(
        False,
        False,
        "the upfront payment was not processed within 12 h; EC2 released the block",
        "fix the payment method, then buy again: `pdkit capacity offerings`",
        BLOCK_STATES_DOC,
    ),
    "expired": StateRule(False, False, "ended; its instances were terminated", BUY_AGAIN, BLOCK_STATES_DOC),
    "cancelled": StateRule(False, False, "cancelled; the capacity is no longer yours", BUY_AGAIN, STATE_DOC),
    "cancelling": StateRule(
        False, False, "being cancelled: the capacity is released, charges continue for the wind-down", BUY_AGAIN, STATE_DOC
    ),
    "failed": StateRule(False, False, "the request failed (parameters, capacity or instance limits)", BUY_AGAIN, STATE_DOC),
    "unsupported": StateRule(False, False, "EC2 cannot support the request; it will not be delivered", BUY_AGAIN, STATE_DOC),
    # In botocore's enum (1.44.8) but described by no EC2 document: nothing can be known to launch into it.
    "unavailable": StateRule(
        False,
        False,
        "unavailable (a state EC2 does not document)",
        "ask AWS Support about the block before buying another (it may still be billed), then update capacity.reservation_id",
        STATE_DOC,
    ),
}
UNKNOWN = StateRule(False, False, "a state the kit does not know", "check the reservation in the EC2 console", STATE_DOC)

# The guard lets a deployment proceed in these; the purchase handler holds (adopts, never re-buys) a block in them.
DEPLOYABLE_STATES = tuple(s for s, rule in STATES.items() if rule.live)
HELD_STATES = frozenset(DEPLOYABLE_STATES)
# Paid and dated: EC2 extends only these (capacity-blocks-extend), preflight passes them.
CONFIRMED_STATES = frozenset(s for s, rule in STATES.items() if rule.confirmed)


def state_rule(state: str) -> StateRule:
    return STATES.get(state, UNKNOWN)


@dataclass(frozen=True)
class Count:
    """How many instances the block has or will have. `instances` is None when EC2 reports neither a count nor the
    tag; `source` names where the number came from; `note` says when the two disagree."""

    instances: int | None
    source: str
    note: str = ""

    def describe(self) -> str:
        if self.instances is None:
            return f"no instance count (TotalInstanceCount 0 and no {REQUESTED_QUANTITY_TAG} tag)"
        where = "" if self.source == "TotalInstanceCount" else f" (its {REQUESTED_QUANTITY_TAG} tag: EC2 reports TotalInstanceCount 0)"
        return f"{self.instances} instances{where}"


def instance_count(raw: dict[str, Any]) -> Count:
    """The block's instance count from one DescribeCapacityReservations item.

    A started block's TotalInstanceCount is what EC2 reserves now ("the total number of instances for which the
    Capacity Reservation reserves capacity", botocore ec2 model), so a positive one wins; when the tag says
    otherwise the disagreement is noted (the checks then hold the block to what EC2 reserves, never to what was
    asked for). Before the start TotalInstanceCount is 0 and the tag is the count. Neither (0 and no usable tag):
    None, which every check refuses rather than guess. AWS ParallelCluster takes max(total, tag) for its ceiling
    check; the kit needs an exact count, so it does not.
    """
    total = _positive(raw.get("TotalInstanceCount"))
    tags = {t.get("Key"): t.get("Value") for t in raw.get("Tags") or [] if isinstance(t, dict)}
    tagged = _positive(tags.get(REQUESTED_QUANTITY_TAG))
    if total is not None:
        note = "" if tagged in (None, total) else f"TotalInstanceCount {total}, but its {REQUESTED_QUANTITY_TAG} tag says {tagged}"
        return Count(total, "TotalInstanceCount", note)
    if tagged is not None:
        return Count(tagged, REQUESTED_QUANTITY_TAG)
    return Count(None, "none")


def _positive(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


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
    rule = state_rule(state)
    if not rule.live:
        found.append(f"reservation {want.reservation_id} is {state} ({rule.meaning}): {rule.todo}")

    def differs(label: str, key: str, wanted: str) -> None:
        if reservation.get(key) != wanted:
            found.append(
                f"reservation {want.reservation_id} has {label} {reservation.get(key)!r} but the profile says {wanted!r}: "
                "make the profile match the block"
            )

    differs("instance type", "InstanceType", want.instance_type)
    count = instance_count(reservation)
    if count.instances != want.instance_count:
        disagreement = f" (EC2 reports {count.note})" if count.note else ""
        found.append(
            f"reservation {want.reservation_id} has {count.describe()}{disagreement} but the profile says {want.instance_count}: "
            "make the profile match the block"
        )
    differs("Availability Zone", "AvailabilityZone", want.availability_zone)
    return found


def drain_due(end: datetime, now: datetime, lead_minutes: int) -> bool:
    """True once the block ends within `lead_minutes`: ahead of EC2's T-40 warning and T-30 termination."""
    return now >= end - timedelta(minutes=lead_minutes)


# Markers on the reservation itself (EC2 CreateTags), read by the lifecycle function's periodic check: a block that
# carries either was scaled up or down on purpose (by the function or by `pdkit nodes`), so the check's catch-up for a
# lost "Capacity Block Delivered" event never undoes it (pdkit/functions/block_lifecycle.py).
DRAINED_TAG = "pdkit/drained-at"
SCALED_UP_TAG = "pdkit/scaled-up-at"
