"""Custom resource that buys the profile's Capacity Block on Create, once, and never again.

It lives in its own stack (stacks/purchase_stack.py), which `make deploy` deploys first, right after the operator
typed the fee. The purchase path is pdkit.ops.purchase, the same code `pdkit capacity buy` runs; only the
confirmation differs: the operator typed the fee before `cdk deploy` (pdkit deploy-check), and here the offering's
current fee must still equal that fee to the cent.

What it acts on is synthesized into the function's environment, never taken from the request: the offering, fee,
instance type, count and AZ (PURCHASE), the purchase tag's value (PURCHASE_ID), its stack (STACK_ID, the stack's own
AWS::StackId) and its resource's logical id (RESOURCE_ID). A request that is not CloudFormation's for this stack and
resource (another StackId or LogicalResourceId, a ServiceToken that is not this function, a ResponseURL that is not
CloudFormation's response bucket in this region) gets no answer and buys nothing: answering would PUT to whatever
URL the caller chose. A Create whose properties differ from the synthesized ones buys nothing either.

Create, in this order, each step able to stop it:
1. look for a held reservation already carrying the purchase tag. Its value (pdkit.model.plan.purchase_id) is made
   of what survives a stack's deletion (deployment, region, offering), so a second delivery of the same Create
   (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html) and the Create of a stack
   deleted after a failed first create and created again (a new StackId) both adopt the block instead of buying;
2. find the offering again (DescribeCapacityBlockOfferings has no offering-id filter, so the query the offering was
   listed with is synthesized too) and refuse unless instance type, count, AZ and upfront fee equal the profile's;
3. dry run (DryRunOperation means "you may"). UnauthorizedOperation right after the stack created the function's
   role is IAM propagation, so the dry run, and only the dry run, is tried again a bounded number of times;
4. PurchaseCapacityBlock once, on a client with retries off (pdkit.ops.client_config.PURCHASE), and only with time
   left for its longest answer; an unclear answer is followed by a lookup by tag (pdkit.ops.purchase.send_once),
   never by a resend;
5. wait (best effort, bounded by the Lambda's remaining time) until DescribeCapacityReservations shows the new
   block, so the deploy-time guard that checks it next does not refuse an id EC2 has not propagated yet.
Update never buys: a changed offering is refused with the fix, except while the stack rolls back
(CloudFormation then sends the previous properties as an Update, with no rollback flag:
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-requesttypes-update.html).
Delete never cancels: Capacity Blocks cannot be cancelled
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-pricing-billing.html); the
reason shown in the stack events says where the block is.
Every path answers CloudFormation before the function's time runs out, odd or missing properties included: a
handler that never answers leaves the stack waiting for the resource's ServiceTimeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar
from urllib.parse import urlsplit

from pdkit.functions import cfn_response, reservation_guard
from pdkit.model import reservation
from pdkit.ops import capacity, client_config, purchase
from pdkit.ops.aws_errors import error_code
from pdkit.ops.client_config import PURCHASE, READS

T = TypeVar("T")

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


# The environment the stack synthesizes into the function (stacks/capacity_purchase.py): what it may act on.
ENV_PURCHASE = "PURCHASE"  # JSON of PurchasePlan.resource_properties(): offering, fee, type, count, AZ, query
ENV_PURCHASE_ID = "PURCHASE_ID"  # the purchase tag's value (pdkit.model.plan.purchase_id)
ENV_STACK_ID = "STACK_ID"  # the stack's own AWS::StackId
ENV_RESOURCE_ID = "RESOURCE_ID"  # the purchase resource's logical id
# A dry run answered UnauthorizedOperation just after the stack created the function's role is IAM propagation
# (https://docs.aws.amazon.com/IAM/latest/UserGuide/troubleshoot_general.html#troubleshoot_general_eventual-consistency);
# the Terraform AWS provider waits up to 2 minutes for IAM changes to propagate (hashicorp/terraform-provider-aws,
# internal/service/iam/wait.go, propagationTimeout). The dry run buys nothing, so it may be repeated: these are the
# seconds between tries, 2 minutes in all. The purchase itself is never repeated.
DRY_RUN_WAITS = (5.0, 10.0, 15.0, 30.0, 30.0, 30.0)
UNAUTHORIZED = "UnauthorizedOperation"
# Seconds kept for the answer to CloudFormation (cfn_response.send's own timeout is 30 s) after anything else.
ANSWER_RESERVE_SECONDS = 35.0
# What the real purchase may take at worst: its one attempt, then the lookup by tag after an unclear answer.
PURCHASE_BUDGET_SECONDS = PURCHASE.worst_case + READS.worst_case
# CloudFormation's response bucket in the region, without dashes (CloudFormation User Guide, "Setting up VPC endpoints
# for AWS CloudFormation": cloudformation-custom-resource-response-<RegionWithoutDashes>), addressed virtual-hosted
# style as recorded requests show (https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/...,
# kickstarter/serverless-approle-manager test/data/event.js).
RESPONSE_HOST = r"cloudformation-custom-resource-response-{bucket_region}\.s3(?:[.-]{region})?\.amazonaws\.com(?:\.cn)?"


@dataclass(frozen=True)
class Own:
    """What the stack synthesized into the function: the only stack, resource and purchase it acts on."""

    stack_id: str
    resource_id: str
    purchase_id: str
    props: dict[str, str]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Own:
        return cls(env[ENV_STACK_ID], env[ENV_RESOURCE_ID], env[ENV_PURCHASE_ID], dict(json.loads(env[ENV_PURCHASE])))

    @property
    def region(self) -> str:
        return self.stack_id.split(":")[3]

    @property
    def placeholder(self) -> str:
        """The physical id of a resource that holds no confirmed block."""
        return f"purchase-{self.purchase_id}"


def foreign(event: Any, context: Any, own: Own) -> str | None:
    """Why `event` is not CloudFormation's request for this resource (then it gets no answer at all), or None."""
    if not isinstance(event, dict):
        return "the event is not a CloudFormation request"
    if event.get("RequestType") not in ("Create", "Update", "Delete") or not event.get("RequestId"):
        return f"request type {event.get('RequestType')!r} is not a CloudFormation custom resource request"
    if event.get("StackId") != own.stack_id:
        return f"stack {event.get('StackId')!r} is not this function's stack {own.stack_id}"
    # Only a Create buys, so only a Create must name this resource. An Update or Delete for another logical id of the
    # same stack is CloudFormation cleaning up after a rename (or the rollback of one): it buys nothing and must be
    # answered, or the stack waits for the ServiceTimeout and ends DELETE_FAILED.
    if event.get("RequestType") == "Create" and event.get("LogicalResourceId") != own.resource_id:
        return f"resource {event.get('LogicalResourceId')!r} is not this function's resource {own.resource_id}"
    function_arn = getattr(context, "invoked_function_arn", None)
    if not function_arn or event.get("ServiceToken") != function_arn:
        return f"service token {event.get('ServiceToken')!r} is not this function ({function_arn})"
    url = event.get("ResponseURL")
    parts = urlsplit(url) if isinstance(url, str) else None
    host = RESPONSE_HOST.format(bucket_region=own.region.replace("-", ""), region=re.escape(own.region))
    if parts is None or parts.scheme != "https" or not re.fullmatch(host, parts.hostname or ""):
        return f"response URL host {parts.hostname if parts else None!r} is not CloudFormation's response bucket in {own.region}"
    return None


