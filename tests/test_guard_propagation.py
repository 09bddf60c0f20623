"""The reservation guard and a block bought moments ago by the same stack, against botocore's ec2 model (Stubber).

The EC2 API is eventually consistent: right after a create, a Describe of the new id can answer that it does not
exist, and EC2 asks callers to repeat the Describe with an exponential backoff, starting with a couple of seconds
(https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html). For Capacity Reservations that answer is
the error code InvalidCapacityReservationId.NotFound (EC2 API error codes:
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html). The guard waits only for an id that
the stack's purchase resource returned (property ReservationFrom: purchase); a hand-entered id is refused at once.
"""

from __future__ import annotations

import boto3
from botocore.stub import Stubber

from pdkit.functions import reservation_guard
from tests.fixtures import cfn_requests
from tests.fixtures.cmd_support import pending_block

RID = "cr-0123456789abcdef0"
PROPS = {"ReservationId": RID, "InstanceType": "p5en.48xlarge", "InstanceCount": "4", "AvailabilityZone": "eu-south-2a"}
BOUGHT = PROPS | {"ReservationFrom": "purchase"}
# A block before its start as EC2 reports it: TotalInstanceCount 0, the count in its tag (tests/fixtures/ec2/README.md).
BLOCK = pending_block(State="scheduled")
NOT_FOUND = "InvalidCapacityReservationId.NotFound"


class Lambda:
    """The Lambda context object: the time the invocation has left (get_remaining_time_in_millis)."""

    def __init__(self, seconds):
        self.left = seconds * 1000

    def get_remaining_time_in_millis(self):
        return self.left


def _run(props, answers, context=None):
    """One Create: EC2 answers each Describe in turn (a dict: the block; a str: that error code)."""
    ec2 = boto3.client("ec2", region_name="eu-south-2", aws_access_key_id="test", aws_secret_access_key="test")  # noqa: S106
    stub = Stubber(ec2)
    for answer in answers:
        if isinstance(answer, str):
            stub.add_client_error(
                "describe_capacity_reservations", service_error_code=answer, expected_params={"CapacityReservationIds": [RID]}
            )
        else:
            stub.add_response("describe_capacity_reservations", {"CapacityReservations": [answer]}, {"CapacityReservationIds": [RID]})
    slept, sent = [], []

    def sleep(seconds):
        slept.append(seconds)
        if context is not None:
            context.left -= seconds * 1000

    # The CloudFormation User Guide's Create example (tests/fixtures/cfn_requests.py) with the guard's properties.
    event = cfn_requests.request("Create", ResourceProperties=props)
    with stub:
        reservation_guard.handler(event, context, ec2=ec2, respond=lambda e, **kw: sent.append(kw), sleep=sleep)
        stub.assert_no_pending_responses()
    (answer,) = sent
    return answer, slept


def test_a_bought_block_that_shows_up_on_the_third_describe_passes():
    """NotFound, NotFound, found: EC2's documented propagation delay, so the first deploy after a purchase succeeds."""
    answer, slept = _run(BOUGHT, [NOT_FOUND, NOT_FOUND, BLOCK])
    assert answer["success"] is True
    assert slept == [2.0, 4.0], "a growing wait between tries, starting with a couple of seconds"


def test_a_bought_block_that_never_shows_up_is_refused_after_the_bound():
    """Always NotFound: the guard stops after its bounded backoff and refuses with the fix, instead of hanging the stack."""
    answer, slept = _run(BOUGHT, [NOT_FOUND] * (len(reservation_guard.PROPAGATION_WAITS) + 1))
    assert answer["success"] is False
    assert slept == list(reservation_guard.PROPAGATION_WAITS)
    assert answer["reason"] == (
        f"Capacity Block check failed: reservation {RID}, bought by this stack's purchase resource, is still unknown to EC2 "
        "after 60 s (the EC2 API is eventually consistent): deploy again with `make deploy` in a few minutes; nothing is "
        "bought again (the purchase resource never buys on Update)"
    ), "the whole fix, word for word: why (eventual consistency), what to do, and that a redeploy cannot buy twice"


def test_a_hand_entered_unknown_id_is_refused_at_once():
    """Without ReservationFrom the id was typed into the profile: NotFound is a typo or the wrong region, not propagation."""
    answer, slept = _run(PROPS, [NOT_FOUND])
    assert answer["success"] is False
    assert slept == []
    assert "does not exist in this account and region: check capacity.reservation_id" in answer["reason"]


def test_a_malformed_bought_id_is_not_waited_for():
    """InvalidCapacityReservationId.Malformed is about the id's spelling, which no amount of propagation changes: the
    refusal carries EC2's own error and does not tell the operator to wait and deploy again."""
    answer, slept = _run(BOUGHT, ["InvalidCapacityReservationId.Malformed"])
    assert answer["success"] is False
    assert slept == []
    assert answer["reason"] == (
        f"Capacity Block check failed: could not check reservation {RID}: An error occurred (InvalidCapacityReservationId.Malformed) "
        "when calling the DescribeCapacityReservations operation: "
    )


def test_the_waits_stop_before_the_function_times_out():
    """A Lambda that times out never answers and CloudFormation waits an hour; the guard keeps time to answer."""
    context = Lambda(seconds=reservation_guard.ANSWER_RESERVE_SECONDS + 7)
    answer, slept = _run(BOUGHT, [NOT_FOUND] * 3, context=context)
    assert slept == [2.0, 4.0], "the 8 s wait would leave less than the reserve"
    assert answer["success"] is False
    assert "still unknown to EC2 after 6 s" in answer["reason"]


def test_a_context_without_the_lambda_clock_gets_the_whole_backoff():
    """Only the Lambda context object has get_remaining_time_in_millis (Lambda Python context docs:
    https://docs.aws.amazon.com/lambda/latest/dg/python-context.html); a caller passing None or another object (a
    local invocation) gets the full bounded backoff rather than an AttributeError that would refuse a bought block."""
    assert reservation_guard._time_for(30.0, None) is True
    assert reservation_guard._time_for(30.0, object()) is True


def test_the_answer_reserve_is_counted_to_the_millisecond():
    """get_remaining_time_in_millis is in milliseconds (Lambda Python context docs); a wait is taken only when more
    than the wait plus ANSWER_RESERVE_SECONDS is left, so the answer to CloudFormation always has its reserve."""
    context = Lambda(seconds=0)
    reserve_ms = int((8.0 + reservation_guard.ANSWER_RESERVE_SECONDS) * 1000)
    context.left = reserve_ms + 1
    assert reservation_guard._time_for(8.0, context) is True
    context.left = reserve_ms
    assert reservation_guard._time_for(8.0, context) is False, "exactly the reserve left: no wait, answer now"
