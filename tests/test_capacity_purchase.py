"""The purchase custom resource (pdkit/functions/capacity_purchase.py): one real PurchaseCapacityBlock on
every Create path, none on Update or Delete, and an answer to CloudFormation every time.

Why it matters: PurchaseCapacityBlock takes no idempotency token (botocore EC2 model: no ClientToken
member) and the block cannot be cancelled, while CloudFormation custom resources are invoked
asynchronously and Lambda retries a failed asynchronous invocation twice by default
(https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html). Calls go through
botocore's Stubber, which checks every parameter and reply against the EC2 service model, or through the
loopback EC2 stand-in (tests/fixtures/ec2_standin.py) where a real timeout is needed.

The CloudFormation requests follow the documented request objects (CloudFormation User Guide, crpg-ref-requests and
crpg-ref-requesttypes-create/-update/-delete: RequestType, RequestId, ResponseURL, ResourceType, LogicalResourceId,
StackId, ServiceToken, ResourceProperties, PhysicalResourceId, OldResourceProperties); the ResponseURL host is the one
CloudFormation-generated requests carry (https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com,
recorded in kickstarter/serverless-approle-manager test/data/event.js), here for eu-south-2.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from pdkit.functions import capacity_purchase
from pdkit.model.plan import purchase_id
from pdkit.ops import client_config, purchase
from tests.fixtures.ec2_standin import HANG, error, items, ok, running
from tests.fixtures.purchase_fixtures import held_block

pytest_plugins = ["tests.fixtures.cmd_fixtures"]

START = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
END = START + timedelta(hours=48)
CR = "cr-0fedcba9876543210"
STACK = "arn:aws:cloudformation:eu-south-2:123456789012:stack/glm51-2p2d-capacity/0a1b2c3d-0000-0000-0000-000000000000"
FUNCTION = "arn:aws:lambda:eu-south-2:123456789012:function:glm51-2p2d-purchase-PurchaseFunction"
LOGICAL_ID = "PurchaseBlock51AE2C65"
PROPS = {
    "ServiceToken": FUNCTION,
    "OfferingId": "cb-0123456789abcdef0",
    "UpfrontFeeUsd": "98765.43",
    "InstanceType": "p5en.48xlarge",
    "InstanceCount": "4",
    "AvailabilityZone": "eu-south-2a",
    "DurationHours": "48",
    "EarliestStart": "",
    "LatestEnd": "",
}


# What the purchase stack synthesizes into the function's environment (stacks/capacity_purchase.py).
PID = purchase_id("glm51-2p2d", "eu-south-2", PROPS["OfferingId"])
ENV = {
    capacity_purchase.ENV_PURCHASE: json.dumps({k: v for k, v in PROPS.items() if k != "ServiceToken"}),
    capacity_purchase.ENV_PURCHASE_ID: PID,
    capacity_purchase.ENV_STACK_ID: STACK,
    capacity_purchase.ENV_RESOURCE_ID: LOGICAL_ID,
}


class Context:
    """The Lambda context attributes the handler reads (Lambda developer guide, python-context): the invoked ARN and
    the remaining time, 10 minutes (the function's timeout) unless told."""

    def __init__(self, remaining_ms: int = 600_000, arn: str = FUNCTION) -> None:
        self.invoked_function_arn = arn
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def event(kind: str = "Create", **extra: Any) -> dict[str, Any]:
    return {
        "RequestType": kind,
        "ServiceToken": FUNCTION,
        "RequestId": "11111111-2222-3333-4444-555555555555",
        "ResponseURL": "https://cloudformation-custom-resource-response-eusouth2.s3.amazonaws.com/x",
        "StackId": STACK,
        "LogicalResourceId": LOGICAL_ID,
        "ResourceType": "Custom::CapacityBlockPurchase",
        "ResourceProperties": dict(PROPS),
        **extra,
    }


def handle(ev: Any, context: Any = None, **kwargs: Any) -> None:
    """The handler with the synthesized environment and a real-looking context; no real waiting."""
    kwargs.setdefault("env", ENV)
    kwargs.setdefault("sleep", lambda _s: None)
    capacity_purchase.handler(ev, context or Context(), **kwargs)


class Answers(list[dict[str, Any]]):
    def __call__(self, event: dict[str, Any], **answer: Any) -> None:
        self.append(answer)


class Counted:
    """The purchase client, counting real (DryRun=False) PurchaseCapacityBlock requests."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.real = 0

    def purchase_capacity_block(self, **params: Any) -> Any:
        if not params.get("DryRun"):
            self.real += 1
        return self.client.purchase_capacity_block(**params)


def client(service: str = "ec2") -> Any:
    return boto3.client(service, region_name="eu-south-2")


@pytest.fixture(autouse=True)
def _offline(offline_aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Test credentials only (tests/fixtures/cmd_fixtures.py): nothing can reach a real account; no real waiting."""
    monkeypatch.setattr(capacity_purchase, "VISIBLE_EVERY", 0.0)


OFFERING = {
    "CapacityBlockOfferingId": PROPS["OfferingId"],
    "InstanceType": "p5en.48xlarge",
    "AvailabilityZone": "eu-south-2a",
    "InstanceCount": 4,
    "StartDate": START,
    "EndDate": END,
    "CapacityBlockDurationHours": 48,
    "UpfrontFee": "98765.43",
    "CurrencyCode": "USD",
}
OFFERING_QUERY = {"InstanceType": "p5en.48xlarge", "InstanceCount": 4, "CapacityDurationHours": 48}
# DescribeCapacityReservations' documented filters (API reference: no tag:<key> filter); the tag is matched locally.
TAG_LOOKUP = {
    "Filters": [
        {"Name": "instance-type", "Values": ["p5en.48xlarge"]},
        {"Name": "availability-zone", "Values": ["eu-south-2a"]},
    ]
}

BY_ID = {"CapacityReservationIds": [CR]}
# pdkit.ops.purchase.find_block after an unclear answer: the same filters.
AFTER_UNCLEAR = TAG_LOOKUP


def reservation(cr: str = CR, *, tagged: bool = True, state: str = "payment-pending") -> dict[str, Any]:
    """A block not started yet as EC2 reports it: AWS ParallelCluster's recorded Capacity Block (TotalInstanceCount 0,
    the count in its aws:ec2capacityreservation:incrementalRequestedQuantity tag; tests/fixtures/ec2/README.md),
    with this purchase's tag when `tagged`."""
    return held_block(
        cr,
        instance_type="p5en.48xlarge",
        availability_zone="eu-south-2a",
        start=START,
        end=END,
        tags={purchase.PURCHASE_TAG: PID} if tagged else {},
        state=state,
    )


def request(*, dry: bool) -> dict[str, Any]:
    """The PurchaseCapacityBlock parameters the handler must send: the offering, Linux/UNIX, and its purchase tag."""
    return {
        "CapacityBlockOfferingId": PROPS["OfferingId"],
        "InstancePlatform": "Linux/UNIX",
        "TagSpecifications": [
            {
                "ResourceType": "capacity-reservation",
                "Tags": [{"Key": purchase.PURCHASE_TAG, "Value": PID}],
            }
        ],
        "DryRun": dry,
    }


def queue_until_dry_run(ec2: Stubber, buyer: Stubber, *, offering: dict[str, Any] = OFFERING) -> None:
    ec2.add_response("describe_capacity_reservations", {"CapacityReservations": []}, TAG_LOOKUP)
    ec2.add_response(
        "describe_capacity_block_offerings",
        {"CapacityBlockOfferings": [offering]},
        OFFERING_QUERY,
    )
    buyer.add_client_error(
        "purchase_capacity_block", "DryRunOperation", "Request would have succeeded", 412, expected_params=request(dry=True)
    )


def run(ev: dict[str, Any], ec2_client: Any, buyer_client: Any, cloudformation: Any = None) -> tuple[Answers, Counted]:
    answers, counted = Answers(), Counted(buyer_client)
    handle(ev, ec2=ec2_client, purchase_ec2=counted, cloudformation=cloudformation, respond=answers)
    return answers, counted


def test_create_buys_once_and_returns_the_id_and_dates():
    """Success: tag lookup, offering found again, dry run, one real purchase; the reply's CapacityReservation
    (PurchaseCapacityBlock response, EC2 API reference) becomes the physical id and the GetAtt data."""
    ec2, buyer = client(), client()
    with Stubber(ec2) as s_ec2, Stubber(buyer) as s_buy:
        queue_until_dry_run(s_ec2, s_buy)
        s_buy.add_response(
            "purchase_capacity_block",
            {"CapacityReservation": reservation(tagged=False)},
            request(dry=False),
        )
        # Not visible at first (EC2 eventual consistency), then visible: the guard that runs next can see it.
        s_ec2.add_client_error(
            "describe_capacity_reservations", "InvalidCapacityReservationId.NotFound", "no such id", 400, expected_params=BY_ID
        )
        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": [reservation()]}, BY_ID)
        answers, counted = run(event(), ec2, buyer)
        s_ec2.assert_no_pending_responses()
        s_buy.assert_no_pending_responses()
    assert counted.real == 1
    assert answers[0]["success"] is True
    assert answers[0]["physical_id"] == CR
    assert answers[0]["data"] == {"ReservationId": CR, "StartDate": START.isoformat(), "EndDate": END.isoformat()}


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("UpfrontFee", "99999.99", "upfront fee is now USD 99,999.99, the profile confirmed USD 98,765.43"),
        ("AvailabilityZone", "eu-south-2b", "availability zone is eu-south-2b, the profile says eu-south-2a"),
        ("InstanceType", "p5.48xlarge", "instance type is p5.48xlarge"),
    ],
)
def test_create_refuses_an_offering_that_differs_from_the_profile(field, value, words):
    """Refusal: the offering's fee, AZ or type no longer equal to what the operator confirmed; no purchase, not even a dry run."""
    ec2, buyer = client(), client()
    with Stubber(ec2) as s_ec2, Stubber(buyer):
        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": []}, TAG_LOOKUP)
        s_ec2.add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": [{**OFFERING, field: value}]}, OFFERING_QUERY)
        answers, counted = run(event(), ec2, buyer)
        s_ec2.assert_no_pending_responses()
    assert counted.real == 0
    assert answers[0]["success"] is False
    assert words in answers[0]["reason"]
    assert "nothing was bought" in answers[0]["reason"]


