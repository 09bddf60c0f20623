"""The purchase handler against what CloudFormation, Lambda, IAM and a forger really do (issue 25, items 3, 4 and 7).

- A failed first create: CloudFormation deletes the stack, and the retry creates it again with a new StackId (FACTS,
  Capacity Blocks); the block the first create bought is still billing. The retry must adopt it, not buy again.
- A direct `lambda invoke`: any caller with lambda:InvokeFunction can send any event with any ResponseURL. The
  handler acts only on what its stack synthesized into its environment and answers only CloudFormation's own
  response bucket (CloudFormation User Guide, cfn-vpce-bucketnames: cloudformation-custom-resource-response-<region
  without dashes>).
- Time: a handler that never answers leaves the stack waiting for ServiceTimeout; the Lambda context says how much
  time is left (get_remaining_time_in_millis, Lambda developer guide, python-context).
- IAM propagation: EC2 answers a DryRun with UnauthorizedOperation when the caller may not act (API_PurchaseCapacityBlock,
  DryRun), which a role created seconds earlier briefly is (IAM User Guide, troubleshoot_general eventual consistency;
  the Terraform AWS provider waits 2 minutes, hashicorp/terraform-provider-aws internal/service/iam/wait.go). EC2's
  4xx answers are client errors: nothing was done (EC2 API, errors-overview).

EC2 is botocore's Stubber (each call and reply checked against the EC2 model); reservations are AWS ParallelCluster's
recorded Capacity Block (tests/fixtures/purchase_fixtures.py); requests as in tests/test_capacity_purchase.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.stub import Stubber

from pdkit.functions import capacity_purchase
from pdkit.model import plan as plan_mod
from pdkit.ops import purchase
from tests.fixtures.purchase_fixtures import held_block
from tests.test_capacity_purchase import (
    CR,
    END,
    ENV,
    OFFERING,
    OFFERING_QUERY,
    PID,
    STACK,
    START,
    TAG_LOOKUP,
    Answers,
    Context,
    Counted,
    _stack,
    client,
    event,
    handle,
    request,
)

pytest_plugins = ["tests.fixtures.cmd_fixtures"]

# The stack created again after the failed first create: same name, new id.
NEW_STACK = STACK.replace("0a1b2c3d-0000-0000-0000-000000000000", "9f8e7d6c-1111-2222-3333-444444444444")


@pytest.fixture(autouse=True)
def _offline(offline_aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capacity_purchase, "VISIBLE_EVERY", 0.0)


class NoAws:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"called {name}")


def bought_block(state: str = "pending") -> dict[str, Any]:
    return held_block(
        CR,
        instance_type="p5en.48xlarge",
        availability_zone="eu-south-2a",
        start=START,
        end=END,
        tags={purchase.PURCHASE_TAG: PID},
        state=state,
    )


# --- 1. a failed first create, then a retry from a new StackId --------------------------------------------------------


def test_a_create_after_a_rolled_back_first_create_adopts_the_block_and_buys_nothing():
    """First Create buys (the reply's block), a later resource fails, CloudFormation rolls back: Delete keeps the block and
    the stack is deleted. `make deploy` again creates the stack with a new StackId; its Create finds the block by the
    purchase tag (made of deployment, region and offering, not the StackId) and answers with it. The buyer Stubber has
    nothing queued for the retry: a PurchaseCapacityBlock there, even a dry run, would fail the test."""
    ec2, buyer = client(), client()
    with Stubber(ec2) as s_ec2, Stubber(buyer) as s_buy:
        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": []}, TAG_LOOKUP)
        s_ec2.add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": [OFFERING]}, OFFERING_QUERY)
        s_buy.add_client_error(
            "purchase_capacity_block", "DryRunOperation", "Request would have succeeded", 412, expected_params=request(dry=True)
        )
        s_buy.add_response("purchase_capacity_block", {"CapacityReservation": bought_block()}, request(dry=False))
        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": [bought_block()]}, {"CapacityReservationIds": [CR]})
        first, counted = Answers(), Counted(buyer)
        handle(event(), ec2=ec2, purchase_ec2=counted, respond=first)
        assert (first[0]["success"], first[0]["physical_id"], counted.real) == (True, CR, 1)

        rollback = Answers()
        handle(event("Delete", PhysicalResourceId=CR), ec2=NoAws(), purchase_ec2=NoAws(), respond=rollback)
        assert rollback[0]["success"] is True

        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": [bought_block()]}, TAG_LOOKUP)
        retry, again = Answers(), Counted(buyer)
        handle(event(StackId=NEW_STACK), ec2=ec2, purchase_ec2=again, respond=retry, env={**ENV, capacity_purchase.ENV_STACK_ID: NEW_STACK})
        s_ec2.assert_no_pending_responses()
        s_buy.assert_no_pending_responses()
    assert again.real == 0
    assert (retry[0]["success"], retry[0]["physical_id"], retry[0]["data"]["ReservationId"]) == (True, CR, CR)
    assert "adopted, not bought again" in retry[0]["reason"]


def test_the_purchase_tag_is_made_of_what_survives_a_stack_recreate(bought):
    """The plan's purchase id: deployment, region and offering; another deployment or offering is another purchase."""
    p = bought.plan.purchase
    assert p.purchase_id == plan_mod.purchase_id(bought.plan.name, bought.plan.region, p.offering_id)
    assert len({p.purchase_id, plan_mod.purchase_id("other", bought.plan.region, p.offering_id)}) == 2
    assert len({p.purchase_id, plan_mod.purchase_id(bought.plan.name, bought.plan.region, "cb-0ffffffffffffffff")}) == 2


# --- 4. requests that are not CloudFormation's for this resource ------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"StackId": NEW_STACK}, "is not this function's stack"),
        ({"ServiceToken": "arn:aws:lambda:eu-south-2:123456789012:function:other"}, "is not this function"),
        ({"ResponseURL": "https://attacker.example.com/collect"}, "is not CloudFormation's response bucket"),
        ({"ResponseURL": "http://cloudformation-custom-resource-response-eusouth2.s3.amazonaws.com/x"}, "response bucket"),
        ({"ResponseURL": "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/x"}, "response bucket"),
        ({"ResponseURL": "https://cloudformation-custom-resource-response-eusouth2.s3.amazonaws.com.attacker.example/x"}, "bucket"),
        ({"RequestType": "Purchase"}, "is not a CloudFormation custom resource request"),
        ({"RequestId": ""}, "is not a CloudFormation custom resource request"),
    ],
)
@pytest.mark.parametrize("kind", ["Create", "Update", "Delete"])
def test_a_request_that_is_not_for_this_resource_gets_no_answer_and_buys_nothing(kind, change, why, capsys):
    """No AWS call, no PUT to the ResponseURL: the reason goes to the function's log only."""
    answers = Answers()
    handle(event(kind, PhysicalResourceId=CR, **change), ec2=NoAws(), purchase_ec2=NoAws(), cloudformation=NoAws(), respond=answers)
    assert answers == []
    assert why in capsys.readouterr().out


