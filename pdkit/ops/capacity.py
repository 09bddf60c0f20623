"""EC2 Capacity Blocks for ML as the kit sees them: offerings, the reservation, its interconnect and instances.

Every function takes an EC2 client and returns plain dataclasses; no printing here.
API reference: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from pdkit.errors import KitError
from pdkit.model import reservation as reservation_rules

if TYPE_CHECKING:
    # Only for annotations: the purchase Lambda ships this module without the plan (and pydantic).
    from pdkit.model.plan import Plan
    from pdkit.ops.aws_clients import Aws

# The platform the EKS AL2023 NVIDIA AMI runs; a block is bought for one platform only
# (an instance "can't launch using an AMI with a different platform" than the block's).
PLATFORM = "Linux/UNIX"

# What each reservation state means for the deployment, and what to do about it: the one table in
# pdkit/model/reservation.py (STATES), which the guard and the purchase handler read too.
STATE_MEANING: dict[str, tuple[str, str]] = {state: (rule.meaning, rule.todo) for state, rule in reservation_rules.STATES.items()}
USABLE_STATES = reservation_rules.CONFIRMED_STATES
NO_COUNT = reservation_rules.Count(None, "none")


def check_hours(hours: int, *, what: str = "--hours") -> int:
    """Block and extension lengths: whole days up to 14 days, then whole weeks up to 182 days (EC2 user guide)."""
    if (24 <= hours <= 14 * 24 and hours % 24 == 0) or (14 * 24 < hours <= 182 * 24 and hours % (7 * 24) == 0):
        return hours
    raise KitError(f"{what} {hours} is not a Capacity Block length. Fix: a multiple of 24 up to 336, or of 168 up to 4368")


def money(amount: Decimal, currency: str) -> str:
    return f"{currency} {amount:,.2f}"


def parse_fee(text: str | None) -> Decimal:
    try:
        return Decimal(text or "0")
    except InvalidOperation:
        return Decimal(0)


@dataclass(frozen=True)
class OfferingQuery:
    """One DescribeCapacityBlockOfferings search; `capacity buy` repeats it to find the offering again."""

    instance_type: str
    instance_count: int
    duration_hours: int
    earliest_start: datetime | None = None
    latest_end: datetime | None = None

    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "InstanceType": self.instance_type,
            "InstanceCount": self.instance_count,
            "CapacityDurationHours": self.duration_hours,
        }
        if self.earliest_start:
            params["StartDateRange"] = self.earliest_start
        if self.latest_end:
            params["EndDateRange"] = self.latest_end
        return params

    def describe(self) -> str:
        text = f"{self.instance_count} x {self.instance_type} for {self.duration_hours} h"
        if self.earliest_start:
            text += f", starting after {self.earliest_start:%Y-%m-%d %H:%M}"
        if self.latest_end:
            text += f", ending before {self.latest_end:%Y-%m-%d %H:%M}"
        return text


@dataclass(frozen=True)
class Offering:
    id: str
    availability_zone: str
    instance_type: str
    instance_count: int
    start: datetime
    end: datetime
    hours: int
    upfront_fee: Decimal
    currency: str

    @property
    def per_instance_hour(self) -> Decimal | None:
        units = self.hours * self.instance_count
        return (self.upfront_fee / units).quantize(Decimal("0.01")) if units else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["upfront_fee"] = str(self.upfront_fee)
        data["per_instance_hour"] = str(self.per_instance_hour) if self.per_instance_hour is not None else None
        return data


def find_offerings(ec2: Any, query: OfferingQuery) -> list[Offering]:
    """All offerings for the query, earliest start first (then cheapest)."""
    offerings: list[Offering] = []
    token: str | None = None
    while True:
        page = ec2.describe_capacity_block_offerings(**query.params(), **({"NextToken": token} if token else {}))
        offerings += [_offering(o) for o in page.get("CapacityBlockOfferings", [])]
        token = page.get("NextToken")
        if not token:
            break
    return sorted(offerings, key=lambda o: (o.start, o.upfront_fee))


def _offering(raw: dict[str, Any]) -> Offering:
    return Offering(
        id=raw["CapacityBlockOfferingId"],
        availability_zone=raw.get("AvailabilityZone", "?"),
        instance_type=raw.get("InstanceType", "?"),
        instance_count=int(raw.get("InstanceCount", 0)),
        start=raw["StartDate"],
        end=raw["EndDate"],
        hours=int(raw.get("CapacityBlockDurationHours", 0)),
        upfront_fee=parse_fee(raw.get("UpfrontFee")),
        currency=raw.get("CurrencyCode", "USD"),
    )


@dataclass(frozen=True)
class Reservation:
    id: str
    state: str
    reservation_type: str
    instance_type: str
    availability_zone: str
    total_instances: int
    available_instances: int
    start: datetime | None
    end: datetime | None
    capacity_block_id: str | None
    # The instances the block has, or will have once it starts (EC2 reports 0 before): pdkit/model/reservation.py.
    count: reservation_rules.Count = NO_COUNT

    @property
    def instances(self) -> int | None:
        return self.count.instances

    @property
    def is_capacity_block(self) -> bool:
        return self.reservation_type == "capacity-block"

    def starts_in(self, now: datetime) -> timedelta | None:
        return self.start - now if self.start and self.start > now else None

    def time_left(self, now: datetime) -> timedelta | None:
        return self.end - now if self.end else None

    def serving_window(self, now: datetime, *, drain_minutes: int) -> timedelta | None:
        """Time the model can serve: from now (or the start) until the kit's drain before the end."""
        if not self.end:
            return None
        begin = max(now, self.start) if self.start else now
        return self.end - timedelta(minutes=drain_minutes) - begin

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def require_extensible(self, now: datetime) -> None:
        """EC2 extends only active or scheduled blocks, from 56 days up to 1 hour before they end
        (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-extend.html)."""
        if self.state not in USABLE_STATES:
            raise KitError(
                f"{self.id} is {self.state}; EC2 extends only active or scheduled blocks. Fix: buy a new one: `pdkit capacity offerings`"
            )
        left = self.time_left(now)
        if left is not None and left < timedelta(hours=1):
            raise KitError(f"{self.id} ends within the hour ({self.end:%H:%M} UTC); EC2 stops offering extensions 1 hour before the end")


