"""A purchase or extension is sent at most once; an unclear answer is looked up, never resent.

Against a loopback stand-in for EC2 (tests/fixtures/ec2_standin.py) reached through
AWS_ENDPOINT_URL_EC2, so the real botocore retry handler and timeouts are in the path. Why it
matters: PurchaseCapacityBlock and PurchaseCapacityBlockExtension take no idempotency token
(botocore EC2 model: no ClientToken member), and botocore's default retry mode resends on 5xx,
timeouts and dropped connections (https://docs.aws.amazon.com/boto3/latest/guide/retries.html),
so each resend can buy another non-cancellable block.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, ConnectionClosedError
from botocore.stub import Stubber

from pdkit.cli.main import main
from pdkit.errors import KitError
from pdkit.ops import aws_clients, purchase
from pdkit.ops.aws_clients import Patience
from pdkit.ops.capacity import ExtensionOffering, Offering
from tests.fixtures.cmd_support import CR, REGION, real_profile
from tests.fixtures.ec2_standin import HANG, error, items, ok, running

pytest_plugins = ["tests.fixtures.cmd_fixtures"]

START = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
END = START + timedelta(hours=48)
NEW_CR = "cr-0fedcba9876543210"


@pytest.fixture
def ec2_at(offline_aws, monkeypatch):
    """Point the real client factory at a stand-in; short timeouts so a hung answer costs a second, not a minute."""

    def point(url: str) -> None:
        monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", url)

    monkeypatch.setattr(aws_clients, "PURCHASE", Patience(connect=2, read=0.5, attempts=1))
    monkeypatch.setattr(aws_clients, "READS", Patience(connect=2, read=0.5, attempts=2))
    monkeypatch.setattr(aws_clients, "WAIT_NOTICE_AFTER", 0.1)
    return point


def offerings(_params: dict[str, str]) -> tuple[int, str]:
    row = {
        "capacityBlockOfferingId": "cbr-1",
        "instanceType": "p5en.48xlarge",
        "availabilityZone": "eu-south-2a",
        "instanceCount": 4,
        "startDate": START,
        "endDate": END,
        "capacityBlockDurationHours": 48,
        "upfrontFee": "98765.43",
        "currencyCode": "USD",
        "tenancy": "default",
    }
    return ok("DescribeCapacityBlockOfferings", items("capacityBlockOfferingSet", [row]))


def dry_run_ok(action: str, then: Any) -> Any:
    """DryRun=true gets EC2's DryRunOperation (HTTP 412); the real request gets `then`."""

    def answer(params: dict[str, str]) -> Any:
        if params.get("DryRun") == "true":
            return error(412, "DryRunOperation", "Request would have succeeded, but DryRun flag is set.")
        return then

    return answer


def reservations(rows: list[dict[str, Any]]) -> Any:
    return lambda _params: ok("DescribeCapacityReservations", items("capacityReservationSet", rows))


def block(cr: str, *, tags: list[dict[str, str]] | None = None, start: datetime = START) -> dict[str, Any]:
    row: dict[str, Any] = {
        "capacityReservationId": cr,
        "instanceType": "p5en.48xlarge",
        "availabilityZone": "eu-south-2a",
        "totalInstanceCount": 4,
        "availableInstanceCount": 4,
        "state": "payment-pending",
        "startDate": start,
        "endDate": start + timedelta(hours=48),
        "reservationType": "capacity-block",
    }
    if tags:
        row["tagSet"] = tags
    return row


# --- buy ----------------------------------------------------------------------------------------