def test_a_create_for_another_resource_gets_no_answer_and_buys_nothing(capsys):
    answers = Answers()
    handle(event("Create", LogicalResourceId="SomethingElse"), ec2=NoAws(), purchase_ec2=NoAws(), cloudformation=NoAws(), respond=answers)
    assert answers == []
    assert "is not this function's resource" in capsys.readouterr().out


def test_a_delete_for_a_renamed_resource_of_its_own_stack_is_answered_and_buys_nothing():
    """After a refactor renames the resource, CloudFormation's cleanup sends Delete for the old logical id (and a rollback
    one for the new): unanswered, the stack waits for the ServiceTimeout and ends DELETE_FAILED (red-team finding).
    Only a Create buys, so only a Create must name this resource."""
    answers = Answers()
    handle(event("Delete", LogicalResourceId="OldPurchaseBlock", PhysicalResourceId=CR), ec2=NoAws(), purchase_ec2=NoAws(), respond=answers)
    assert [a["success"] for a in answers] == [True]
    assert answers[0]["physical_id"] == CR


def test_a_direct_invoke_without_the_lambda_context_is_ignored():
    """A handler invoked outside Lambda (no invoked_function_arn) cannot tell its own ServiceToken: it does nothing."""
    answers = Answers()
    handle(event(), context=object(), ec2=NoAws(), purchase_ec2=NoAws(), respond=answers)
    assert answers == []


@pytest.mark.parametrize("event_value", [None, "Create", ["Create"]])
def test_an_event_that_is_not_a_request_is_ignored(event_value):
    answers = Answers()
    handle(event_value, ec2=NoAws(), purchase_ec2=NoAws(), respond=answers)
    assert answers == []