class Deadline:
    """The Lambda's remaining time (context.get_remaining_time_in_millis), minus what the answer needs."""

    def __init__(self, context: Any, *, clock: Any = time.monotonic) -> None:
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        self._clock = clock
        self._end = float(clock()) + (remaining() / 1000.0 if remaining else 0.0) - ANSWER_RESERVE_SECONDS

    def left(self) -> float:
        return self._end - float(self._clock())


def handler(
    event: Any,
    context: Any,
    *,
    ec2: Any = None,
    purchase_ec2: Any = None,
    cloudformation: Any = None,
    respond: Any = cfn_response.send,
    env: Mapping[str, str] = os.environ,
    sleep: Any = time.sleep,
    clock: Any = time.monotonic,
) -> None:
    own = Own.from_env(env)
    why = foreign(event, context, own)
    if why:
        # No answer: the ResponseURL is the caller's, and a forged request must not learn or cause anything.
        print(f"ignored, nothing bought or answered: {why}")
        return
    deadline = Deadline(context, clock=clock)
    kind = event["RequestType"]
    sent: list[str] = []  # what PurchaseCapacityBlock was sent for, once it was
    try:
        if kind == "Delete":
            _delete(event, own, respond)
        elif kind == "Update":
            _update(event, own, ec2 or _ec2(), cloudformation, respond)
        else:
            _create(event, own, ec2 or _ec2(), purchase_ec2 or _ec2(once=True), respond, deadline, sleep, sent)
    except Exception as exc:  # any failure must still answer CloudFormation, or the stack waits for the ServiceTimeout
        physical = event.get("PhysicalResourceId") or own.placeholder
        if sent:
            lookup = _lookup(own.props, own.purchase_id)
            reason = (
                f"Capacity Block purchase of {sent[0]} was sent once; then {_failure(exc)}. It may be bought: look for tag "
                f"{purchase.PURCHASE_TAG}={own.purchase_id} with `{lookup}`; deploying this stack again adopts it, never buys another"
            )
        else:
            reason = f"Capacity Block purchase: {_failure(exc)}; no purchase was sent"
        respond(event, success=False, reason=reason, physical_id=physical)