def test_buy_answered_503_is_sent_once_then_looked_up(ec2_at, tmp_path, capsys):
    """503 to the real PurchaseCapacityBlock: exactly one real request (botocore's standard mode retries 5xx,
    3 attempts: https://docs.aws.amazon.com/boto3/latest/guide/retries.html), then DescribeCapacityReservations;
    nothing found yet, so a non-zero exit that says it may have gone through and to check before buying again."""
    script = {
        "DescribeCapacityBlockOfferings": offerings,
        "PurchaseCapacityBlock": dry_run_ok("PurchaseCapacityBlock", error(503, "Unavailable", "The server is overloaded")),
        "DescribeCapacityReservations": reservations([]),
    }
    with running(script) as ec2:
        ec2_at(ec2.url)
        code = main(["capacity", "buy", "cbr-1", "--yes", "--profile", real_profile(tmp_path)])
    assert len(ec2.sent("PurchaseCapacityBlock", dry=False)) == 1
    assert len(ec2.sent("PurchaseCapacityBlock", dry=True)) == 1
    assert ec2.sent("DescribeCapacityReservations")
    captured = capsys.readouterr()
    assert code == 2
    assert "It may have gone through; it was not sent again." in captured.out
    assert "nothing found yet" in captured.out
    last = captured.err.strip().splitlines()[-1]
    assert last.startswith("pdkit: error: the purchase may have gone through (HTTP 503 Unavailable")
    assert "before buying anything again" in last
    assert "run the command again" not in captured.err


def test_buy_that_never_answers_is_sent_once_and_found_by_its_tag(ec2_at, tmp_path, capsys):
    """A purchase whose answer never comes: one real request (botocore retries read timeouts and dropped
    connections by default), a waiting line, then the reservation carrying the tag that request sent
    (PurchaseCapacityBlock TagSpecifications, botocore EC2 model) is found and shown; exit non-zero, "do not buy again"."""
    sent_tag: dict[str, str] = {}

    def lookup(_params: dict[str, str]) -> tuple[int, str]:
        real = ec2.sent("PurchaseCapacityBlock", dry=False)
        sent_tag.update(key=real[0]["TagSpecification.1.Tag.1.Key"], value=real[0]["TagSpecification.1.Tag.1.Value"])
        rows = [block("cr-0aaaaaaaaaaaaaaaa", start=START - timedelta(days=9)), block(NEW_CR, tags=[sent_tag])]
        return reservations(rows)(_params)

    script = {
        "DescribeCapacityBlockOfferings": offerings,
        "PurchaseCapacityBlock": dry_run_ok("PurchaseCapacityBlock", HANG),
        "DescribeCapacityReservations": lookup,
    }
    with running(script) as ec2:
        ec2_at(ec2.url)
        code = main(["capacity", "buy", "cbr-1", "--yes", "--profile", real_profile(tmp_path)])
    assert len(ec2.sent("PurchaseCapacityBlock", dry=False)) == 1
    assert ec2.sent("PurchaseCapacityBlock", dry=False)[0]["TagSpecification.1.ResourceType"] == "capacity-reservation"
    assert sent_tag["key"] == "pdkit:purchase-id"
    assert ec2.sent("PurchaseCapacityBlock", dry=True)[0]["TagSpecification.1.Tag.1.Value"] == sent_tag["value"]
    captured = capsys.readouterr()
    assert code == 2
    assert "Waiting for PurchaseCapacityBlock" in captured.err
    assert NEW_CR in captured.out
    assert "cr-0aaaaaaaaaaaaaaaa" not in captured.out
    last = captured.err.strip().splitlines()[-1]
    assert "the purchase went through despite the unclear answer (no answer before the read timeout" in last
    assert f"{NEW_CR} carries this purchase's tag. Fix: do not buy again" in last


# --- extend -------------------------------------------------------------------------------------


def extension_script(purchase_answer: Any, history: list[dict[str, Any]]) -> dict[str, Any]:
    now = datetime.now(UTC).replace(microsecond=0)
    ends = now + timedelta(hours=46)
    offer = {
        "capacityBlockExtensionOfferingId": "cbeo-1",
        "instanceType": "p5en.48xlarge",
        "instanceCount": 4,
        "availabilityZone": "eu-south-2a",
        "startDate": now - timedelta(hours=2),
        "capacityBlockExtensionStartDate": ends,
        "capacityBlockExtensionEndDate": ends + timedelta(hours=24),
        "capacityBlockExtensionDurationHours": 24,
        "upfrontFee": "4321.00",
        "currencyCode": "USD",
    }
    current = block(CR, start=now - timedelta(hours=2)) | {"state": "active", "endDate": ends}
    return {
        "DescribeCapacityReservations": reservations([current]),
        "DescribeCapacityBlockExtensionOfferings": lambda _p: ok(
            "DescribeCapacityBlockExtensionOfferings", items("capacityBlockExtensionOfferingSet", [offer])
        ),
        "PurchaseCapacityBlockExtension": dry_run_ok("PurchaseCapacityBlockExtension", purchase_answer),
        "DescribeCapacityBlockExtensionHistory": one_page(history),
    }