@pytest.mark.parametrize(
    "change",
    [
        {"OfferingId": "cb-0ffffffffffffffff"},
        {"UpfrontFeeUsd": "1.00"},
        {"InstanceType": "p5.48xlarge"},
        {"InstanceCount": "16"},
        {"AvailabilityZone": "eu-south-2b"},
    ],
)
def test_a_create_with_other_properties_than_synthesized_buys_nothing(change):
    """CloudFormation's own identifiers, other purchase properties (a direct invoke copying a real request): FAILED
    with the reason, before any EC2 call; the synthesized offering is never swapped for the request's."""
    ev = event()
    ev["ResourceProperties"] = {**ev["ResourceProperties"], **change}
    answers = Answers()
    handle(ev, ec2=NoAws(), purchase_ec2=NoAws(), respond=answers)
    assert answers[0]["success"] is False
    assert "differ from what this stack synthesized" in answers[0]["reason"]
    assert "nothing was bought" in answers[0]["reason"]


def test_the_response_bucket_of_the_region_is_accepted_in_each_s3_host_form():
    """Virtual-hosted S3 hosts, global and regional (S3 User Guide, VirtualHosting): all CloudFormation's bucket."""
    own = capacity_purchase.Own.from_env(ENV)
    for host in ("s3.amazonaws.com", "s3.eu-south-2.amazonaws.com", "s3-eu-south-2.amazonaws.com"):
        ev = event(ResponseURL=f"https://cloudformation-custom-resource-response-eusouth2.{host}/arn%3Aaws?X-Amz-Signature=1")
        assert capacity_purchase.foreign(ev, Context(), own) is None, host


# --- 5. an answer on every path, before the time runs out -------------------------------------------------------------


@pytest.mark.parametrize(
    "ev",
    [
        event(ResourceProperties=None),
        event(ResourceProperties={}),
        event(ResourceProperties="OfferingId=cb-1"),
        event("Delete"),  # no PhysicalResourceId
        event("Delete", ResourceProperties=None),
        event("Update", ResourceProperties=None, PhysicalResourceId=CR, OldResourceProperties=None),
    ],
)
def test_odd_or_missing_properties_are_answered(ev):
    """Exactly one answer, with a physical id, and no purchase; CloudFormation never waits for the ServiceTimeout."""
    answers = Answers()
    handle(ev, ec2=NoAws(), purchase_ec2=NoAws(), cloudformation=_stack("UPDATE_IN_PROGRESS"), respond=answers)
    assert len(answers) == 1
    assert answers[0]["physical_id"]


def test_an_update_without_a_physical_id_answers_with_the_placeholder():
    """PhysicalResourceId missing on an Update (a direct invoke, or a malformed request): SUCCESS, nothing read or bought."""
    answers = Answers()
    handle(event("Update", OldResourceProperties=event()["ResourceProperties"]), ec2=NoAws(), purchase_ec2=NoAws(), respond=answers)
    assert answers[0]["success"] is True
    assert answers[0]["physical_id"] == f"purchase-{PID}"


def test_no_purchase_is_sent_without_the_time_its_answer_needs():
    """With 150 s left after the dry run, less than the purchase's worst case (its 70 s attempt and the 51 s lookup) plus
    the answer's reserve: FAILED, nothing sent but the dry run. A purchase cut off by the timeout would leave an unclear
    answer no one looks up."""
    ec2, buyer = client(), client()
    with Stubber(ec2) as s_ec2, Stubber(buyer) as s_buy:
        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": []}, TAG_LOOKUP)
        s_ec2.add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": [OFFERING]}, OFFERING_QUERY)
        s_buy.add_client_error(
            "purchase_capacity_block", "DryRunOperation", "Request would have succeeded", 412, expected_params=request(dry=True)
        )
        answers, counted = Answers(), Counted(buyer)
        handle(event(), Context(remaining_ms=150_000), ec2=ec2, purchase_ec2=counted, respond=answers)
        s_buy.assert_no_pending_responses()
    assert counted.real == 0
    assert answers[0]["success"] is False
    assert "nothing was bought" in answers[0]["reason"]


