"""Custom resource that buys the profile's Capacity Block on Create, once, and never again.

The purchase path is pdkit.ops.purchase, the same code `pdkit capacity buy` runs; only the confirmation
differs: the operator typed the fee before `cdk deploy` (pdkit deploy-check), and here the offering's
current fee must still equal that fee to the cent.

Create, in this order, each step able to stop it:
1. look for a reservation already carrying this resource's purchase tag. The tag value is derived
   from StackId and LogicalResourceId, so a second delivery of the same Create (Lambda retries
   asynchronous invocations: https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html)
   or a Create after a rollback that kept the block adopts that block instead of buying another;
2. find the offering again (DescribeCapacityBlockOfferings has no offering-id filter, so the query
   the offering was listed with travels in the properties) and refuse unless instance type, count,
   AZ and upfront fee equal the profile's;
3. dry run (DryRunOperation means "you may");
4. PurchaseCapacityBlock once, on a client with retries off (pdkit.ops.client_config.PURCHASE); an
   unclear answer is followed by a lookup by tag (pdkit.ops.purchase.send_once), never by a resend;
5. wait (best effort, about a minute) until DescribeCapacityReservations shows the new block, so the
   deploy-time guard that checks it next does not refuse an id EC2 has not propagated yet.
Update never buys: a changed offering is refused with the fix, except while the stack rolls back
(CloudFormation then sends the previous properties as an Update, with no rollback flag:
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-requesttypes-update.html).
Delete never cancels: Capacity Blocks cannot be cancelled
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-pricing-billing.html); the
reason shown in the stack events says where the block is.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from pdkit.functions import cfn_response, reservation_guard
from pdkit.model import reservation
from pdkit.ops import capacity, purchase
from pdkit.ops.aws_errors import error_code

PURCHASE_PROPERTIES = (
    "OfferingId",
    "UpfrontFeeUsd",
    "InstanceType",
    "InstanceCount",
    "AvailabilityZone",
    "DurationHours",
    "EarliestStart",
    "LatestEnd",
)
# EC2 is eventually consistent: a reservation just bought may be unknown to DescribeCapacityReservations for a
# moment (https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html), and the deploy-time guard
# that runs next would refuse an unknown id. Wait up to VISIBLE_TRIES x VISIBLE_EVERY seconds for it.
VISIBLE_TRIES = 12
VISIBLE_EVERY = 5.0
# A reservation in one of these states is the block this resource bought earlier and still holds: the state table of
# pdkit/model/reservation.py, the same one the guard reads.
HELD_STATES = reservation.HELD_STATES


def purchase_id(event: dict[str, Any]) -> str:
    """The purchase tag value: the same for every delivery of this resource's Create in this stack."""
    return hashlib.sha256(f"{event['StackId']}|{event['LogicalResourceId']}".encode()).hexdigest()[:32]


def handler(
    event: dict[str, Any],
    context: Any,
    *,
    ec2: Any = None,
    purchase_ec2: Any = None,
    cloudformation: Any = None,
    respond: Any = cfn_response.send,
) -> None:
    kind = event["RequestType"]
    try:
        if kind == "Delete":
            _delete(event, respond)
        elif kind == "Update":
            _update(event, ec2 or _ec2(), cloudformation, respond)
        else:
            _create(event, ec2 or _ec2(), purchase_ec2 or _ec2(once=True), respond)
    except Exception as exc:  # any failure must still answer CloudFormation, or the stack waits for an hour
        physical = event.get("PhysicalResourceId") or f"purchase-{purchase_id(event)}"
        respond(event, success=False, reason=f"Capacity Block purchase: {_failure(exc)}; nothing more was sent", physical_id=physical)