def describe_reservation(ec2: Any, reservation_id: str) -> Reservation:
    """The reservation; an unknown id raises botocore's InvalidCapacityReservationId.NotFound ClientError."""
    found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id]).get("CapacityReservations", [])
    if not found:
        raise KitError(f"EC2 returned nothing for {reservation_id}. Fix: check capacity.reservation_id, --region and --aws-profile")
    return reservation_from(found[0])


def reservation_from(raw: dict[str, Any]) -> Reservation:
    """A Reservation from one item of DescribeCapacityReservations (or PurchaseCapacityBlock's reply)."""
    return Reservation(
        id=raw["CapacityReservationId"],
        state=raw.get("State", "unknown"),
        reservation_type=raw.get("ReservationType", "default"),
        instance_type=raw.get("InstanceType", "?"),
        availability_zone=raw.get("AvailabilityZone", "?"),
        total_instances=int(raw.get("TotalInstanceCount", 0)),
        available_instances=int(raw.get("AvailableInstanceCount", 0)),
        start=raw.get("StartDate"),
        end=raw.get("EndDate"),
        capacity_block_id=raw.get("CapacityBlockId"),
        count=reservation_rules.instance_count(raw),
    )


def interconnect_status(ec2: Any, capacity_block_id: str) -> str | None:
    """ok | impaired | insufficient-data. DescribeCapacityBlockStatus takes the block's cb- id, not the cr- id."""
    statuses = ec2.describe_capacity_block_status(CapacityBlockIds=[capacity_block_id]).get("CapacityBlockStatuses", [])
    return str(statuses[0].get("InterconnectStatus")) if statuses else None