def _create(
    event: dict[str, Any], own: Own, ec2: Any, purchase_ec2: Any, respond: Any, deadline: Deadline, sleep: Any, sent: list[str]
) -> None:
    props, pid = own.props, own.purchase_id
    tag = f"{purchase.PURCHASE_TAG}={pid}"
    asked = event.get("ResourceProperties")
    differs = sorted(k for k in PURCHASE_PROPERTIES if not isinstance(asked, dict) or str(asked.get(k, "")) != props.get(k, ""))
    if differs:
        respond(
            event,
            success=False,
            reason=f"the request's {', '.join(differs)} differ from what this stack synthesized into its function; nothing was bought. "
            "Fix: deploy the purchase stack again with `make deploy` (the function buys only what the profile confirmed)",
            physical_id=own.placeholder,
        )
        return
    tagged = propagated(
        lambda: purchase.find_tagged(
            ec2, instance_type=props["InstanceType"], availability_zone=props["AvailabilityZone"], purchase_id=pid
        ),
        deadline=deadline,
        sleep=sleep,
    )
    held = [s for s in tagged if s.state in HELD_STATES]
    if held:
        _bought(
            event,
            respond,
            held[0],
            f"{held[0].reservation_id} already carries this purchase's tag {tag}: adopted, not bought again",
            deadline,
            sleep,
        )
        return
    placeholder = own.placeholder
    offer = find_offer(ec2, props)  # the role has answered by now: no second propagation wait
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
    dry_run(
        lambda: purchase_ec2.purchase_capacity_block(**purchase.block_request(offer.id, pid, dry=True)),
        what=what,
        deadline=deadline,
        sleep=sleep,
    )
    if deadline.left() < PURCHASE_BUDGET_SECONDS:
        respond(
            event,
            success=False,
            reason=f"only {max(deadline.left(), 0):.0f} s of this function's time is left, less than the {PURCHASE_BUDGET_SECONDS:.0f} s the purchase "
            f"of {what} and its lookup may take; nothing was bought. Fix: deploy again (`make deploy`)",
            physical_id=placeholder,
        )
        return
    sent.append(what)
    outcome = purchase.buy_block(purchase_ec2, ec2, offer, pid)
    if outcome.status == "bought":
        raw = (outcome.reply or {}).get("CapacityReservation") or {}
        if not raw.get("CapacityReservationId"):
            # EC2 answered the purchase but the reply names no reservation: the block is paid for. Find it by its tag
            # rather than answer FAILED, which would roll the stack back and forget it (Terraform keeps the id of a
            # purchase whose wait failed, so the resource is tainted, not lost).
            found = [
                s
                for s in purchase.find_tagged(
                    ec2, instance_type=offer.instance_type, availability_zone=offer.availability_zone, purchase_id=pid
                )
            ]
            if not found:
                raise BoughtButUnnamed(what, tag, _lookup(props, pid))
            _bought(event, respond, found[0], f"bought {found[0].reservation_id}: {what}, tagged {tag} (found by its tag)", deadline, sleep)
            return
        res = capacity.reservation_from(raw)
        sighting = purchase.Sighting(res.id, res.state, res.start or offer.start, res.end or offer.end, "the purchase reply")
        await_visible(ec2, res.id, sleep=sleep, deadline=deadline)
        _bought(event, respond, sighting, f"bought {res.id}: {what}, tagged {tag}", deadline, sleep)
        return
    certain = [s for s in outcome.found if s.certain]
    if certain:
        _bought(
            event,
            respond,
            certain[0],
            f"EC2 gave no clear answer ({outcome.failure}) but {certain[0].reservation_id} carries {tag}",
            deadline,
            sleep,
        )
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


def propagated(call: Callable[[], T], *, deadline: Deadline, sleep: Any = time.sleep) -> T:
    """A read by the function's role, tried again while EC2 answers UnauthorizedOperation: the role was created moments
    before by the same stack and IAM is eventually consistent (the first call is a DescribeCapacityReservations, not the
    dry run). Reads buy nothing, so a retry is safe; the waits are DRY_RUN_WAITS, bounded by the time left."""
    for wait in (*DRY_RUN_WAITS, None):
        try:
            return call()
        except Exception as err:
            if error_code(err) != UNAUTHORIZED or wait is None or deadline.left() - wait < PURCHASE_BUDGET_SECONDS:
                raise
        sleep(wait)
    raise AssertionError("unreachable: the last try raises or returns")


def dry_run(call: Any, *, what: str, deadline: Deadline, sleep: Any = time.sleep) -> None:
    """pdkit.ops.purchase.dry_run, tried again while EC2 answers UnauthorizedOperation (IAM propagation of the
    function's new role, DRY_RUN_WAITS) and time is left for the purchase after it; any other answer is final."""
    for wait in (*DRY_RUN_WAITS, None):
        try:
            purchase.dry_run(call, what=what)
            return
        except Exception as err:
            if error_code(err) != UNAUTHORIZED or wait is None or deadline.left() - wait < PURCHASE_BUDGET_SECONDS:
                raise
        sleep(wait)


