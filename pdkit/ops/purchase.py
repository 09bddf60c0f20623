"""A Capacity Block purchase or extension, sent at most once, with an honest outcome.

PurchaseCapacityBlock and PurchaseCapacityBlockExtension take no idempotency token (botocore EC2
model: no ClientToken member), so a retried request can buy twice. The call is therefore sent
once, on a client with retries off (pdkit.ops.aws_clients.PURCHASE). Its answer is one of:
- a reply: bought;
- a ClientError with a 4xx status: EC2 refused it, nothing was bought (raised to the caller);
- anything else (5xx, a read timeout, a dropped connection, an unparseable reply): EC2 may have
  bought it. Then the purchase is looked for, never resent: a block by the unique tag it was sent with (PurchaseCapacityBlock takes TagSpecifications), or
  failing that by the offering's instance type, AZ, count and dates; an extension (which takes no
  tags) by DescribeCapacityBlockExtensionHistory filtered on its offering id.

No printing and no prompts here: the CLI prints the Outcome, and a CloudFormation custom resource
can call the same functions. The order around the call (dry run, typed fee) is the caller's:
`dry_run` below is the first step.
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_PurchaseCapacityBlock.html
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_PurchaseCapacityBlockExtension.html
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pdkit.errors import KitError
from pdkit.ops.aws_errors import error_code
from pdkit.ops.capacity import PLATFORM, ExtensionOffering, Offering, reservation_from, reservations_tagged
from pdkit.ops.capacity import PURCHASE_TAG as PURCHASE_TAG  # the purchase's own tag, read by the CLI's lookups too

# The tag every block is bought with; its value is a fresh id per purchase attempt.
# What PurchaseCapacityBlock creates and returns is a Capacity Reservation (cr-...), so that is
# the resource type its TagSpecifications name.
TAGGED_RESOURCE = "capacity-reservation"


def new_purchase_id() -> str:
    return uuid.uuid4().hex


def block_request(offering_id: str, purchase_id: str, *, dry: bool) -> dict[str, Any]:
    """PurchaseCapacityBlock parameters; the dry run sends the same tags, so it also checks ec2:CreateTags."""
    return {
        "CapacityBlockOfferingId": offering_id,
        "InstancePlatform": PLATFORM,
        "TagSpecifications": [{"ResourceType": TAGGED_RESOURCE, "Tags": [{"Key": PURCHASE_TAG, "Value": purchase_id}]}],
        "DryRun": dry,
    }


def extension_request(offering_id: str, reservation_id: str, *, dry: bool) -> dict[str, Any]:
    return {"CapacityBlockExtensionOfferingId": offering_id, "CapacityReservationId": reservation_id, "DryRun": dry}


def dry_run(call: Callable[[], object], *, what: str) -> None:
    """Run the DryRun request; return only when EC2 answered DryRunOperation ("you may")."""
    try:
        call()
    except Exception as err:
        if error_code(err) == "DryRunOperation":
            return
        raise
    raise KitError(
        f"the dry run of {what} returned a result instead of DryRunOperation, so this endpoint may not honour DryRun; nothing else was sent. "
        "Fix: check `aws ec2 describe-capacity-reservations` for an unexpected new reservation and your AWS_ENDPOINT_URL* settings"
    )


@dataclass(frozen=True)
class Sighting:
    """A reservation or extension found after an unclear answer, and how it was matched."""

    reservation_id: str
    state: str
    start: datetime | None
    end: datetime | None
    matched_by: str
    # True when the match is certain (our purchase tag, or the extension offering id); False for a
    # block that only looks like the offering and may be an earlier purchase.
    certain: bool = True


@dataclass(frozen=True)
class Outcome:
    """What happened to the one request. `bought`: `reply` is EC2's answer. `unclear`: `failure` is what came
    back instead, `found` what the lookup saw (empty: nothing yet), `lookup_failure` why the lookup failed."""

    status: Literal["bought", "unclear"]
    purchase_id: str | None
    reply: dict[str, Any] | None = None
    failure: str = ""
    found: tuple[Sighting, ...] = ()
    lookup_failure: str = ""


def send_once(send: Callable[[], dict[str, Any]], look: Callable[[], list[Sighting]], *, purchase_id: str | None = None) -> Outcome:
    """Send the purchase exactly once; a clear refusal is raised, an unclear answer is followed by `look`, never a resend."""
    try:
        reply = send()
    except KeyboardInterrupt:
        # Ctrl-C while waiting: the request may already be with EC2, so this is as unclear as a timeout.
        failure = "interrupted before EC2 answered"
    except Exception as err:
        if not is_unclear(err):
            raise
        failure = describe_failure(err)
    else:
        return Outcome("bought", purchase_id, reply=reply)
    try:
        found = tuple(look())
    except Exception as err:
        if not _is_aws_failure(err):
            raise
        return Outcome("unclear", purchase_id, failure=failure, lookup_failure=describe_failure(err))
    return Outcome("unclear", purchase_id, failure=failure, found=found)


def buy_block(purchase_ec2: Any, read_ec2: Any, offer: Offering, purchase_id: str) -> Outcome:
    """PurchaseCapacityBlock for `offer`, once, tagged with `purchase_id` (use the id the dry run used)."""
    return send_once(
        lambda: dict(purchase_ec2.purchase_capacity_block(**block_request(offer.id, purchase_id, dry=False))),
        lambda: find_block(read_ec2, offer, purchase_id),
        purchase_id=purchase_id,
    )


def extend_block(purchase_ec2: Any, read_ec2: Any, offer: ExtensionOffering, reservation_id: str) -> Outcome:
    """PurchaseCapacityBlockExtension for `offer`, once."""
    return send_once(
        lambda: dict(purchase_ec2.purchase_capacity_block_extension(**extension_request(offer.id, reservation_id, dry=False))),
        lambda: find_extension(read_ec2, offer, reservation_id),
    )


def find_block(ec2: Any, offer: Offering, purchase_id: str) -> list[Sighting]:
    """Reservations carrying our tag; if none, Capacity Blocks with the offering's type, AZ, count, start and end.

    The server-side filters are the documented ones (instance-type, availability-zone); the tag
    and the dates are matched here, on the Tags, StartDate and EndDate of each reservation.
    """
    filters = [
        {"Name": "instance-type", "Values": [offer.instance_type]},
        {"Name": "availability-zone", "Values": [offer.availability_zone]},
    ]
    tagged: list[Sighting] = []
    alike: list[Sighting] = []
    token: str | None = None
    while True:
        page = ec2.describe_capacity_reservations(Filters=filters, **({"NextToken": token} if token else {}))
        for raw in page.get("CapacityReservations", []):
            res = reservation_from(raw)
            tags = {t.get("Key"): t.get("Value") for t in raw.get("Tags", [])}
            if tags.get(PURCHASE_TAG) == purchase_id:
                tagged.append(Sighting(res.id, res.state, res.start, res.end, f"tag {PURCHASE_TAG}={purchase_id}"))
            elif res.is_capacity_block and res.instances == offer.instance_count and res.start == offer.start and res.end == offer.end:
                alike.append(Sighting(res.id, res.state, res.start, res.end, "same type, AZ, count, start and end (no tag)", certain=False))
        token = page.get("NextToken")
        if not token:
            return tagged or alike


def find_tagged(ec2: Any, *, instance_type: str, availability_zone: str, purchase_id: str) -> list[Sighting]:
    """Reservations carrying our purchase tag: what a purchase sent earlier with this id bought, if anything
    (pdkit.ops.capacity.reservations_tagged)."""
    return [
        Sighting(res.id, res.state, res.start, res.end, f"tag {PURCHASE_TAG}={purchase_id}")
        for res in reservations_tagged(
            ec2, instance_type=instance_type, availability_zone=availability_zone, key=PURCHASE_TAG, value=purchase_id
        )
    ]


def tag_lookup_command(*, instance_type: str, availability_zone: str, purchase_id: str) -> str:
    """The AWS CLI command that lists the reservations carrying this purchase's tag."""
    return (
        f"aws ec2 describe-capacity-reservations --filters Name=instance-type,Values={instance_type} "
        f"Name=availability-zone,Values={availability_zone} "
        f"--query \"CapacityReservations[?Tags[?Key=='{PURCHASE_TAG}' && Value=='{purchase_id}']].[CapacityReservationId,State]\""
    )