def test_create_answered_503_is_sent_once_and_found_by_its_tag():
    """5xx: EC2 may have bought it (errors-overview: 5xx is a server error), so no resend; the lookup by
    the purchase tag finds the block, and CloudFormation gets SUCCESS with it."""
    ec2, buyer = client(), client()
    with Stubber(ec2) as s_ec2, Stubber(buyer) as s_buy:
        queue_until_dry_run(s_ec2, s_buy)
        s_buy.add_client_error("purchase_capacity_block", "Unavailable", "overloaded", 503, expected_params=request(dry=False))
        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": [reservation()]}, AFTER_UNCLEAR)
        answers, counted = run(event(), ec2, buyer)
        s_ec2.assert_no_pending_responses()
    assert counted.real == 1
    assert answers[0]["success"] is True
    assert answers[0]["physical_id"] == CR
    assert "HTTP 503 Unavailable" in answers[0]["reason"]


def test_create_answered_503_with_nothing_found_fails_without_a_resend():
    """5xx and no tagged block yet: FAILED, naming the tag to look for; exactly one real request."""
    ec2, buyer = client(), client()
    with Stubber(ec2) as s_ec2, Stubber(buyer) as s_buy:
        queue_until_dry_run(s_ec2, s_buy)
        s_buy.add_client_error("purchase_capacity_block", "InternalError", "boom", 500, expected_params=request(dry=False))
        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": []}, AFTER_UNCLEAR)
        answers, counted = run(event(), ec2, buyer)
    assert counted.real == 1
    assert answers[0]["success"] is False
    assert f"Key=='{purchase.PURCHASE_TAG}' && Value=='{PID}'" in answers[0]["reason"]
    assert "it was not sent again" in answers[0]["reason"]