def _create(event: dict[str, Any], ec2: Any, purchase_ec2: Any, respond: Any) -> None:
    props = event["ResourceProperties"]
    pid = purchase_id(event)
    tag = f"{purchase.PURCHASE_TAG}={pid}"
    held = [
        s
        for s in purchase.find_tagged(
            ec2, instance_type=props["InstanceType"], availability_zone=props["AvailabilityZone"], purchase_id=pid
        )
        if s.state in HELD_STATES
    ]
    if held:
        _bought(event, respond, held[0], f"{held[0].reservation_id} already carries this resource's tag {tag}: adopted, not bought again")
        return
    placeholder = f"purchase-{pid}"
    offer = find_offer(ec2, props)
    if offer is None:
        respond(
            event,
            success=False,
            reason=f"offering {props['OfferingId']} is not offered any more for {query(props).describe()}; nothing was bought. "
            "Fix: `pdkit capacity offerings`, then put a current offering id and its fee in capacity.purchase and deploy again",
            physical_id=placeholder,
        )
        return
    problems = mismatches(offer, props)
    if problems:
        respond(
            event,
            success=False,
            reason=f"offering {offer.id} differs from the profile ({'; '.join(problems)}); nothing was bought. "
            "Fix: check `pdkit capacity offerings` and set capacity.purchase (and the profile) to what you mean to pay for",
            physical_id=placeholder,
        )
        return
    what = f"{offer.instance_count} x {offer.instance_type} for {offer.hours} h ({offer.id})"
    purchase.dry_run(lambda: purchase_ec2.purchase_capacity_block(**purchase.block_request(offer.id, pid, dry=True)), what=what)
    outcome = purchase.buy_block(purchase_ec2, ec2, offer, pid)
    if outcome.status == "bought":
        raw = (outcome.reply or {}).get("CapacityReservation", {})
        res = capacity.reservation_from(raw)
        sighting = purchase.Sighting(res.id, res.state, res.start or offer.start, res.end or offer.end, "the purchase reply")
        await_visible(ec2, res.id)
        _bought(event, respond, sighting, f"bought {res.id}: {what}, tagged {tag}")
        return
    certain = [s for s in outcome.found if s.certain]
    if certain:
        _bought(event, respond, certain[0], f"EC2 gave no clear answer ({outcome.failure}) but {certain[0].reservation_id} carries {tag}")
        return
    seen = f"; a block that only looks like it: {', '.join(s.reservation_id for s in outcome.found)}" if outcome.found else ""
    looked = f"the lookup failed ({outcome.lookup_failure})" if outcome.lookup_failure else "no reservation carries the tag yet"
    respond(
        event,
        success=False,
        reason=f"EC2 gave no clear answer to the purchase of {what} ({outcome.failure}) and {looked}{seen}; it was not sent again. "
        f"It may have been bought: look for tag {tag} with `{_lookup(props, pid)}`. "
        "Deploying this stack again adopts a block with that tag instead of buying another",
        physical_id=placeholder,
    )


def _update(event: dict[str, Any], ec2: Any, cloudformation: Any, respond: Any) -> None:
    physical = event["PhysicalResourceId"]
    new, old = event["ResourceProperties"], event.get("OldResourceProperties", {})
    changed = sorted(k for k in PURCHASE_PROPERTIES if new.get(k) != old.get(k))
    if changed:
        status = reservation_guard.stack_status(event["StackId"], cloudformation)
        if not status.endswith(reservation_guard.ROLLING_BACK):
            respond(
                event,
                success=False,
                reason=f"capacity.purchase changed ({', '.join(changed)}), but this stack already bought {physical} and never buys twice. "
                "Fix: for a longer block, `pdkit capacity extend`; for another block, deploy it as a new deployment (another profile name), "
                "or put the new cr- id in capacity.reservation_id and remove capacity.purchase",
                physical_id=physical,
            )
            return
    # The attributes must come back with every answer (consumers read ReservationId); the dates are a courtesy,
    # and a failed read must not fail an Update that buys nothing, least of all a rollback.
    block = purchase.Sighting(physical, "?", None, None, "the physical id")
    with contextlib.suppress(Exception):
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[physical]).get("CapacityReservations", [])
        if found:
            res = capacity.reservation_from(found[0])
            block = purchase.Sighting(res.id, res.state, res.start, res.end, "DescribeCapacityReservations")
    respond(
        event, success=True, reason=f"{physical} kept; nothing bought (Update never purchases)", physical_id=physical, data=_data(block)
    )