def find_extension(ec2: Any, offer: ExtensionOffering, reservation_id: str) -> list[Sighting]:
    """Extensions of the reservation bought from this offering (DescribeCapacityBlockExtensionHistory filter
    capacity-block-extension-offering-id)."""
    found: list[Sighting] = []
    token: str | None = None
    while True:
        page = ec2.describe_capacity_block_extension_history(
            CapacityReservationIds=[reservation_id],
            Filters=[{"Name": "capacity-block-extension-offering-id", "Values": [offer.id]}],
            **({"NextToken": token} if token else {}),
        )
        for raw in page.get("CapacityBlockExtensions", []):
            found.append(
                Sighting(
                    raw.get("CapacityReservationId", reservation_id),
                    raw.get("CapacityBlockExtensionStatus", "?"),
                    raw.get("CapacityBlockExtensionStartDate"),
                    raw.get("CapacityBlockExtensionEndDate"),
                    f"extension offering {offer.id}",
                )
            )
        token = page.get("NextToken")
        if not token:
            return found


def is_unclear(err: BaseException) -> bool:
    """True when the request may have been carried out: anything but a 4xx answer from EC2.

    EC2 answers client errors with 4xx and server errors with 5xx
    (https://docs.aws.amazon.com/ec2/latest/devguide/errors-overview.html): a 4xx is EC2 refusing
    the request; a 5xx, a timeout, a dropped connection or an unparseable reply says nothing about
    whether it was done.
    Errors that are not AWS failures (bugs, test assertions) are not classified: they propagate.
    """
    from botocore import exceptions as bx

    if isinstance(err, bx.ClientError):
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return not (isinstance(status, int) and 400 <= status < 500)
    return _is_aws_failure(err)


def _is_aws_failure(err: BaseException) -> bool:
    from botocore import exceptions as bx
    from botocore.parsers import ResponseParserError

    return isinstance(err, bx.ClientError | bx.HTTPClientError | bx.ConnectionError | ResponseParserError)


def describe_failure(err: BaseException) -> str:
    from botocore import exceptions as bx

    if isinstance(err, bx.ClientError):
        meta = err.response.get("ResponseMetadata", {})
        status = meta.get("HTTPStatusCode")
        rid = f", request id {meta['RequestId']}" if meta.get("RequestId") else ""
        return f"HTTP {status or '?'} {error_code(err) or 'with no error code'}{rid}"
    if isinstance(err, bx.ReadTimeoutError):
        return "no answer before the read timeout (ReadTimeoutError)"
    if isinstance(err, bx.ConnectionClosedError):
        return "the connection closed without an answer (ConnectionClosedError)"
    return f"{type(err).__name__}: {err}"