def test_a_second_delivery_of_the_same_create_adopts_instead_of_buying():
    """Lambda may deliver the same asynchronous event again; the second delivery finds the block by the tag
    derived from the deployment, region and offering and buys nothing (one real purchase over both deliveries)."""
    ec2, buyer = client(), client()
    with Stubber(ec2) as s_ec2, Stubber(buyer) as s_buy:
        queue_until_dry_run(s_ec2, s_buy)
        s_buy.add_response("purchase_capacity_block", {"CapacityReservation": reservation(tagged=False)}, request(dry=False))
        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": [reservation()]}, BY_ID)
        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": [reservation()]}, TAG_LOOKUP)
        first, counted_first = run(event(), ec2, buyer)
        second, counted_second = run(event(), ec2, buyer)
        s_ec2.assert_no_pending_responses()
    assert counted_first.real + counted_second.real == 1
    assert second[0]["success"] is True
    assert second[0]["physical_id"] == first[0]["physical_id"] == CR
    assert "not bought again" in second[0]["reason"]


def test_create_that_never_answers_is_sent_once_and_found_by_its_tag(monkeypatch):
    """Timeout, through real botocore on the handler's own clients: the production PURCHASE config
    (attempts unchanged, only the read timeout shortened) sends one real request; botocore's standard mode
    would otherwise retry a read timeout (https://docs.aws.amazon.com/boto3/latest/guide/retries.html)."""
    monkeypatch.setattr(client_config, "PURCHASE", dataclasses.replace(client_config.PURCHASE, read=0.5))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-south-2")

    def offerings(_p: dict[str, str]) -> tuple[int, str]:
        row = {
            "capacityBlockOfferingId": PROPS["OfferingId"],
            "instanceType": "p5en.48xlarge",
            "availabilityZone": "eu-south-2a",
            "instanceCount": 4,
            "startDate": START,
            "endDate": END,
            "capacityBlockDurationHours": 48,
            "upfrontFee": "98765.43",
            "currencyCode": "USD",
        }
        return ok("DescribeCapacityBlockOfferings", items("capacityBlockOfferingSet", [row]))

    def lookup(_p: dict[str, str]) -> tuple[int, str]:
        bought = stand_in.sent("PurchaseCapacityBlock", dry=False)
        rows = []
        if bought:
            tag = {"key": bought[0]["TagSpecification.1.Tag.1.Key"], "value": bought[0]["TagSpecification.1.Tag.1.Value"]}
            rows.append(
                {
                    "capacityReservationId": CR,
                    "instanceType": "p5en.48xlarge",
                    "availabilityZone": "eu-south-2a",
                    "totalInstanceCount": 4,
                    "state": "payment-pending",
                    "startDate": START,
                    "endDate": END,
                    "reservationType": "capacity-block",
                    "tagSet": [tag],
                }
            )
        return ok("DescribeCapacityReservations", items("capacityReservationSet", rows))

    def buy(params: dict[str, str]) -> Any:
        return error(412, "DryRunOperation", "Request would have succeeded") if params.get("DryRun") == "true" else HANG

    script = {"DescribeCapacityBlockOfferings": offerings, "DescribeCapacityReservations": lookup, "PurchaseCapacityBlock": buy}
    answers = Answers()
    with running(script) as stand_in:
        monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", stand_in.url)
        handle(event(), respond=answers)
    assert len(stand_in.sent("PurchaseCapacityBlock", dry=False)) == 1
    assert answers[0]["success"] is True
    assert answers[0]["physical_id"] == CR
    assert "ReadTimeoutError" in answers[0]["reason"]