def reservation_topology(ec2: Any, reservation_id: str) -> list[str]:
    """Network nodes of the reservation, top layer first (empty until EC2 has placed it)."""
    found = ec2.describe_capacity_reservation_topology(CapacityReservationIds=[reservation_id]).get("CapacityReservations", [])
    return list(found[0].get("NetworkNodes", [])) if found else []


@dataclass(frozen=True)
class BlockInstance:
    id: str
    state: str
    node_group: str | None
    private_ip: str | None
    launched: datetime | None


def instances_in_reservation(ec2: Any, reservation_id: str) -> list[BlockInstance]:
    """Instances launched into the reservation (what the block is being used for), any live state."""
    filters = [
        {"Name": "capacity-reservation-id", "Values": [reservation_id]},
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "shutting-down"]},
    ]
    found: list[BlockInstance] = []
    for raw in described_instances(ec2, filters):
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
        found.append(
            BlockInstance(
                id=raw["InstanceId"],
                state=raw.get("State", {}).get("Name", "?"),
                node_group=tags.get("eks:nodegroup-name"),
                private_ip=raw.get("PrivateIpAddress"),
                launched=raw.get("LaunchTime"),
            )
        )
    return sorted(found, key=lambda i: (i.node_group or "", i.id))


def described_instances(ec2: Any, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every instance DescribeInstances returns for the filters, all pages read."""
    raw: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = ec2.describe_instances(Filters=filters, **({"NextToken": token} if token else {}))
        for reservation in page.get("Reservations", []):
            raw += reservation.get("Instances", [])
        token = page.get("NextToken")
        if not token:
            return raw


@dataclass(frozen=True)
class ExtensionOffering:
    id: str
    hours: int
    start: datetime
    end: datetime
    upfront_fee: Decimal
    currency: str
    instance_count: int
    instance_type: str

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["upfront_fee"] = str(self.upfront_fee)
        return data


def find_extension_offerings(ec2: Any, reservation_id: str, hours: int) -> list[ExtensionOffering]:
    found: list[ExtensionOffering] = []
    token: str | None = None
    while True:
        page = ec2.describe_capacity_block_extension_offerings(
            CapacityBlockExtensionDurationHours=hours, CapacityReservationId=reservation_id, **({"NextToken": token} if token else {})
        )
        for raw in page.get("CapacityBlockExtensionOfferings", []):
            found.append(
                ExtensionOffering(
                    id=raw["CapacityBlockExtensionOfferingId"],
                    hours=int(raw.get("CapacityBlockExtensionDurationHours", hours)),
                    start=raw["CapacityBlockExtensionStartDate"],
                    end=raw["CapacityBlockExtensionEndDate"],
                    upfront_fee=parse_fee(raw.get("UpfrontFee")),
                    currency=raw.get("CurrencyCode", "USD"),
                    instance_count=int(raw.get("InstanceCount", 0)),
                    instance_type=raw.get("InstanceType", "?"),
                )
            )
        token = page.get("NextToken")
        if not token:
            return sorted(found, key=lambda o: (o.end, o.upfront_fee))


def now() -> datetime:
    return datetime.now(UTC)


# The purchase stack's output naming the block its purchase resource bought (stacks/purchase_stack.py).
RESERVATION_OUTPUT = "ReservationId"
# The tag every block the kit buys carries (PurchaseCapacityBlock's TagSpecifications; pdkit.ops.purchase); its value
# identifies the purchase. Here because the CLI finds a bought block by it, and purchase imports this module.
PURCHASE_TAG = "pdkit:purchase-id"


def with_bought_block(plan: Plan, aws: Aws) -> Plan:
    """The plan a command works on. With capacity.purchase the profile holds only the placeholder: the block is
    the one the purchase stack bought, read from its ReservationId output (cloudformation:DescribeStacks), the id
    every resource of the stacks uses. When the stack has no such output (not deployed yet, or a failed first create
    rolled it back and deleted it, keeping the paid block) the block is found by its own purchase tag, which lives on
    the reservation, outside any stack (pdkit.model.plan.purchase_id). Unchanged without a purchase, and when neither
    finds a block, when `missing_reservation` says "not bought yet"."""
    if plan.purchase is None or not plan.reservation_is_placeholder:
        return plan
    bought = bought_reservation_id(aws.client("cloudformation"), plan.stack_names["purchase"]) or tagged_reservation_id(aws.ec2, plan)
    return replace(plan, reservation_id=bought, reservation_is_placeholder=False) if bought else plan


def bought_reservation_id(cloudformation: Any, stack_name: str) -> str | None:
    """The stack's ReservationId output; None when the stack does not exist or has no such output (yet)."""
    from pdkit.ops.aws_errors import stack_missing

    try:
        stacks = cloudformation.describe_stacks(StackName=stack_name).get("Stacks", [])
    except Exception as err:
        if stack_missing(err):
            return None
        raise
    outputs = stacks[0].get("Outputs", []) if stacks else []
    return next((o["OutputValue"] for o in outputs if o.get("OutputKey") == RESERVATION_OUTPUT and o.get("OutputValue")), None)


def tagged_reservation_id(ec2: Any, plan: Plan) -> str | None:
    """The block bought for this plan's purchase, found by its tag: a usable one first, else whatever EC2 shows (a
    pending or expired block is still that block, and its state says more than "not bought yet" would)."""
    assert plan.purchase is not None
    found = reservations_tagged(
        ec2,
        instance_type=plan.purchase.instance_type,
        availability_zone=plan.purchase.availability_zone,
        key=PURCHASE_TAG,
        value=plan.purchase.purchase_id,
    )
    best = next((r for r in found if r.state in USABLE_STATES), found[0] if found else None)
    return best.id if best else None


def reservations_tagged(ec2: Any, *, instance_type: str, availability_zone: str, key: str, value: str) -> list[Reservation]:
    """Reservations of this type in this AZ whose tag `key` is `value`. Filtered server-side only on the documented
    filters (API_DescribeCapacityReservations lists no tag:<key> filter), the tag matched here, every page read."""
    filters = [
        {"Name": "instance-type", "Values": [instance_type]},
        {"Name": "availability-zone", "Values": [availability_zone]},
    ]
    found: list[Reservation] = []
    token: str | None = None
    while True:
        page = ec2.describe_capacity_reservations(Filters=filters, **({"NextToken": token} if token else {}))
        for raw in page.get("CapacityReservations", []):
            if {t.get("Key"): t.get("Value") for t in raw.get("Tags", [])}.get(key) == value:
                found.append(reservation_from(raw))
        token = page.get("NextToken")
        if not token:
            return found


def missing_reservation(plan: Plan) -> str | None:
    """Why the plan names no block to read yet, with the one next step; None when it names one."""
    if not plan.reservation_is_placeholder:
        return None
    if plan.purchase is not None:
        return (
            f"Capacity Block not bought yet: `make deploy` buys it (capacity.purchase, offering {plan.purchase.offering_id}; "
            f"the {plan.stack_names['purchase']} stack has no {RESERVATION_OUTPUT} output in {plan.region}, "
            f"and no reservation there carries its purchase tag)"
        )
    return (
        f"the profile ({plan.profile_path}) still has the synth-only placeholder reservation {plan.reservation_id}. "
        "Fix: `pdkit capacity offerings`, buy one with `pdkit capacity buy OFFERING_ID`, and put its cr- id in capacity.reservation_id"
    )


def require_reservation(plan: Plan) -> str:
    """The plan's reservation id (after `with_bought_block`), or the one next step when there is none yet."""
    missing = missing_reservation(plan)
    if missing:
        raise KitError(missing)
    return plan.reservation_id