def _update(event: dict[str, Any], own: Own, ec2: Any, cloudformation: Any, respond: Any) -> None:
    physical = event.get("PhysicalResourceId") or own.placeholder
    new, old = _properties(event, "ResourceProperties"), _properties(event, "OldResourceProperties")
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
    if physical.startswith("cr-"):
        with contextlib.suppress(Exception):
            found = ec2.describe_capacity_reservations(CapacityReservationIds=[physical]).get("CapacityReservations", [])
            if found:
                res = capacity.reservation_from(found[0])
                block = purchase.Sighting(res.id, res.state, res.start, res.end, "DescribeCapacityReservations")
    respond(
        event, success=True, reason=f"{physical} kept; nothing bought (Update never purchases)", physical_id=physical, data=_data(block)
    )


def _properties(event: dict[str, Any], key: str) -> dict[str, Any]:
    """A request's properties; a missing or malformed set reads as none (a direct invoke can send anything)."""
    value = event.get(key)
    return value if isinstance(value, dict) else {}


def _delete(event: dict[str, Any], own: Own, respond: Any) -> None:
    physical = event.get("PhysicalResourceId") or ""
    if not isinstance(physical, str):
        physical = ""
    if physical.startswith("cr-"):
        reason = (
            f"Capacity Block {physical} is kept and still billed: blocks cannot be cancelled, and deleting this resource only forgets it. "
            "Deploying the purchase stack again adopts it (it carries this purchase's tag); "
            f"to use it without the purchase stack, put {physical} in capacity.reservation_id and remove capacity.purchase "
            f"(see `aws ec2 describe-capacity-reservations --capacity-reservation-ids {physical}`)"
        )
    else:
        # No confirmed purchase. After an unclear answer the block may still exist: point at the tag, cancel nothing.
        reason = (
            "no purchase was confirmed by this resource; nothing is cancelled. If its Create reported an unclear answer, "
            f"look for its tag before buying again: `{_lookup(own.props, own.purchase_id)}` (deploying again adopts a block carrying it)"
        )
    respond(event, success=True, reason=reason, physical_id=physical or own.placeholder)


def await_visible(ec2: Any, reservation_id: str, *, sleep: Any = time.sleep, deadline: Deadline | None = None) -> bool:
    """Best effort, after a purchase that succeeded: never fails the resource, which now holds a paid block, and
    stops while time is left to answer (each Describe may take READS.worst_case)."""
    for attempt in range(VISIBLE_TRIES):
        if deadline is not None and deadline.left() < READS.worst_case:
            return False
        try:
            if ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id]).get("CapacityReservations"):
                return True
        except Exception as exc:
            if error_code(exc) != "InvalidCapacityReservationId.NotFound":
                return False
        if attempt + 1 < VISIBLE_TRIES:
            if deadline is not None and deadline.left() - VISIBLE_EVERY < READS.worst_case:
                return False
            sleep(VISIBLE_EVERY)
    return False


def _lookup(props: dict[str, Any], pid: str) -> str:
    return purchase.tag_lookup_command(instance_type=props["InstanceType"], availability_zone=props["AvailabilityZone"], purchase_id=pid)


# Tries of the SUCCESS answer for a held block, and the seconds between them: a lost PUT would leave CloudFormation to
# time out and roll the stack back, forgetting the paid block. CloudFormation keeps the first answer it receives.
ANSWER_TRIES = 3
ANSWER_EVERY = 5.0


def _bought(event: dict[str, Any], respond: Any, block: purchase.Sighting, reason: str, deadline: Deadline, sleep: Any) -> None:
    """Answer SUCCESS with the block; the PUT is tried again while time is left (never a FAILED for a paid block)."""
    for attempt in range(ANSWER_TRIES):
        try:
            respond(event, success=True, reason=reason, physical_id=block.reservation_id, data=_data(block))
            return
        except Exception:
            if attempt + 1 == ANSWER_TRIES or deadline.left() < ANSWER_EVERY:
                raise
            sleep(ANSWER_EVERY)


class BoughtButUnnamed(Exception):
    """EC2 answered the purchase, but neither its reply nor the tag lookup names the reservation yet."""

    def __init__(self, what: str, tag: str, lookup: str) -> None:
        super().__init__(
            f"EC2 answered the purchase of {what} without naming the reservation, and none carries {tag} yet (EC2 is eventually "
            f"consistent): the block is most likely bought. Look for it with `{lookup}`; deploying this stack again adopts it, "
            "never buys another"
        )


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

    return boto3.client("ec2", config=(client_config.PURCHASE if once else client_config.READS).config())