def _stack(status: str) -> Any:
    cloudformation = client("cloudformation")
    stub = Stubber(cloudformation)
    stub.add_response(
        "describe_stacks",
        {"Stacks": [{"StackName": "glm51-2p2d-capacity", "CreationTime": START, "StackStatus": status}]},
        {"StackName": STACK},
    )
    stub.activate()
    return cloudformation


def test_update_with_another_offering_is_refused_with_the_fix():
    """Update never buys: a changed offering during a normal deploy is FAILED with the way forward."""
    ev = event("Update", PhysicalResourceId=CR, OldResourceProperties={**PROPS, "OfferingId": "cb-0aaaaaaaaaaaaaaaa"})
    ec2, buyer = client(), client()
    with Stubber(ec2), Stubber(buyer):
        answers, counted = run(ev, ec2, buyer, _stack("UPDATE_IN_PROGRESS"))
    assert counted.real == 0
    assert answers[0]["success"] is False
    assert answers[0]["physical_id"] == CR
    assert "never buys twice" in answers[0]["reason"]
    assert "pdkit capacity extend" in answers[0]["reason"]


def test_update_during_rollback_restores_the_old_properties_without_buying():
    """UPDATE_ROLLBACK_IN_PROGRESS sends the previous properties as an Update (CloudFormation custom resource
    Update request reference); refusing it would strand the stack in UPDATE_ROLLBACK_FAILED."""
    ev = event("Update", PhysicalResourceId=CR, OldResourceProperties={**PROPS, "OfferingId": "cb-0bbbbbbbbbbbbbbbb"})
    ec2, buyer = client(), client()
    with Stubber(ec2) as s_ec2, Stubber(buyer):
        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": [reservation()]}, {"CapacityReservationIds": [CR]})
        answers, counted = run(ev, ec2, buyer, _stack("UPDATE_ROLLBACK_IN_PROGRESS"))
    assert counted.real == 0
    assert answers[0]["success"] is True
    assert answers[0]["physical_id"] == CR
    assert answers[0]["data"]["ReservationId"] == CR