def _delete(event: dict[str, Any], respond: Any) -> None:
    physical = event.get("PhysicalResourceId", "")
    if physical.startswith("cr-"):
        reason = (
            f"Capacity Block {physical} is kept and still billed: blocks cannot be cancelled, and deleting this resource only forgets it. "
            f"To use it, put {physical} in capacity.reservation_id and remove capacity.purchase "
            f"(see `aws ec2 describe-capacity-reservations --capacity-reservation-ids {physical}`)"
        )
    else:
        # No confirmed purchase. After an unclear answer the block may still exist: point at the tag, cancel nothing.
        lookup = _lookup(event["ResourceProperties"], purchase_id(event))
        reason = (
            "no purchase was confirmed by this resource; nothing is cancelled. If its Create reported an unclear answer, "
            f"look for its tag before buying again: `{lookup}`"
        )
    respond(event, success=True, reason=reason, physical_id=physical or f"purchase-{purchase_id(event)}")


def await_visible(ec2: Any, reservation_id: str, *, sleep: Any = time.sleep) -> bool:
    """Best effort, after a purchase that succeeded: never fails the resource, which now holds a paid block."""
    for attempt in range(VISIBLE_TRIES):
        try:
            if ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id]).get("CapacityReservations"):
                return True
        except Exception as exc:
            if error_code(exc) != "InvalidCapacityReservationId.NotFound":
                return False
        if attempt + 1 < VISIBLE_TRIES:
            sleep(VISIBLE_EVERY)
    return False


def _lookup(props: dict[str, Any], pid: str) -> str:
    return purchase.tag_lookup_command(instance_type=props["InstanceType"], availability_zone=props["AvailabilityZone"], purchase_id=pid)


def _bought(event: dict[str, Any], respond: Any, block: purchase.Sighting, reason: str) -> None:
    respond(event, success=True, reason=reason, physical_id=block.reservation_id, data=_data(block))


def _data(block: purchase.Sighting) -> dict[str, str]:
    return {
        "ReservationId": block.reservation_id,
        "StartDate": block.start.isoformat() if block.start else "",
        "EndDate": block.end.isoformat() if block.end else "",
    }


def query(props: dict[str, Any]) -> capacity.OfferingQuery:
    return capacity.OfferingQuery(
        instance_type=props["InstanceType"],
        instance_count=int(props["InstanceCount"]),
        duration_hours=int(props["DurationHours"]),
        earliest_start=datetime.fromisoformat(props["EarliestStart"]) if props.get("EarliestStart") else None,
        latest_end=datetime.fromisoformat(props["LatestEnd"]) if props.get("LatestEnd") else None,
    )


def find_offer(ec2: Any, props: dict[str, Any]) -> capacity.Offering | None:
    return next((o for o in capacity.find_offerings(ec2, query(props)) if o.id == props["OfferingId"]), None)


def mismatches(offer: capacity.Offering, props: dict[str, Any]) -> list[str]:
    """How the offering differs from the purchase properties; `pdkit deploy-check` applies the same rule before `cdk deploy`."""
    try:
        fee = Decimal(props["UpfrontFeeUsd"])
    except InvalidOperation:
        return [f"confirm_upfront_fee_usd {props['UpfrontFeeUsd']!r} is not an amount"]
    checks = (
        ("instance type", offer.instance_type, props["InstanceType"]),
        ("instance count", str(offer.instance_count), str(props["InstanceCount"])),
        ("availability zone", offer.availability_zone, props["AvailabilityZone"]),
        ("currency", offer.currency, "USD"),
    )
    found = [f"{name} is {got}, the profile says {want}" for name, got, want in checks if got != want]
    if offer.upfront_fee != fee:
        found.append(f"upfront fee is now {capacity.money(offer.upfront_fee, offer.currency)}, the profile confirmed USD {fee:,.2f}")
    return found


def _failure(exc: BaseException) -> str:
    return purchase.describe_failure(exc) if purchase.is_unclear(exc) or hasattr(exc, "response") else str(exc)


def _ec2(*, once: bool = False) -> Any:
    """EC2 with the CLI's timeouts; the purchase client is never retried (pdkit.ops.client_config.PURCHASE)."""
    import boto3

    from pdkit.ops.client_config import PURCHASE, READS

    return boto3.client("ec2", config=(PURCHASE if once else READS).config())
