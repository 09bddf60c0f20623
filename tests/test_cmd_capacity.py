"""`pdkit capacity`: offerings, the guarded purchase, status and extension, against Stubber-checked EC2 calls."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from botocore.exceptions import ClientError

from pdkit import console
from pdkit.cli import fee_prompt
from pdkit.cli.main import main
from pdkit.errors import KitError
from pdkit.ops import aws_clients, purchase
from tests.fixtures.cmd_support import (
    CB,
    CR,
    NOW,
    instance,
    instances_page,
    offering,
    pending_block,
    profile,
    real_profile,
    stub_reservation,
)
from tests.fixtures.scaledown import stub_no_node_groups

pytest_plugins = ["tests.fixtures.cmd_fixtures"]

QUERY = {"InstanceType": "p5en.48xlarge", "InstanceCount": 4, "CapacityDurationHours": 48}
FEE = "98765.43"
PURCHASE_ID = "0123456789abcdef0123456789abcdef"
TAGS = [{"ResourceType": "capacity-reservation", "Tags": [{"Key": "pdkit:purchase-id", "Value": PURCHASE_ID}]}]


@pytest.fixture(autouse=True)
def fixed_purchase_id(monkeypatch):
    """One known purchase id, so the Stubber checks that the dry run and the purchase carry the same tag."""
    monkeypatch.setattr(purchase, "new_purchase_id", lambda: PURCHASE_ID)


def stub_offerings(aws, *offerings: dict[str, Any], query: dict[str, Any] | None = None) -> None:
    aws("ec2").add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": list(offerings)}, query or QUERY)


def stub_dry_run(aws, offering_id: str, *, code: str = "DryRunOperation") -> None:
    aws("ec2").add_client_error(
        "purchase_capacity_block",
        code,
        "Request would have succeeded, but DryRun flag is set."
        if code == "DryRunOperation"
        else "You are not authorized. Encoded authorization failure message: abc",
        412 if code == "DryRunOperation" else 403,
        expected_params={
            "CapacityBlockOfferingId": offering_id,
            "InstancePlatform": "Linux/UNIX",
            "TagSpecifications": TAGS,
            "DryRun": True,
        },
    )


def stub_purchase(aws, offering_id: str) -> None:
    aws("ec2").add_response(
        "purchase_capacity_block",
        {"CapacityReservation": {"CapacityReservationId": CR, "State": "payment-pending", "AvailabilityZone": "eu-south-2b"}},
        {"CapacityBlockOfferingId": offering_id, "InstancePlatform": "Linux/UNIX", "TagSpecifications": TAGS, "DryRun": False},
    )


# --- offerings ---------------------------------------------------------------------------------


def test_offerings_uses_the_profile_query_pages_and_sorts_by_start(aws, capsys):
    """Defaults come from the profile (type, count, duration); all pages are read; earliest start first."""
    ec2 = aws("ec2")
    ec2.add_response(
        "describe_capacity_block_offerings", {"CapacityBlockOfferings": [offering("cbr-late", start_in_h=72)], "NextToken": "t"}, QUERY
    )
    ec2.add_response(
        "describe_capacity_block_offerings",
        {"CapacityBlockOfferings": [offering("cbr-soon", az="eu-south-2b")]},
        QUERY | {"NextToken": "t"},
    )
    assert main(["capacity", "offerings"]) == 0
    out = capsys.readouterr().out
    assert out.index("cbr-soon") < out.index("cbr-late")
    assert "USD 98,765.43" in out
    assert "USD 514.40" in out
    assert "eu-south-2b *" in out
    assert "set aws.availability_zone" in out
    assert "Next: pdkit capacity buy cbr-soon" in out


def test_offerings_options_reach_the_request(aws, capsys):
    stub_offerings(
        aws,
        offering("cbr-1"),
        query={
            "InstanceType": "p5en.48xlarge",
            "InstanceCount": 8,
            "CapacityDurationHours": 72,
            "StartDateRange": NOW.replace(microsecond=0),
        },
    )
    argv = ["capacity", "offerings", "--count", "8", "--hours", "72", "--earliest", NOW.replace(microsecond=0).isoformat()]
    assert main(argv) == 0
    assert "--count 8 --hours 72 --earliest" in capsys.readouterr().out


def test_offerings_json(aws, capsys):
    stub_offerings(aws, offering("cbr-1"))
    assert main(["capacity", "offerings", "--output", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["offerings"][0]["id"] == "cbr-1"
    assert data["offerings"][0]["upfront_fee"] == FEE


def test_offerings_none_says_what_to_try(aws, capsys):
    stub_offerings(aws)
    assert main(["capacity", "offerings"]) == 0
    assert "No Capacity Block offerings for 4 x p5en.48xlarge for 48 h" in capsys.readouterr().out


# --- buy: the purchase guard ---------------------------------------------------------------------


def test_buy_with_yes_dry_runs_first_then_buys_and_says_where_the_id_goes(aws, capsys):
    """The Stubber enforces the order: offerings again, DryRun=True, then the one DryRun=False purchase."""
    stub_offerings(aws, offering("cbr-1"))
    stub_dry_run(aws, "cbr-1")
    stub_purchase(aws, "cbr-1")
    assert main(["capacity", "buy", "cbr-1", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "Upfront fee: USD 98,765.43" in out
    assert "cannot be cancelled" in out
    assert f"reservation_id: {CR}" in out
    assert "Next: `pdkit capacity status" in out


def test_buy_without_terminal_and_without_yes_buys_nothing(aws, capsys):
    """No TTY, no --yes: abort non-zero after the dry run; no DryRun=False call is stubbed, so one would fail the test.
    The offering matches the profile, so no "Note:" is printed (test_buy_notes_a_block_that_does_not_fit_the_profile: the notes)."""
    stub_offerings(aws, offering("cbr-1"))
    stub_dry_run(aws, "cbr-1")
    assert main(["capacity", "buy", "cbr-1"]) == 2
    captured = capsys.readouterr()
    assert "no terminal to confirm a non-cancellable purchase of USD 98,765.43; nothing was bought" in captured.err
    assert "USD 98,765.43" in captured.out
    assert "Note:" not in captured.out


@pytest.mark.parametrize("typed", ["yes", "98765.43", "98,765.43", "USD 98,765.43", " 98765.430 "])
def test_buy_needs_the_typed_fee(aws, monkeypatch, capsys, typed):
    """At a terminal the fee must be typed (in any spelling of the amount); "yes" buys nothing (no purchase is stubbed)."""
    bought = typed != "yes"
    stub_offerings(aws, offering("cbr-1"))
    stub_dry_run(aws, "cbr-1")
    if bought:
        stub_purchase(aws, "cbr-1")
    prompts: list[str] = []
    monkeypatch.setattr(console, "interactive", lambda: True)
    monkeypatch.setattr(console, "ask", lambda prompt: prompts.append(prompt) or typed)
    assert main(["capacity", "buy", "cbr-1"]) == (0 if bought else 2)
    captured = capsys.readouterr()
    assert "Type the fee (98,765.43)" in prompts[0]
    assert f"Bought {CR}" in captured.out if bought else "nothing was bought" in captured.err


def test_end_of_input_at_the_fee_prompt_buys_nothing_in_one_line(aws, monkeypatch, capsys):
    """Ctrl-D at the typed-fee prompt: input() raises EOFError (https://docs.python.org/3/library/functions.html#input),
    a traceback before; now one line, exit 2, and no purchase (none is stubbed, so one would fail the test)."""
    stub_offerings(aws, offering("cbr-1"))
    stub_dry_run(aws, "cbr-1")
    monkeypatch.setattr(console, "interactive", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: (_ for _ in ()).throw(EOFError))
    assert main(["capacity", "buy", "cbr-1"]) == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("pdkit: error: input ended at the prompt (Ctrl-D or a closed stdin) before an answer; nothing was done")


def test_buy_stops_when_the_dry_run_is_refused(aws, capsys):
    """UnauthorizedOperation on the dry run: one line naming the IAM action; no purchase, no prompt."""
    stub_offerings(aws, offering("cbr-1"))
    stub_dry_run(aws, "cbr-1", code="UnauthorizedOperation")
    assert main(["capacity", "buy", "cbr-1", "--yes"]) == 2
    err = capsys.readouterr().err
    assert "not allowed to call ec2:PurchaseCapacityBlock" in err
    assert "decode-authorization-message" in err


def test_buy_stops_when_the_endpoint_ignores_dry_run(aws, capsys):
    """A normal answer to DryRun=True is not a successful dry run: stop before the real call."""
    stub_offerings(aws, offering("cbr-1"))
    aws("ec2").add_response(
        "purchase_capacity_block",
        {"CapacityReservation": {"CapacityReservationId": CR}},
        {"CapacityBlockOfferingId": "cbr-1", "InstancePlatform": "Linux/UNIX", "TagSpecifications": TAGS, "DryRun": True},
    )
    assert main(["capacity", "buy", "cbr-1", "--yes"]) == 2
    assert "returned a result instead of DryRunOperation" in capsys.readouterr().err


def test_buy_refuses_an_offering_that_is_gone(aws, capsys):
    stub_offerings(aws, offering("cbr-other"))
    assert main(["capacity", "buy", "cbr-1", "--yes"]) == 2
    assert "offering cbr-1 is not offered any more for 4 x p5en.48xlarge for 48 h" in capsys.readouterr().err


def test_buy_repeats_the_query_options(aws, capsys):
    """`buy` finds the offering with the same query as `offerings`; other options, other request."""
    stub_offerings(aws, offering("cbr-1"), query=QUERY | {"CapacityDurationHours": 96})
    stub_dry_run(aws, "cbr-1")
    stub_purchase(aws, "cbr-1")
    assert main(["capacity", "buy", "cbr-1", "--hours", "96", "--yes"]) == 0


def test_buy_refuses_an_offering_that_does_not_fit_the_profile_before_the_dry_run(aws, capsys):
    """An offering in another AZ (a query without --count finds it): refused before the dry run and the fee prompt (no
    purchase_capacity_block is stubbed, so a dry run would fail the test). Before, it was a Note and then the prompt."""
    stub_offerings(aws, offering("cbr-2", az="eu-south-2c"))
    assert main(["capacity", "buy", "cbr-2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "offering cbr-2 does not fit the profile (it is in eu-south-2c, the profile's block AZ is eu-south-2a); nothing was sent" in err
    assert "pdkit init NAME --from PROFILE" in err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        # The USD 62,914 prompt of the issue: --count 8 against a profile of 4.
        (["--count", "8"], "--count 8 differs from the profile's capacity.instance_count (4)"),
        (["--instance-type", "p5.48xlarge"], "--instance-type p5.48xlarge differs from the profile's capacity.instance_type"),
        (["--region", "us-east-1"], "--region us-east-1 differs from the profile's aws.region (eu-south-2)"),
        (["--count", "0"], "--count 0 differs"),
        (["--instance-type", "p9.96xlarge"], "--instance-type p9.96xlarge differs"),
    ],
)
def test_buy_refuses_what_the_kit_would_refuse_after_paying_before_any_aws_call(aws, capsys, argv, words):
    """No AWS call is stubbed: the refusal comes before EC2 is asked, and long before a fee prompt."""
    assert main(["capacity", "buy", "cbr-1", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert words in err


@pytest.mark.parametrize("offering_id", ["'cbr-1'", "cbr-1,", "cbr 1", "CBR-1", "offering"])
def test_buy_refuses_a_malformed_offering_id(aws, capsys, offering_id):
    assert main(["capacity", "buy", offering_id]) == 2
    assert "is not an EC2 offering id" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--count", "0"], "--count 0 is not a number of instances"),
        (["--count", "-2"], "--count -2 is not a number of instances"),
        (["--instance-type", "p9.96xlarge"], "is not an instance type the kit plans for"),
        (["--earliest", "2020-01-01T00:00Z"], "is in the past"),
        (["--latest", "2020-01-01T00:00Z"], "is not after now"),
        (["--earliest", "2030-01-02T00:00Z", "--latest", "2030-01-01T00:00Z"], "is not after --earliest"),
    ],
)
def test_offerings_refuse_a_query_ec2_could_only_answer_with_nothing(aws, capsys, argv, words):
    """Each its own line, before DescribeCapacityBlockOfferings (none stubbed)."""
    assert main(["capacity", "offerings", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert words in err


# --- status ------------------------------------------------------------------------------------


def test_status_shows_state_time_left_interconnect_and_instances(aws, tmp_path, capsys):
    stub_reservation(aws)
    aws("ec2").add_response(
        "describe_capacity_block_status",
        {"CapacityBlockStatuses": [{"CapacityBlockId": CB, "InterconnectStatus": "ok"}]},
        {"CapacityBlockIds": [CB]},
    )
    aws("ec2").add_response(
        "describe_instances",
        instances_page(instance("i-0aaa", "glm51-2p2d-decode")),
        {
            "Filters": [
                {"Name": "capacity-reservation-id", "Values": [CR]},
                {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "shutting-down"]},
            ]
        },
    )
    assert main(["capacity", "status", "--profile", real_profile(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "active: instances can launch" in out
    assert "(1 d 22 h left)" in out
    assert "ok" in out
    assert "i-0aaa running glm51-2p2d-decode" in out
    assert "T-40" in out
    assert "pdkit capacity extend" in out


def test_status_of_a_scheduled_block_says_when_it_starts(aws, tmp_path, capsys):
    stub_reservation(aws, State="scheduled", StartDate=NOW + timedelta(hours=5), CapacityBlockId=None)
    aws("ec2").add_response("describe_instances", instances_page())
    assert main(["capacity", "status", "--profile", real_profile(tmp_path), "--output", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["reservation"]["state"] == "scheduled"
    assert data["seconds_to_start"] == 5 * 3600
    assert data["interconnect"] is None
    assert data["instances"] == []


def test_status_with_the_placeholder_points_to_offerings_without_calling_aws(aws, capsys):
    assert main(["capacity", "status"]) == 2
    assert "`pdkit capacity offerings`" in capsys.readouterr().err
    assert aws.requested == []


# --- extend ------------------------------------------------------------------------------------


def extension(offering_id: str, fee: str = "4321.00") -> dict[str, Any]:
    return {
        "CapacityBlockExtensionOfferingId": offering_id,
        "InstanceType": "p5en.48xlarge",
        "InstanceCount": 4,
        "AvailabilityZone": "eu-south-2a",
        "StartDate": NOW - timedelta(hours=2),
        "CapacityBlockExtensionStartDate": NOW + timedelta(hours=46),
        "CapacityBlockExtensionEndDate": NOW + timedelta(hours=70),
        "CapacityBlockExtensionDurationHours": 24,
        "UpfrontFee": fee,
        "CurrencyCode": "USD",
    }


def stub_extensions(aws, *offers: dict[str, Any]) -> None:
    stub_reservation(aws)
    aws("ec2").add_response(
        "describe_capacity_block_extension_offerings",
        {"CapacityBlockExtensionOfferings": list(offers)},
        {"CapacityBlockExtensionDurationHours": 24, "CapacityReservationId": CR},
    )


def test_extend_lists_extension_offerings(aws, tmp_path, capsys):
    stub_extensions(aws, extension("cbeo-1"))
    assert main(["capacity", "extend", "--profile", real_profile(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cbeo-1" in out
    assert "USD 4,321.00" in out
    assert "Next: pdkit capacity extend cbeo-1 --hours 24" in out


def stub_extension_purchase(aws) -> None:
    """The extension cbeo-1 listed, then bought only after a dry run (the Stubber checks DryRun True, then False)."""
    stub_extensions(aws, extension("cbeo-1"))
    params = {"CapacityBlockExtensionOfferingId": "cbeo-1", "CapacityReservationId": CR}
    aws("ec2").add_client_error(
        "purchase_capacity_block_extension", "DryRunOperation", "ok", 412, expected_params=params | {"DryRun": True}
    )
    aws("ec2").add_response(
        "purchase_capacity_block_extension",
        {"CapacityBlockExtensions": [{"CapacityReservationId": CR, "CapacityBlockExtensionStatus": "payment-pending"}]},
        params | {"DryRun": False},
    )


def test_extend_buys_only_after_a_dry_run(aws, tmp_path, capsys):
    stub_extension_purchase(aws)
    assert main(["capacity", "extend", "cbeo-1", "--yes", "--profile", real_profile(tmp_path)]) == 0
    assert "Extension bought (status payment-pending)" in capsys.readouterr().out


def test_extend_without_terminal_buys_nothing(aws, tmp_path, capsys):
    stub_extensions(aws, extension("cbeo-1"))
    aws("ec2").add_client_error("purchase_capacity_block_extension", "DryRunOperation", "ok", 412)
    assert main(["capacity", "extend", "cbeo-1", "--profile", real_profile(tmp_path)]) == 2
    assert "nothing was bought" in capsys.readouterr().err


def test_extend_refuses_an_offering_that_is_gone(aws, tmp_path, capsys):
    stub_extensions(aws, extension("cbeo-2"))
    assert main(["capacity", "extend", "cbeo-1", "--yes", "--profile", real_profile(tmp_path)]) == 2
    assert "extension offering cbeo-1 is not offered any more" in capsys.readouterr().err


def test_extend_on_the_placeholder_points_to_offerings(aws, tmp_path, capsys):
    assert main(["capacity", "extend", "--profile", profile(tmp_path)]) == 2
    assert "placeholder" in capsys.readouterr().err


# --- the guard itself, without the CLI ------------------------------------------------------------


def test_guard_never_buys_when_the_dry_run_fails_or_is_not_confirmed(monkeypatch):
    """Unit view of the purchase order: a failed dry run, a missing terminal or a wrong answer each stop `buy`."""
    bought: list[str] = []

    def refused() -> None:
        raise ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "no"}}, "PurchaseCapacityBlock")

    def accepted() -> None:
        raise ClientError({"Error": {"Code": "DryRunOperation", "Message": "would succeed"}}, "PurchaseCapacityBlock")

    def buy() -> str:
        bought.append("x")
        return "cr"

    fee = Decimal("10.00")
    with pytest.raises(ClientError):
        fee_prompt.guarded(what="w", fee=fee, currency="USD", dry=refused, buy=buy, assume_yes=True, look_for="x")
    monkeypatch.setattr(console, "interactive", lambda: False)
    with pytest.raises(KitError, match="no terminal"):
        fee_prompt.guarded(what="w", fee=fee, currency="USD", dry=accepted, buy=buy, assume_yes=False, look_for="x")
    monkeypatch.setattr(console, "interactive", lambda: True)
    monkeypatch.setattr(console, "ask", lambda _p: "10.01")
    with pytest.raises(KitError, match="cancelled"):
        fee_prompt.guarded(what="w", fee=fee, currency="USD", dry=accepted, buy=buy, assume_yes=False, look_for="x")
    assert bought == []
    monkeypatch.setattr(console, "ask", lambda _p: "10")
    assert fee_prompt.guarded(what="w", fee=fee, currency="USD", dry=accepted, buy=buy, assume_yes=False, look_for="x") == "cr"
    assert bought == ["x"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"State": "expired"}, "EC2 extends only active or scheduled blocks"),
        ({"EndDate": NOW + timedelta(minutes=45)}, "EC2 stops offering extensions 1 hour before the end"),
    ],
)
def test_extend_is_refused_when_ec2_would_refuse_it(aws, tmp_path, capsys, change, words):
    """Only the reservation is read (no extension offerings are stubbed)."""
    stub_reservation(aws, **change)
    assert main(["capacity", "extend", "--profile", real_profile(tmp_path)]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["capacity", "offerings", "--hours", "30"], ["capacity", "extend", "--hours", "400"]])
def test_block_lengths_are_checked_before_calling_aws(aws, tmp_path, capsys, argv):
    assert main([*argv, "--profile", real_profile(tmp_path)]) == 2
    assert "is not a Capacity Block length" in capsys.readouterr().err
    assert aws.requested == []


@pytest.mark.parametrize(
    ("status", "said", "unsaid"),
    [
        # Paid: the end moves at once.
        ("payment-succeeded", ["Extension bought and paid"], "once payment succeeds"),
        # Pending: the old end still holds, and the operator is told where to watch the payment.
        ("payment-pending", ["once payment succeeds", "describe-capacity-block-extension-history"], "and paid"),
    ],
)
def test_an_extension_says_when_the_end_moves(aws, tmp_path, capsys, status, said, unsaid):
    stub_extensions(aws, extension("cbeo-1"))
    aws("ec2").add_client_error("purchase_capacity_block_extension", "DryRunOperation", "ok", 412)
    aws("ec2").add_response("purchase_capacity_block_extension", {"CapacityBlockExtensions": [{"CapacityBlockExtensionStatus": status}]})
    if status == "payment-succeeded":
        stub_no_node_groups(aws)  # then EKS's scale-down is compared with the new end (tests/test_scaledown.py)
    assert main(["capacity", "extend", "cbeo-1", "--yes", "--profile", real_profile(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert all(words in out for words in said)
    assert unsaid not in out


def test_buy_after_a_503_reports_an_untagged_look_alike_as_uncertain(aws, capsys):
    """After a 5xx the lookup finds a Capacity Block with the offering's type, AZ, count and dates but without
    this purchase's tag: that may be an earlier purchase, so the command says "may", names it, asks for a
    check before buying again, and exits non-zero. The Stubber proves the purchase was sent once (a second
    purchase_capacity_block call has no queued answer)."""
    offer = offering("cbr-1")
    stub_offerings(aws, offer)
    stub_dry_run(aws, "cbr-1")
    aws("ec2").add_client_error(
        "purchase_capacity_block",
        "Unavailable",
        "The server is overloaded",
        503,
        expected_params={"CapacityBlockOfferingId": "cbr-1", "InstancePlatform": "Linux/UNIX", "TagSpecifications": TAGS, "DryRun": False},
    )
    # A block not started yet as EC2 reports it (ParallelCluster's recorded block: count 0, the count in EC2's own tag),
    # without this purchase's tag.
    alike = pending_block(
        CapacityReservationId="cr-0alike0000000000", State="scheduled", StartDate=offer["StartDate"], EndDate=offer["EndDate"]
    )
    aws("ec2").add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [alike]},
        {"Filters": [{"Name": "instance-type", "Values": ["p5en.48xlarge"]}, {"Name": "availability-zone", "Values": ["eu-south-2a"]}]},
    )
    assert main(["capacity", "buy", "cbr-1", "--yes"]) == 2
    captured = capsys.readouterr()
    assert "cr-0alike0000000000" in captured.out
    assert "same type, AZ, count, start and end (no tag)" in captured.out
    assert "may be an earlier block" in captured.err
    assert "do not buy again until you have checked it" in captured.err
    # The purchase went through the one-attempt client, the lookup through the ordinary one.
    assert ("ec2", {"patience": aws_clients.PURCHASE}) in aws.options


# --- a block bought by `make deploy` (capacity.purchase) -------------------------------------------

# The purchase stack (stacks/purchase_stack.py) holds the bought id since issue 25.
CAPACITY_STACK = "glm51-2p2d-purchase"
# DescribeCapacityReservations with the documented filters, when the stack has no ReservationId: the block is looked
# for by its purchase tag (pdkit.ops.capacity.tagged_reservation_id).
TAG_LOOKUP = {"Filters": [{"Name": "instance-type", "Values": ["p5en.48xlarge"]}, {"Name": "availability-zone", "Values": ["eu-south-2a"]}]}


def purchase_profile(tmp_path) -> str:
    return profile(tmp_path, capacity__purchase={"offering_id": "cb-0123456789abcdef0", "confirm_upfront_fee_usd": FEE})


def stub_capacity_stack(
    aws, *, outputs: list[dict[str, str]] | None = None, exists: bool = True, tagged: list[dict[str, Any]] | None = None
) -> None:
    """DescribeStacks by name (cloudformation API model): Outputs once the stack is complete; a ValidationError
    "Stack with id NAME does not exist" when there is no such stack. Without a ReservationId output the CLI then
    looks for the block by its purchase tag: `tagged` is what DescribeCapacityReservations answers (none by default)."""
    if not any(o.get("OutputKey") == "ReservationId" for o in outputs or []) or not exists:
        aws("ec2").add_response("describe_capacity_reservations", {"CapacityReservations": tagged or []}, TAG_LOOKUP)
    if not exists:
        aws("cloudformation").add_client_error(
            "describe_stacks",
            "ValidationError",
            f"Stack with id {CAPACITY_STACK} does not exist",
            400,
            expected_params={"StackName": CAPACITY_STACK},
        )
        return
    stack = {"StackName": CAPACITY_STACK, "CreationTime": NOW, "StackStatus": "CREATE_COMPLETE"}
    aws("cloudformation").add_response(
        "describe_stacks", {"Stacks": [stack | ({"Outputs": outputs} if outputs is not None else {})]}, {"StackName": CAPACITY_STACK}
    )


def test_status_of_a_bought_block_reads_its_id_from_the_capacity_stack(aws, tmp_path, capsys):
    """With capacity.purchase the profile keeps the placeholder; the block is the capacity stack's ReservationId output
    (stacks/capacity_stack.py), the id every resource of the stack uses."""
    stub_capacity_stack(
        aws, outputs=[{"OutputKey": "GpuLaunchTemplateId", "OutputValue": "lt-0"}, {"OutputKey": "ReservationId", "OutputValue": CR}]
    )
    stub_reservation(aws, State="scheduled", StartDate=NOW + timedelta(hours=5), CapacityBlockId=None)
    aws("ec2").add_response("describe_instances", instances_page())
    assert main(["capacity", "status", "--profile", purchase_profile(tmp_path), "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["reservation"]["id"] == CR


@pytest.mark.parametrize(
    "stack", [{"exists": False}, {"outputs": None}, {"outputs": [{"OutputKey": "GpuLaunchTemplateId", "OutputValue": "lt-0"}]}]
)
@pytest.mark.parametrize("command", [["capacity", "status"], ["capacity", "extend"], ["nodes", "up"]])
def test_before_the_purchase_commands_say_make_deploy_buys_it(aws, tmp_path, capsys, stack, command):
    """Stack absent, or present without the ReservationId output (before its first complete deploy): one line, the
    next step, and no EC2 call on the placeholder."""
    stub_capacity_stack(aws, **stack)
    assert main([*command, "--profile", purchase_profile(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Capacity Block not bought yet: `make deploy` buys it" in err
    assert "Traceback" not in err
    # The stack, then the tag lookup; nothing on the placeholder.
    assert [service for service, *_ in aws.requested] == ["cloudformation", "ec2"]


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGHUP", "second Ctrl-C"])
def test_a_purchase_stopped_after_it_was_sent_says_what_was_sent_and_how_to_find_it(aws, monkeypatch, capsys, stop):
    """SIGTERM and SIGHUP (a closed terminal, `kill`, a CI cancel) ended the process without a word, and a second Ctrl-C
    during the lookup printed only "interrupted": the tag the block carries was lost with the process."""
    import os
    import signal
    import time

    stub_offerings(aws, offering("cbr-1"))
    stub_dry_run(aws, "cbr-1")

    def buy_block(*_a, **_k):
        if stop == "second Ctrl-C":
            raise KeyboardInterrupt
        os.kill(os.getpid(), getattr(signal, stop))
        time.sleep(5)  # the handler raises before this returns
        raise AssertionError("the signal was not delivered")

    monkeypatch.setattr(purchase, "buy_block", buy_block)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    assert main(["capacity", "buy", "cbr-1", "--yes"]) == 130
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("pdkit: interrupted: stopped after the purchase of 4 x p5en.48xlarge for 48 h was sent to EC2 once")
    assert f"look for a reservation tagged pdkit:purchase-id={PURCHASE_ID}" in err
    assert "aws ec2 describe-capacity-reservations --region eu-south-2" in err
    assert {sig: signal.getsignal(sig) for sig in before} == before, "the default handlers come back after the purchase"