def test_delete_keeps_the_block_and_says_where_it_is():
    """Delete (stack deletion, or the rollback of a Create that bought) never cancels: blocks cannot be
    cancelled (EC2 user guide, Capacity Blocks pricing and billing). It calls no AWS API at all."""

    class NoAws:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"Delete called {name}")

    answers = Answers()
    handle(event("Delete", PhysicalResourceId=CR), ec2=NoAws(), purchase_ec2=NoAws(), respond=answers)
    assert answers[0]["success"] is True
    assert answers[0]["physical_id"] == CR
    assert f"Capacity Block {CR} is kept" in answers[0]["reason"]
    assert "cannot be cancelled" in answers[0]["reason"]


def test_update_answers_with_the_id_even_when_the_reservation_cannot_be_read():
    """Consumers read ReservationId with Fn::GetAtt, so every SUCCESS carries it (custom resource response Data,
    CloudFormation crpg-ref-responses); a failed DescribeCapacityReservations must not fail a rollback that buys nothing."""
    ev = event("Update", PhysicalResourceId=CR, OldResourceProperties={**PROPS, "OfferingId": "cb-0bbbbbbbbbbbbbbbb"})
    ec2, buyer = client(), client()
    with Stubber(ec2) as s_ec2, Stubber(buyer):
        s_ec2.add_client_error(
            "describe_capacity_reservations", "RequestLimitExceeded", "slow down", 503, expected_params={"CapacityReservationIds": [CR]}
        )
        answers, counted = run(ev, ec2, buyer, _stack("UPDATE_ROLLBACK_IN_PROGRESS"))
    assert counted.real == 0
    assert answers[0]["success"] is True
    assert answers[0]["data"]["ReservationId"] == CR


def test_delete_after_an_unconfirmed_create_points_at_the_tag():
    """A Create that failed after an unclear answer may still have bought; its Delete names the tag to look for."""
    answers = Answers()
    ev = event("Delete", PhysicalResourceId=f"purchase-{PID}")
    handle(ev, respond=answers)
    assert answers[0]["success"] is True
    assert f"Key=='{purchase.PURCHASE_TAG}' && Value=='{PID}'" in answers[0]["reason"]