class Clock:
    """A monotonic clock that sleeping moves forward."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_wait_for_a_new_block_stops_while_the_answer_still_fits(monkeypatch):
    """EC2 keeps answering NotFound (eventual consistency): await_visible gives up once the remaining time, less the
    answer's reserve, would not cover one more Describe (READS.worst_case), instead of running into the timeout."""
    monkeypatch.setattr(capacity_purchase, "VISIBLE_EVERY", 5.0)
    clock = Clock()
    deadline = capacity_purchase.Deadline(Context(remaining_ms=120_000), clock=clock)

    class NotYet:
        calls = 0

        def describe_capacity_reservations(self, **_: Any) -> Any:
            self.calls += 1
            raise type("E", (Exception,), {"response": {"Error": {"Code": "InvalidCapacityReservationId.NotFound"}}})()

    ec2 = NotYet()
    assert capacity_purchase.await_visible(ec2, CR, sleep=clock.sleep, deadline=deadline) is False
    assert deadline.left() >= capacity_purchase.READS.worst_case - 5.0
    assert 0 < ec2.calls < capacity_purchase.VISIBLE_TRIES


# --- 6. the dry run on a role seconds old -----------------------------------------------------------------------------


def _until_offering(s_ec2: Stubber) -> None:
    s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": []}, TAG_LOOKUP)
    s_ec2.add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": [OFFERING]}, OFFERING_QUERY)


def test_a_dry_run_refused_while_the_role_propagates_is_tried_again_then_buys_once():
    """UnauthorizedOperation twice (IAM propagation), then DryRunOperation: one real purchase, after waits of 5 and 10 s."""
    ec2, buyer = client(), client()
    slept: list[float] = []
    with Stubber(ec2) as s_ec2, Stubber(buyer) as s_buy:
        _until_offering(s_ec2)
        for _ in range(2):
            s_buy.add_client_error(
                "purchase_capacity_block", "UnauthorizedOperation", "not authorized", 403, expected_params=request(dry=True)
            )
        s_buy.add_client_error(
            "purchase_capacity_block", "DryRunOperation", "Request would have succeeded", 412, expected_params=request(dry=True)
        )
        s_buy.add_response("purchase_capacity_block", {"CapacityReservation": bought_block()}, request(dry=False))
        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": [bought_block()]}, {"CapacityReservationIds": [CR]})
        answers, counted = Answers(), Counted(buyer)
        handle(event(), ec2=ec2, purchase_ec2=counted, respond=answers, sleep=slept.append)
        s_buy.assert_no_pending_responses()
    assert slept == [5.0, 10.0]
    assert counted.real == 1
    assert answers[0]["success"] is True


def test_a_dry_run_refused_every_time_gives_up_after_the_bounded_waits():
    """Always UnauthorizedOperation (a role that really lacks the permission): seven tries, 2 minutes of waits, FAILED
    with EC2's code, nothing bought."""
    ec2, buyer = client(), client()
    slept: list[float] = []
    with Stubber(ec2) as s_ec2, Stubber(buyer) as s_buy:
        _until_offering(s_ec2)
        for _ in range(len(capacity_purchase.DRY_RUN_WAITS) + 1):
            s_buy.add_client_error(
                "purchase_capacity_block", "UnauthorizedOperation", "not authorized", 403, expected_params=request(dry=True)
            )
        answers, counted = Answers(), Counted(buyer)
        handle(event(), ec2=ec2, purchase_ec2=counted, respond=answers, sleep=slept.append)
        s_buy.assert_no_pending_responses()
    assert slept == list(capacity_purchase.DRY_RUN_WAITS)
    assert sum(slept) == 120.0
    assert counted.real == 0
    assert answers[0]["success"] is False
    assert "UnauthorizedOperation" in answers[0]["reason"]


def test_the_purchase_itself_is_never_tried_again():
    """The dry run passed, the real purchase is refused (a 4xx: EC2 did nothing): no second purchase, FAILED."""
    ec2, buyer = client(), client()
    slept: list[float] = []
    with Stubber(ec2) as s_ec2, Stubber(buyer) as s_buy:
        _until_offering(s_ec2)
        s_buy.add_client_error(
            "purchase_capacity_block", "DryRunOperation", "Request would have succeeded", 412, expected_params=request(dry=True)
        )
        s_buy.add_client_error(
            "purchase_capacity_block", "UnauthorizedOperation", "not authorized", 403, expected_params=request(dry=False)
        )
        answers, counted = Answers(), Counted(buyer)
        handle(event(), ec2=ec2, purchase_ec2=counted, respond=answers, sleep=slept.append)
        s_buy.assert_no_pending_responses()
    assert counted.real == 1
    assert slept == []
    assert answers[0]["success"] is False