def one_page(history: list[dict[str, Any]]) -> Any:
    """The history in one page (no NextToken); a second call is refused with a 4xx, so a lookup that keeps paging
    past the last page ends (and fails its test) instead of hanging it."""
    calls: list[int] = []

    def answer(_params: dict[str, str]) -> Any:
        calls.append(1)
        if len(calls) > 1:
            return error(400, "InvalidParameterValue", "the last page had no NextToken")
        return ok("DescribeCapacityBlockExtensionHistory", items("capacityBlockExtensionSet", history))

    return answer


def test_extension_answered_500_is_sent_once_and_found_in_the_history(ec2_at, tmp_path, capsys):
    """500 to PurchaseCapacityBlockExtension (no TagSpecifications in the botocore EC2 model): one real request,
    then DescribeCapacityBlockExtensionHistory with its capacity-block-extension-offering-id filter (same model)
    finds it; exit non-zero, "do not extend again"."""
    paid = {
        "capacityReservationId": CR,
        "capacityBlockExtensionOfferingId": "cbeo-1",
        "capacityBlockExtensionStatus": "payment-pending",
        "capacityBlockExtensionDurationHours": 24,
    }
    with running(extension_script(error(500, "InternalError", "internal"), [paid])) as ec2:
        ec2_at(ec2.url)
        code = main(["capacity", "extend", "cbeo-1", "--yes", "--profile", real_profile(tmp_path)])
    assert len(ec2.sent("PurchaseCapacityBlockExtension", dry=False)) == 1
    history = ec2.sent("DescribeCapacityBlockExtensionHistory")
    assert len(history) == 1, "one page, no NextToken: one call"
    assert history[0]["Filter.1.Name"] == "capacity-block-extension-offering-id"
    assert history[0]["Filter.1.Value.1"] == "cbeo-1"
    captured = capsys.readouterr()
    assert code == 2
    assert "payment-pending" in captured.out
    assert "the extension went through despite the unclear answer (HTTP 500 InternalError" in captured.err
    assert "do not extend again" in captured.err


def test_extension_that_never_answers_is_sent_once_then_looked_up(ec2_at, tmp_path, capsys):
    """No answer to PurchaseCapacityBlockExtension (no ClientToken in the botocore EC2 model, so a resend could
    buy twice): one real request, then the history lookup (empty): the error says it may have gone through
    and to check the history before extending again."""
    with running(extension_script(HANG, [])) as ec2:
        ec2_at(ec2.url)
        code = main(["capacity", "extend", "cbeo-1", "--yes", "--profile", real_profile(tmp_path)])
    assert len(ec2.sent("PurchaseCapacityBlockExtension", dry=False)) == 1
    assert len(ec2.sent("DescribeCapacityBlockExtensionHistory")) == 1
    err = capsys.readouterr().err
    assert code == 2
    assert "the extension may have gone through (no answer before the read timeout" in err
    assert "before extending again" in err
    assert "describe-capacity-block-extension-history" in err


# --- the lookup and the classification, with Stubber-checked calls ---------------------------------


OFFER = Offering(
    id="cbr-1",
    availability_zone="eu-south-2a",
    instance_type="p5en.48xlarge",
    instance_count=4,
    start=START,
    end=END,
    hours=48,
    upfront_fee=Decimal("98765.43"),
    currency="USD",
)
LOOKUP = {
    "Filters": [
        {"Name": "instance-type", "Values": ["p5en.48xlarge"]},
        {"Name": "availability-zone", "Values": ["eu-south-2a"]},
    ]
}


def stubbed_ec2() -> tuple[Any, Stubber]:
    client = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION).client("ec2")  # noqa: S106
    stubber = Stubber(client)
    stubber.activate()
    return client, stubber


