"""`pdkit capacity offerings|buy|status|extend`: find, buy, watch and extend the EC2 Capacity Block.

CloudFormation has no resource that buys a Capacity Block: the kit buys it here, out of band, and the stacks
consume the cr- id from the profile; or, with capacity.purchase, its own custom resource buys it during
`cdk deploy` (stacks/capacity_purchase.py) with the same purchase code (pdkit.ops.purchase).
"""

from __future__ import annotations

import argparse
import re
import shlex
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from pdkit.cli.commands import summary

if TYPE_CHECKING:
    from pdkit.model.plan import Plan
    from pdkit.ops import purchase
    from pdkit.ops.aws_clients import Aws
    from pdkit.ops.capacity import Offering, OfferingQuery, Reservation


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("capacity", help=summary("capacity"))
    cap = p.add_subparsers(dest="capacity_command", metavar="ACTION", required=True)

    query = argparse.ArgumentParser(add_help=False)
    query.add_argument("--instance-type", help="default: the profile's capacity.instance_type")
    query.add_argument("--count", type=int, help="instances (default: the profile's capacity.instance_count)")
    query.add_argument("--hours", type=int, help="block length (default: the profile's capacity.duration_hours)")
    query.add_argument("--earliest", type=_time, metavar="ISO_TIME", help="earliest start, e.g. 2026-12-01T00:00Z")
    query.add_argument("--latest", type=_time, metavar="ISO_TIME", help="latest end")

    o = cap.add_parser("offerings", parents=[common, query], help="list Capacity Block offerings for the profile, earliest first")
    o.add_argument("--output", choices=("text", "json"), default="text")
    o.set_defaults(handler=run_offerings)

    b = cap.add_parser(
        "buy",
        parents=[common, query],
        help="buy an offering: finds it again, shows the fee, dry-runs, then asks you to type the fee",
        description="Pass the same --hours/--count/--earliest/--latest you used with `offerings`: the offering is looked up again with that query.",
    )
    b.add_argument("offering_id", metavar="OFFERING_ID")
    b.add_argument("--yes", action="store_true", help="skip the typed confirmation (the dry run still has to pass)")
    b.set_defaults(handler=run_buy)

    s = cap.add_parser("status", parents=[common], help="state, start/end, time left, interconnect and instances of the profile's block")
    s.add_argument("--output", choices=("text", "json"), default="text")
    s.set_defaults(handler=run_status)

    e = cap.add_parser("extend", parents=[common], help="list extension offerings for the block, or buy one (same guard as buy)")
    e.add_argument("offering_id", metavar="OFFERING_ID", nargs="?", help="an extension offering id; without it, list them")
    e.add_argument("--hours", type=int, default=24, help="extension length (default 24)")
    e.add_argument("--yes", action="store_true", help="skip the typed confirmation (the dry run still has to pass)")
    e.add_argument("--output", choices=("text", "json"), default="text")
    e.set_defaults(handler=run_extend)