# --- red-team findings: a paid block is never answered FAILED, the first read waits out IAM ----------------------------


def _through_the_dry_run(s_ec2: Stubber, s_buy: Stubber) -> None:
    s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": []}, TAG_LOOKUP)
    s_ec2.add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": [OFFERING]}, OFFERING_QUERY)
    s_buy.add_client_error(
        "purchase_capacity_block", "DryRunOperation", "Request would have succeeded", 412, expected_params=request(dry=True)
    )


def test_a_purchase_reply_without_a_reservation_is_answered_with_the_block_its_tag_finds():
    """PurchaseCapacityBlock's reply shape has CapacityReservation optional (botocore ec2 model): a reply without it used
    to raise KeyError into the catch-all, answer FAILED "nothing more was sent", and roll back a paid block."""
    ec2, buyer = client(), client()
    with Stubber(ec2) as s_ec2, Stubber(buyer) as s_buy:
        _through_the_dry_run(s_ec2, s_buy)
        s_buy.add_response("purchase_capacity_block", {}, request(dry=False))
        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": [bought_block()]}, TAG_LOOKUP)
        answers = Answers()
        handle(event(), ec2=ec2, purchase_ec2=buyer, respond=answers)
        s_ec2.assert_no_pending_responses()
    assert (answers[0]["success"], answers[0]["physical_id"]) == (True, CR)
    assert "found by its tag" in answers[0]["reason"]


def test_a_bought_block_no_lookup_names_yet_is_failed_with_the_tag_never_with_nothing_sent():
    ec2, buyer = client(), client()
    with Stubber(ec2) as s_ec2, Stubber(buyer) as s_buy:
        _through_the_dry_run(s_ec2, s_buy)
        s_buy.add_response("purchase_capacity_block", {}, request(dry=False))
        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": []}, TAG_LOOKUP)
        answers = Answers()
        handle(event(), ec2=ec2, purchase_ec2=buyer, respond=answers)
    reason = answers[0]["reason"]
    assert answers[0]["success"] is False
    assert "was sent once" in reason
    assert f"{purchase.PURCHASE_TAG}={PID}" in reason
    assert "adopts it, never buys another" in reason
    assert "no purchase was sent" not in reason


def test_a_lost_success_answer_is_put_again_not_turned_into_a_failure():
    """The PUT of the SUCCESS answer for a bought block timed out: before, the catch-all answered FAILED (rolling the
    stack back and forgetting the block). CloudFormation keeps the first answer it receives, so a second PUT is safe."""
    ec2, buyer = client(), client()
    puts: list[bool] = []

    def flaky(_event: dict[str, Any], **answer: Any) -> None:
        puts.append(answer["success"])
        if len(puts) == 1:
            raise TimeoutError("The read operation timed out")

    with Stubber(ec2) as s_ec2, Stubber(buyer) as s_buy:
        _through_the_dry_run(s_ec2, s_buy)
        s_buy.add_response("purchase_capacity_block", {"CapacityReservation": bought_block()}, request(dry=False))
        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": [bought_block()]}, {"CapacityReservationIds": [CR]})
        handle(event(), ec2=ec2, purchase_ec2=buyer, respond=flaky, sleep=lambda _s: None)
    assert puts == [True, True]


def test_the_first_read_waits_out_iam_propagation_too():
    """The role's first call is DescribeCapacityReservations (the tag lookup), before any dry run: a role seconds old
    answers UnauthorizedOperation there as well. Reads buy nothing, so it is tried again, as the dry run is."""
    ec2, buyer = client(), client()
    waited: list[float] = []
    with Stubber(ec2) as s_ec2, Stubber(buyer) as s_buy:
        s_ec2.add_client_error("describe_capacity_reservations", "UnauthorizedOperation", "not authorized", 403, expected_params=TAG_LOOKUP)
        _through_the_dry_run(s_ec2, s_buy)
        s_buy.add_response("purchase_capacity_block", {"CapacityReservation": bought_block()}, request(dry=False))
        s_ec2.add_response("describe_capacity_reservations", {"CapacityReservations": [bought_block()]}, {"CapacityReservationIds": [CR]})
        answers = Answers()
        handle(event(), ec2=ec2, purchase_ec2=buyer, respond=answers, sleep=waited.append)
        s_ec2.assert_no_pending_responses()
    assert answers[0]["success"] is True
    assert waited[0] == capacity_purchase.DRY_RUN_WAITS[0]