def raw_block(cr: str, *, tag: str | None = None, count: int = 4, start: datetime = START) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "CapacityReservationId": cr,
        "InstanceType": "p5en.48xlarge",
        "AvailabilityZone": "eu-south-2a",
        "TotalInstanceCount": count,
        "State": "payment-pending",
        "StartDate": start,
        "EndDate": start + timedelta(hours=48),
        "ReservationType": "capacity-block",
    }
    if tag:
        raw["Tags"] = [{"Key": "pdkit:purchase-id", "Value": tag}]
    return raw


def unclear_purchase(stubber: Stubber, status: int = 503) -> None:
    stubber.add_client_error(
        "purchase_capacity_block",
        "Unavailable" if status >= 500 else "InsufficientInstanceCapacity",
        "stand-in",
        status,
        expected_params=purchase.block_request("cbr-1", "pid-1", dry=False),
    )


def test_lookup_finds_the_tagged_reservation_across_pages(offline_aws):
    """After a 503 the reservation carrying our purchase id is found (on page 2: DescribeCapacityReservations
    pages with NextToken, botocore EC2 model), and an untagged one that merely looks alike is not reported next to it."""
    ec2, stubber = stubbed_ec2()
    unclear_purchase(stubber)
    stubber.add_response("describe_capacity_reservations", {"CapacityReservations": [raw_block("cr-0alike")], "NextToken": "p2"}, LOOKUP)
    stubber.add_response(
        "describe_capacity_reservations", {"CapacityReservations": [raw_block(NEW_CR, tag="pid-1")]}, LOOKUP | {"NextToken": "p2"}
    )
    outcome = purchase.buy_block(ec2, ec2, OFFER, "pid-1")
    stubber.assert_no_pending_responses()
    assert outcome.status == "unclear"
    assert [f.reservation_id for f in outcome.found] == [NEW_CR]
    assert outcome.found[0].matched_by == "tag pdkit:purchase-id=pid-1"
    assert (outcome.found[0].state, outcome.found[0].start, outcome.found[0].end) == ("payment-pending", START, END), (
        "the operator is shown the block's state and dates as EC2 reports them (a payment-pending block can still fail)"
    )
    assert outcome.failure.startswith("HTTP 503 Unavailable")
    assert outcome.purchase_id == "pid-1", "the tag value the operator searches for later (tag_lookup_command) when EC2 was slow"


def test_lookup_without_the_tag_falls_back_to_type_az_count_and_dates(offline_aws):
    """No tagged reservation: a Capacity Block with the offering's count, start and end is reported as a
    possible (uncertain) match; one with another start or count is not. The offering's dates are the block's
    dates (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-purchase.html)."""
    ec2, stubber = stubbed_ec2()
    unclear_purchase(stubber)
    rows = [raw_block("cr-0same"), raw_block("cr-0other", start=START + timedelta(days=1)), raw_block("cr-0small", count=2)]
    stubber.add_response("describe_capacity_reservations", {"CapacityReservations": rows}, LOOKUP)
    outcome = purchase.buy_block(ec2, ec2, OFFER, "pid-1")
    assert [f.reservation_id for f in outcome.found] == ["cr-0same"]
    assert outcome.found[0].matched_by == "same type, AZ, count, start and end (no tag)"
    assert (outcome.found[0].state, outcome.found[0].start, outcome.found[0].end) == ("payment-pending", START, END), (
        "what the possible match is shown with, so the operator can tell it from an earlier block before buying again"
    )
    assert outcome.found[0].certain is False


def test_lookup_that_finds_nothing_is_reported_as_nothing(offline_aws):
    """An empty DescribeCapacityReservations answer is "nothing yet", not an error: EC2 is eventually
    consistent (https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html)."""
    ec2, stubber = stubbed_ec2()
    unclear_purchase(stubber)
    stubber.add_response("describe_capacity_reservations", {"CapacityReservations": []}, LOOKUP)
    outcome = purchase.buy_block(ec2, ec2, OFFER, "pid-1")
    assert outcome.status == "unclear"
    assert outcome.found == ()
    assert outcome.lookup_failure == ""


def test_a_4xx_refusal_is_raised_without_a_lookup(offline_aws):
    """EC2 client errors come with a 4xx status (EC2 errors overview): nothing was bought, so no lookup
    (the Stubber has no describe response queued; a lookup would fail the test)."""
    ec2, stubber = stubbed_ec2()
    unclear_purchase(stubber, status=400)
    with pytest.raises(ClientError):
        purchase.buy_block(ec2, ec2, OFFER, "pid-1")
    stubber.assert_no_pending_responses()