def _time(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time like 2026-12-01T09:00Z") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def run_offerings(args: argparse.Namespace) -> int:
    from pdkit import console
    from pdkit.cli.context import load_plan, pdkit_command
    from pdkit.ops import aws_errors, capacity
    from pdkit.ops.aws_clients import Aws

    plan = load_plan(args.profile)
    aws = Aws.for_args(args, plan)
    query = _query(args, plan)
    with aws_errors.translated(region=aws.region):
        found = capacity.find_offerings(aws.ec2, query)
    if args.output == "json":
        console.print_json({"query": query.params(), "region": aws.region, "offerings": [o.to_dict() for o in found]})
        return 0
    if not found:
        console.say(
            f"No Capacity Block offerings for {query.describe()} in {aws.region}. Try another length (--hours), "
            "another window (--earliest/--latest), or fewer instances (--count, then change the profile's roles to match)."
        )
        return 0
    console.table(
        ("offering", "AZ", "start", "end", "hours", "count", "upfront fee", "per instance-hour"),
        (
            (
                o.id,
                o.availability_zone + ("" if o.availability_zone == plan.block_az else " *"),
                console.when(o.start),
                console.when(o.end),
                o.hours,
                o.instance_count,
                capacity.money(o.upfront_fee, o.currency),
                capacity.money(o.per_instance_hour, o.currency) if o.per_instance_hour is not None else "-",
            )
            for o in found
        ),
        title=f"Capacity Block offerings: {query.describe()} in {aws.region}, earliest first",
    )
    if any(o.availability_zone != plan.block_az for o in found):
        console.say(
            f"* not the profile's AZ ({plan.block_az}): after buying one, set aws.availability_zone to its AZ in {plan.profile_path}."
        )
    buy = pdkit_command(args, f"capacity buy {found[0].id}{_query_flags(args)}")
    console.say(f"Next: {buy}  (shows the fee again, dry-runs, then asks you to type it)")
    return 0


def run_buy(args: argparse.Namespace) -> int:
    from pdkit import console
    from pdkit.cli import fee_prompt
    from pdkit.cli.context import in_context, load_plan, pdkit_command
    from pdkit.errors import KitError
    from pdkit.ops import aws_errors, capacity, purchase
    from pdkit.ops.aws_clients import Aws

    plan = load_plan(args.profile)
    _buys_for_the_profile(args, plan)
    aws = Aws.for_args(args, plan)
    query = _query(args, plan)
    with aws_errors.translated(region=aws.region):
        offer = next((o for o in capacity.find_offerings(aws.ec2, query) if o.id == args.offering_id), None)
        if offer is None:
            raise KitError(
                f"offering {args.offering_id} is not offered any more for {query.describe()} in {aws.region} (offerings change by the minute, "
                "and the lookup repeats your query). Fix: run `pdkit capacity offerings` with the same options and buy a current id"
            )
        console.say(f"Offering {offer.id} is still available:")
        console.say(
            f"  {offer.instance_count} x {offer.instance_type} in {offer.availability_zone}, "
            f"{console.when(offer.start)} -> {console.when(offer.end)} ({offer.hours} h)"
        )
        per_hour = f" ({capacity.money(offer.per_instance_hour, offer.currency)} per instance-hour)" if offer.per_instance_hour else ""
        console.say(f"  Upfront fee: {capacity.money(offer.upfront_fee, offer.currency)}{per_hour}, charged now, cannot be cancelled.")
        mismatched = _mismatches(offer, plan)
        if mismatched:
            raise KitError(
                f"offering {offer.id} does not fit the profile ({'; '.join(mismatched)}); nothing was sent. "
                f"Fix: buy an offering in {plan.block_az}, or make the profile name the block you want (`pdkit init NAME --from PROFILE "
                "--az AZ` writes a profile of your own) and run offerings and buy with it"
            )
        what = f"{offer.instance_count} x {offer.instance_type} for {offer.hours} h"
        purchase_id = purchase.new_purchase_id()
        lookup = (
            f"aws ec2 describe-capacity-reservations --region {aws.region}{_aws_cli_profile(args)} "
            f"--filters Name=instance-type,Values={offer.instance_type} "
            f"Name=availability-zone,Values={offer.availability_zone} "
            '--query "CapacityReservations[].[CapacityReservationId,State,StartDate,EndDate,Tags]"'
        )
        outcome = fee_prompt.guarded(
            what=what,
            fee=offer.upfront_fee,
            currency=offer.currency,
            dry=lambda: aws.purchase_ec2.purchase_capacity_block(**purchase.block_request(offer.id, purchase_id, dry=True)),
            buy=lambda: purchase.buy_block(aws.purchase_ec2, aws.ec2, offer, purchase_id),
            assume_yes=args.yes,
            look_for=f"look for a reservation tagged {purchase.PURCHASE_TAG}={purchase_id} (EC2 may take minutes to show it): `{lookup}`",
        )
    if outcome.status != "bought":
        _report_unclear(outcome, what=f"the purchase of {what} ({offer.id})", tagged=f"{purchase.PURCHASE_TAG}={purchase_id}")
        ids = ", ".join(f.reservation_id for f in outcome.found)
        if any(f.certain for f in outcome.found):
            raise KitError(
                f"the purchase went through despite the unclear answer ({outcome.failure}): {ids} carries this purchase's tag. "
                f"Fix: do not buy again; put {ids} in capacity.reservation_id in {plan.profile_path}, "
                f"then `{pdkit_command(args, 'capacity status')}`"
            )
        if outcome.found:
            raise KitError(
                f"the purchase may have gone through ({outcome.failure}): {ids} has the offering's type, AZ, count and dates "
                "but not this purchase's tag, so it may be an earlier block. Fix: do not buy again until you have checked it: "
                f"`aws ec2 describe-capacity-reservations --capacity-reservation-ids {outcome.found[0].reservation_id} "
                f"--region {aws.region}{_aws_cli_profile(args)}`"
            )
        raise KitError(
            f"the purchase may have gone through ({outcome.failure}), and "
            + (f"the check for it failed ({outcome.lookup_failure})" if outcome.lookup_failure else "it is not visible yet")
            + f". Fix: before buying anything again, look for a reservation tagged {purchase.PURCHASE_TAG}={purchase_id} "
            f"in a few minutes (EC2 is eventually consistent): `{lookup}`"
        )
    bought = outcome.reply or {}
    reservation = bought.get("CapacityReservation", {})
    cr = reservation.get("CapacityReservationId", "?")
    console.say(
        f"Bought {cr} (state {reservation.get('State', '?')}): {what} in {offer.availability_zone}, starts {console.when(offer.start)}."
    )
    console.say(f"Put it in {plan.profile_path}:")
    console.say(f"  capacity:\n    reservation_id: {cr}")
    console.say(in_context(args, "Next: `pdkit capacity status`, then `pdkit preflight`."))
    return 0


def _aws_cli_profile(args: argparse.Namespace) -> str:
    """The AWS CLI's --profile for the credentials this command used, so a printed check looks in the same account."""
    return f" --profile {shlex.quote(args.aws_profile)}" if getattr(args, "aws_profile", None) else ""


def _report_unclear(outcome: purchase.Outcome, *, what: str, tagged: str | None) -> None:
    """What the lookup after an unclear answer saw, before the one-line error that ends the command."""
    from pdkit import console

    console.say(f"EC2 gave no clear answer to {what}: {outcome.failure}. It may have gone through; it was not sent again.")
    looked = f"tag {tagged}" if tagged else "the extension history"
    if outcome.lookup_failure:
        console.say(f"Looked for it by {looked}, but the check failed: {outcome.lookup_failure}")
        return
    if not outcome.found:
        console.say(f"Looked for it by {looked}: nothing found yet.")
        return
    console.table(
        ("found", "state", "start", "end", "matched by"),
        ((f.reservation_id, f.state, console.when(f.start), console.when(f.end), f.matched_by) for f in outcome.found),
        title="What EC2 shows now",
    )


def _where(res: Reservation) -> str:
    """The block's size as pdkit/model/reservation.py reads it: before the start EC2 reports 0 instances and the
    count comes from the block's tag, which this line names."""
    count = res.count
    if count.instances is None:
        size = f"? x {res.instance_type} (EC2 reports {count.describe()})"
    elif count.source != "TotalInstanceCount":
        return f"{count.instances} x {res.instance_type} in {res.availability_zone} once it starts (EC2 reports 0 until then; the count is its {count.source} tag)"
    else:
        size = f"{count.instances} x {res.instance_type}"
    note = f" (EC2 reports {count.note})" if count.note else ""
    return f"{size} in {res.availability_zone}, {res.available_instances} not launched{note}"


def run_status(args: argparse.Namespace) -> int:
    from pdkit import console
    from pdkit.cli.context import in_context, load_plan, pdkit_command
    from pdkit.ops import aws_errors, capacity
    from pdkit.ops.aws_clients import Aws

    plan = load_plan(args.profile)
    aws = Aws.for_args(args, plan)
    now = capacity.now()
    with aws_errors.translated(region=aws.region):
        cr = capacity.require_reservation(capacity.with_bought_block(plan, aws))
        res = capacity.describe_reservation(aws.ec2, cr)
        link = capacity.interconnect_status(aws.ec2, res.capacity_block_id) if res.capacity_block_id else None
        instances = capacity.instances_in_reservation(aws.ec2, cr)
    left = res.time_left(now)
    starts = res.starts_in(now)
    if args.output == "json":
        console.print_json(
            {
                "reservation": res.to_dict(),
                "interconnect": link,
                "seconds_left": left.total_seconds() if left else None,
                "seconds_to_start": starts.total_seconds() if starts else None,
                "instances": [vars(i) for i in instances],
            }
        )
        return 0
    meaning, todo = capacity.STATE_MEANING.get(res.state, (res.state, ""))
    rows = [
        ("reservation", f"{res.id} (block {res.capacity_block_id or '-'}, {res.reservation_type})"),
        ("state", f"{res.state}: {meaning}"),
        ("where", _where(res)),
        ("start", console.when(res.start) + (f" (in {console.span(starts)})" if starts else "")),
        ("end", console.when(res.end) + (f" ({console.span(left)} left)" if left and left.total_seconds() > 0 else "")),
        ("interconnect", link or "not reported yet"),
        ("instances", ", ".join(f"{i.id} {i.state} {i.node_group or ''}".strip() for i in instances) or "none launched"),
    ]
    console.table(("", ""), rows, title=f"Capacity Block {res.id} in {aws.region}")
    if todo:
        console.say(in_context(args, f"Next: {todo}"))
    elif left:
        drain = plan.drain_lead_minutes
        console.say(
            f"The kit drains serving {drain} min before the end, EC2 warns at T-40 and EKS scales the node groups to 0, "
            f"EC2 terminates at T-30. More time: {pdkit_command(args, 'capacity extend')}"
        )
    return 0


def run_extend(args: argparse.Namespace) -> int:
    from pdkit import console
    from pdkit.cli import fee_prompt
    from pdkit.cli.context import load_plan, pdkit_command
    from pdkit.errors import KitError
    from pdkit.ops import aws_errors, capacity, purchase
    from pdkit.ops.aws_clients import Aws

    plan = load_plan(args.profile)
    hours = capacity.check_hours(args.hours)
    aws = Aws.for_args(args, plan)
    with aws_errors.translated(region=aws.region):
        cr = capacity.require_reservation(capacity.with_bought_block(plan, aws))
        res = capacity.describe_reservation(aws.ec2, cr)
        res.require_extensible(capacity.now())
        offers = capacity.find_extension_offerings(aws.ec2, cr, hours)
        if args.offering_id is None:
            if args.output == "json":
                console.print_json({"reservation": res.to_dict(), "extension_offerings": [o.to_dict() for o in offers]})
                return 0
            if not offers:
                console.say(f"No {args.hours} h extensions offered for {cr} (ends {console.when(res.end)}). Try another --hours, or later.")
                return 0
            console.table(
                ("extension offering", "adds", "new end", "upfront fee"),
                ((o.id, f"{o.hours} h", console.when(o.end), capacity.money(o.upfront_fee, o.currency)) for o in offers),
                title=f"Extensions of {cr} (ends {console.when(res.end)})",
            )
            console.say(f"Next: {pdkit_command(args, f'capacity extend {offers[0].id} --hours {args.hours}')}")
            return 0
        offer = next((o for o in offers if o.id == args.offering_id), None)
        if offer is None:
            raise KitError(
                f"extension offering {args.offering_id} is not offered any more for {cr} with --hours {args.hours}. "
                f"Fix: `pdkit capacity extend --hours {args.hours}` and pick a current id"
            )
        console.say(
            f"Extend {cr} by {offer.hours} h: ends {console.when(res.end)} -> {console.when(offer.end)}; "
            f"upfront fee {capacity.money(offer.upfront_fee, offer.currency)}, charged now, cannot be cancelled."
        )

        history = f"aws ec2 describe-capacity-block-extension-history --capacity-reservation-ids {cr} --region {aws.region}{_aws_cli_profile(args)}"
        outcome = fee_prompt.guarded(
            what=f"a {offer.hours} h extension of {cr}",
            fee=offer.upfront_fee,
            currency=offer.currency,
            dry=lambda: aws.purchase_ec2.purchase_capacity_block_extension(**purchase.extension_request(offer.id, cr, dry=True)),
            buy=lambda: purchase.extend_block(aws.purchase_ec2, aws.ec2, offer, cr),
            assume_yes=args.yes,
            look_for=f"look for extension offering {offer.id} in the history: `{history}`",
        )
    if outcome.status != "bought":
        _report_unclear(outcome, what=f"the {offer.hours} h extension of {cr} ({offer.id})", tagged=None)
        if outcome.found:
            raise KitError(
                f"the extension went through despite the unclear answer ({outcome.failure}): status {outcome.found[0].state}. "
                f"Fix: do not extend again; follow it with `{pdkit_command(args, 'capacity status')}` and `{history}`"
            )
        raise KitError(
            f"the extension may have gone through ({outcome.failure}), and "
            + (f"the check for it failed ({outcome.lookup_failure})" if outcome.lookup_failure else "it is not in the history yet")
            + f". Fix: before extending again, check in a few minutes (EC2 is eventually consistent): `{history}`"
        )
    bought = outcome.reply or {}
    extensions = bought.get("CapacityBlockExtensions", [])
    status = extensions[0].get("CapacityBlockExtensionStatus", "?") if extensions else "?"
    if status == "payment-succeeded":
        console.say(f"Extension bought and paid: {cr} now ends {console.when(offer.end)}.")
    else:
        # The end date moves only once payment succeeds; a payment failure leaves the old end in place.
        console.say(
            f"Extension bought (status {status}): {cr} ends {console.when(offer.end)} once payment succeeds. If payment fails "
            f"(12 h, or 35 min before the end), it still ends {console.when(res.end)}."
        )
    console.say(
        f"The kit's drain follows the reservation's current end date. Check: {pdkit_command(args, 'capacity status')} "
        f"(extension payments: aws ec2 describe-capacity-block-extension-history --capacity-reservation-ids {cr} --region {aws.region})"
    )
    _eks_scaledown_after_extension(args, plan, aws, new_end=offer.end if status == "payment-succeeded" else None)
    return 0


def _eks_scaledown_after_extension(args: argparse.Namespace, plan: Plan, aws: Aws, *, new_end: datetime | None) -> None:
    """EKS's own scale-down of the GPU node groups (pdkit.ops.scaledown) against the new end; advice only: the
    extension is paid, so nothing here fails the command."""
    from pdkit import console
    from pdkit.cli.context import pdkit_command
    from pdkit.ops import capacity, scaledown

    preflight = pdkit_command(args, "preflight")
    if new_end is None:
        console.say(f"Once the payment succeeds, {preflight} compares EKS's scale-down of the GPU node groups with the new end.")
        return
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        found = scaledown.check(aws, plan, new_end)
    except (BotoCoreError, ClientError) as err:  # the extension is paid: a failed read is a note, not a failed command
        console.say(f"Could not read EKS's scale-down of the GPU node groups ({err}); {preflight} checks it (row EKS scale-down).")
        return
    nodes_up = pdkit_command(args, "nodes up")
    for group in found:
        status, detail, fix = scaledown.advice(
            group, end=new_end, now=capacity.now(), nodes_up=nodes_up, drain_minutes=plan.drain_lead_minutes
        )
        console.say(f"EKS scale-down {status}: {detail}." + (f" {fix}." if fix else ""))
        if group.verdict == "stale":
            console.say(f"  EKS may still move it: {preflight} checks it again (row EKS scale-down).")


# An EC2 id is a lowercase prefix, a dash and lowercase letters and digits (cb-..., cr-..., i-...): anything else is a
# paste gone wrong (quotes, a trailing comma, a space), refused before EC2 is asked.
_EC2_ID = re.compile(r"[a-z]+-[0-9a-z]+")


def _query(args: argparse.Namespace, plan: Plan) -> OfferingQuery:
    """The offering search, refused in one line when EC2 could only answer it with nothing or an error."""
    from pdkit.errors import KitError
    from pdkit.model.catalog import instance_types
    from pdkit.ops.capacity import OfferingQuery, check_hours, now

    known = instance_types()
    if args.instance_type and args.instance_type not in known:
        raise KitError(
            f"--instance-type {args.instance_type!r} is not an instance type the kit plans for. Fix: one of {', '.join(sorted(known))}"
        )
    if args.count is not None and args.count < 1:
        raise KitError(f"--count {args.count} is not a number of instances. Fix: 1 or more; the profile's roles need {plan.instance_count}")
    moment = now()
    # A minute of slack: "now", typed a moment ago, is not the past.
    if args.earliest and args.earliest < moment - timedelta(minutes=1):
        raise KitError(
            f"--earliest {args.earliest:%Y-%m-%d %H:%M} UTC is in the past. Fix: a time after {moment:%Y-%m-%d %H:%M} UTC, or leave it out"
        )
    if args.latest and args.latest <= (args.earliest or moment):
        after = "--earliest" if args.earliest else "now"
        raise KitError(f"--latest {args.latest:%Y-%m-%d %H:%M} UTC is not after {after}. Fix: a later --latest, or leave it out")
    return OfferingQuery(
        instance_type=args.instance_type or plan.instance.name,
        instance_count=args.count or plan.instance_count,
        duration_hours=check_hours(args.hours) if args.hours else plan.block_duration_hours,
        earliest_start=args.earliest,
        latest_end=args.latest,
    )


def _query_flags(args: argparse.Namespace) -> str:
    flags = [
        f"--instance-type {args.instance_type}" if args.instance_type else "",
        f"--count {args.count}" if args.count else "",
        f"--hours {args.hours}" if args.hours else "",
        f"--earliest {args.earliest.isoformat()}" if args.earliest else "",
        f"--latest {args.latest.isoformat()}" if args.latest else "",
    ]
    text = " ".join(f for f in flags if f)
    return f" {text}" if text else ""


def _buys_for_the_profile(args: argparse.Namespace, plan: Plan) -> None:
    """`capacity buy` buys the block the profile deploys onto: another region, type or count could only be bought and
    then refused by preflight and the deploy-time guard, after a non-cancellable fee. Checked before any AWS call."""
    from pdkit.errors import KitError

    if not _EC2_ID.fullmatch(args.offering_id):
        raise KitError(
            f"OFFERING_ID {args.offering_id!r} is not an EC2 offering id (a prefix, a dash, lowercase letters and digits). "
            "Fix: copy the id from the first column of `pdkit capacity offerings`"
        )
    for flag, given, wanted, field in (
        ("--region", args.region, plan.region, "aws.region"),
        ("--instance-type", args.instance_type, plan.instance.name, "capacity.instance_type"),
        ("--count", args.count, plan.instance_count, "capacity.instance_count"),
    ):
        if given is not None and given != wanted:
            raise KitError(
                f"{flag} {given} differs from the profile's {field} ({wanted}); the kit would refuse the block it bought. "
                f"Fix: drop {flag}, or start a profile for that block (`pdkit init NAME --from PROFILE`) and buy with --profile NAME"
            )


def _mismatches(offer: Offering, plan: Plan) -> list[str]:
    notes = []
    if offer.availability_zone != plan.block_az:
        notes.append(f"it is in {offer.availability_zone}, the profile's block AZ is {plan.block_az}")
    if offer.instance_type != plan.instance.name:
        notes.append(f"it is {offer.instance_type}, the profile plans {plan.instance.name}")
    if offer.instance_count != plan.instance_count:
        notes.append(f"it has {offer.instance_count} instances, the profile's roles need {plan.instance_count}")
    return notes