def test_a_failed_lookup_is_reported_not_raised(offline_aws):
    """The lookup itself failing (here a 500) must not hide that the purchase may have gone through."""
    ec2, stubber = stubbed_ec2()
    unclear_purchase(stubber)
    stubber.add_client_error("describe_capacity_reservations", "InternalError", "x", 500, expected_params=LOOKUP)
    outcome = purchase.buy_block(ec2, ec2, OFFER, "pid-1")
    assert outcome.status == "unclear"
    assert outcome.lookup_failure.startswith("HTTP 500 InternalError")
    assert (outcome.purchase_id, outcome.found) == ("pid-1", ())
    assert outcome.failure.startswith("HTTP 503 Unavailable"), "what the purchase itself got is still reported next to the failed lookup"


def test_extension_lookup_filters_the_history_by_offering(offline_aws):
    """PurchaseCapacityBlockExtension takes no TagSpecifications (botocore EC2 model), so the extension is
    found by DescribeCapacityBlockExtensionHistory's capacity-block-extension-offering-id filter."""
    ec2, stubber = stubbed_ec2()
    ext = ExtensionOffering(
        id="cbeo-1",
        hours=24,
        start=END,
        end=END + timedelta(hours=24),
        upfront_fee=Decimal(1),
        currency="USD",
        instance_count=4,
        instance_type="p5en.48xlarge",
    )
    stubber.add_client_error("purchase_capacity_block_extension", "InternalError", "x", 500)
    stubber.add_response(
        "describe_capacity_block_extension_history",
        {"CapacityBlockExtensions": [{"CapacityReservationId": CR, "CapacityBlockExtensionStatus": "payment-succeeded"}]},
        {"CapacityReservationIds": [CR], "Filters": [{"Name": "capacity-block-extension-offering-id", "Values": ["cbeo-1"]}]},
    )
    outcome = purchase.extend_block(ec2, ec2, ext, CR)
    assert [(f.reservation_id, f.state) for f in outcome.found] == [(CR, "payment-succeeded")]


def test_the_purchase_client_never_retries_whatever_the_environment_says(offline_aws, monkeypatch):
    """An explicit client Config(retries=...) beats AWS_MAX_ATTEMPTS (botocore args._compute_retry_max_attempts),
    so an operator's AWS_MAX_ATTEMPTS=10 cannot turn purchase retries back on."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "10")
    client = aws_clients.make_client("ec2", aws_profile=None, region=REGION, patience=aws_clients.PURCHASE)
    assert client.meta.config.retries["total_max_attempts"] == 1
    assert client.meta.config.read_timeout == aws_clients.PURCHASE.read


def test_the_purchase_logic_imports_no_cli_or_terminal_code():
    """pdkit.ops.purchase is reused outside the CLI (a CloudFormation custom resource): no rich, console or argparse CLI."""
    probe = "import sys, pdkit.ops.purchase; print(sorted(m for m in sys.modules if m in {'rich', 'pdkit.console', 'pdkit.cli.main', 'pdkit.cli.fee_prompt'}))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_ctrl_c_while_waiting_is_unclear_and_still_looked_up():
    """Ctrl-C while waiting for EC2: the request may already have been received (no ClientToken, botocore EC2
    model), so it is treated like a timeout: looked up, not reported as "nothing bought"."""
    looked: list[str] = []

    def send() -> dict[str, Any]:
        raise KeyboardInterrupt

    def look() -> list[purchase.Sighting]:
        looked.append("x")
        return []

    outcome = purchase.send_once(send, look, purchase_id="pid-1")
    assert outcome.status == "unclear"
    assert outcome.failure == "interrupted before EC2 answered"
    assert looked == ["x"]


def _extension_offer():
    return ExtensionOffering(
        id="cbeo-1",
        hours=24,
        start=END,
        end=END + timedelta(hours=24),
        upfront_fee=Decimal(1),
        currency="USD",
        instance_count=4,
        instance_type="p5en.48xlarge",
    )


def test_extension_lookup_reads_every_page_of_the_history(offline_aws):
    """DescribeCapacityBlockExtensionHistory pages with NextToken (botocore EC2 model: NextToken in and out);
    the extension bought may be on the second page, with its status and dates."""
    ec2, stubber = stubbed_ec2()
    query = {"CapacityReservationIds": [CR], "Filters": [{"Name": "capacity-block-extension-offering-id", "Values": ["cbeo-1"]}]}
    stubber.add_response("describe_capacity_block_extension_history", {"CapacityBlockExtensions": [], "NextToken": "t1"}, query)
    stubber.add_response(
        "describe_capacity_block_extension_history",
        {
            "CapacityBlockExtensions": [
                {
                    "CapacityReservationId": NEW_CR,
                    "CapacityBlockExtensionStatus": "payment-pending",
                    "CapacityBlockExtensionStartDate": END,
                    "CapacityBlockExtensionEndDate": END + timedelta(hours=24),
                },
                {"CapacityBlockExtensionStatus": "payment-succeeded"},
            ]
        },
        query | {"NextToken": "t1"},
    )
    (first, second) = purchase.find_extension(ec2, _extension_offer(), CR)
    stubber.assert_no_pending_responses()
    assert (first.reservation_id, first.state, first.start, first.end) == (NEW_CR, "payment-pending", END, END + timedelta(hours=24))
    assert first.matched_by == "extension offering cbeo-1"
    assert (second.reservation_id, second.state, second.start, second.end) == (CR, "payment-succeeded", None, None)


def test_tag_lookup_reads_every_page_and_keeps_only_our_tag(offline_aws):
    """DescribeCapacityReservations pages with NextToken and has no tag:<key> filter (API reference): the
    reservation carrying our purchase tag may be on any page, among reservations without tags."""
    ec2, stubber = stubbed_ec2()
    filters = [{"Name": "instance-type", "Values": ["p5en.48xlarge"]}, {"Name": "availability-zone", "Values": ["eu-south-2a"]}]
    ours = {
        "CapacityReservationId": NEW_CR,
        "InstanceType": "p5en.48xlarge",
        "AvailabilityZone": "eu-south-2a",
        "TotalInstanceCount": 4,
        "State": "scheduled",
        "StartDate": START,
        "EndDate": END,
        "Tags": [{"Key": purchase.PURCHASE_TAG, "Value": "pid-1"}],
    }
    untagged = {k: v for k, v in ours.items() if k != "Tags"} | {"CapacityReservationId": CR}
    stubber.add_response("describe_capacity_reservations", {"CapacityReservations": [untagged], "NextToken": "t1"}, {"Filters": filters})
    stubber.add_response("describe_capacity_reservations", {"CapacityReservations": [ours]}, {"Filters": filters, "NextToken": "t1"})
    (found,) = purchase.find_tagged(ec2, instance_type="p5en.48xlarge", availability_zone="eu-south-2a", purchase_id="pid-1")
    stubber.assert_no_pending_responses()
    assert (found.reservation_id, found.state, found.start, found.end) == (NEW_CR, "scheduled", START, END)
    assert found.matched_by == f"tag {purchase.PURCHASE_TAG}=pid-1"


@pytest.mark.parametrize(
    ("err", "said"),
    [
        (
            ClientError({"Error": {"Code": "InternalError"}, "ResponseMetadata": {"HTTPStatusCode": 500, "RequestId": "req-1"}}, "X"),
            "HTTP 500 InternalError, request id req-1",
        ),
        (ClientError({"Error": {}, "ResponseMetadata": {"HTTPStatusCode": 503}}, "X"), "HTTP 503 with no error code"),
        (ClientError({"Error": {"Code": "InternalError"}}, "X"), "HTTP ? InternalError"),
        (
            ConnectionClosedError(endpoint_url="https://ec2.eu-south-2.amazonaws.com/"),
            "the connection closed without an answer (ConnectionClosedError)",
        ),
        (ValueError("odd"), "ValueError: odd"),
    ],
    ids=["5xx-with-request-id", "no-code", "no-metadata", "closed", "other"],
)
def test_an_unclear_answer_is_described_exactly(err, said):
    """What the operator reads after an unclear purchase: the HTTP status, EC2's code and the request id AWS
    Support asks for (ResponseMetadata.RequestId), or what the connection did."""
    assert purchase.describe_failure(err) == said


def test_a_clear_purchase_carries_its_purchase_id(offline_aws):
    ec2, stubber = stubbed_ec2()
    stubber.add_response("purchase_capacity_block", {"CapacityReservation": {"CapacityReservationId": NEW_CR}})
    outcome = purchase.buy_block(ec2, ec2, OFFER, "pid-7")
    assert (outcome.status, outcome.purchase_id) == ("bought", "pid-7")


def test_a_page_that_omits_its_list_is_read_as_empty(offline_aws):
    """EC2 output members are all optional (botocore EC2 model: no required output members), and a paged answer may
    carry only a NextToken: a page without CapacityReservations / CapacityBlockExtensions is an empty page, not a
    crash that would hide an unclear purchase behind a traceback."""
    ec2, stubber = stubbed_ec2()
    filters = [{"Name": "instance-type", "Values": ["p5en.48xlarge"]}, {"Name": "availability-zone", "Values": ["eu-south-2a"]}]
    stubber.add_response("describe_capacity_reservations", {"NextToken": "t1"}, {"Filters": filters})
    stubber.add_response("describe_capacity_reservations", {}, {"Filters": filters, "NextToken": "t1"})
    assert purchase.find_tagged(ec2, instance_type="p5en.48xlarge", availability_zone="eu-south-2a", purchase_id="pid-1") == []
    stubber.add_response("describe_capacity_reservations", {"NextToken": "t1"}, LOOKUP)
    stubber.add_response("describe_capacity_reservations", {}, LOOKUP | {"NextToken": "t1"})
    assert purchase.find_block(ec2, OFFER, "pid-1") == []
    query = {"CapacityReservationIds": [CR], "Filters": [{"Name": "capacity-block-extension-offering-id", "Values": ["cbeo-1"]}]}
    stubber.add_response("describe_capacity_block_extension_history", {"NextToken": "t1"}, query)
    stubber.add_response("describe_capacity_block_extension_history", {}, query | {"NextToken": "t1"})
    assert purchase.find_extension(ec2, _extension_offer(), CR) == []
    stubber.assert_no_pending_responses()


def test_an_extension_without_a_status_is_shown_as_unknown(offline_aws):
    """CapacityBlockExtensionStatus is optional in the botocore EC2 model; a history entry without it is still a
    sighting (the operator must not buy again), shown with the state '?' rather than None or a made-up status."""
    ec2, stubber = stubbed_ec2()
    query = {"CapacityReservationIds": [CR], "Filters": [{"Name": "capacity-block-extension-offering-id", "Values": ["cbeo-1"]}]}
    stubber.add_response("describe_capacity_block_extension_history", {"CapacityBlockExtensions": [{"CapacityReservationId": CR}]}, query)
    (found,) = purchase.find_extension(ec2, _extension_offer(), CR)
    assert (found.reservation_id, found.state) == (CR, "?")


def test_a_client_error_without_an_http_status_is_unclear():
    """A ClientError whose response carries no ResponseMetadata says nothing about whether EC2 did it (only a 4xx
    is a refusal: EC2 errors overview), so the purchase is looked up, never reported as "nothing bought"."""
    assert purchase.is_unclear(ClientError({"Error": {"Code": "InternalError"}}, "PurchaseCapacityBlock")) is True


def test_a_dry_run_that_returns_a_result_stops_with_the_fix():
    """DryRun=true must answer DryRunOperation ("Request would have succeeded", EC2 API common parameters:
    https://docs.aws.amazon.com/AWSEC2/latest/APIReference/CommonParameters.html); an endpoint that returns a result
    instead may have bought the block, so nothing else is sent and the operator is told exactly what to check."""
    with pytest.raises(KitError) as caught:
        purchase.dry_run(lambda: {"CapacityReservation": {}}, what="the purchase")
    assert str(caught.value) == (
        "the dry run of the purchase returned a result instead of DryRunOperation, so this endpoint may not honour DryRun; "
        "nothing else was sent. Fix: check `aws ec2 describe-capacity-reservations` for an unexpected new reservation and "
        "your AWS_ENDPOINT_URL* settings"
    )
