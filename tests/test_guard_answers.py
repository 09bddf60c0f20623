"""The deploy-time guard answers CloudFormation on every path, once, before its Lambda's time runs out.

A custom resource that never answers leaves the stack waiting for the resource's ServiceTimeout, an hour by default
(https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudformation-customresource.html).
The requests are the CloudFormation User Guide's own examples (tests/fixtures/cfn_requests.py), whose placeholder
ResourceProperties (`key1`, `key2`, `key3`) are exactly what the guard must survive: it used to read
`props["ReservationId"]` before any try, so such a request raised KeyError and CloudFormation got no answer. On Delete
the answer must carry the PhysicalResourceId CloudFormation sent (crpg-ref-requesttypes-delete.html); a handler timing
out is pre-empted the way AWS's crhelper does it, a timer set from context.get_remaining_time_in_millis() that answers
FAILED (aws-cloudformation/custom-resource-helper, crhelper/resource_helper.py, _set_timeout).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from pdkit.functions import reservation_guard
from tests.fixtures.cfn_requests import STACK, request

CR = "cr-0123456789abcdef0"
GUARD = {"ReservationId": CR, "InstanceType": "p5en.48xlarge", "InstanceCount": "4", "AvailabilityZone": "eu-south-2a"}
DOC_ID = "custom resource provider-defined physical id"
NO_AWS = object()  # any AWS call on it raises AttributeError: the answer needed none


def _answers(event, *, ec2=NO_AWS, cloudformation=None, context=None):
    sent = []
    reservation_guard.handler(event, context, ec2=ec2, cloudformation=cloudformation, respond=lambda e, **kw: sent.append((e, kw)))
    assert all(to is event for to, _ in sent)
    return [kw for _, kw in sent]


def _stack(status):
    client = boto3.client("cloudformation", region_name="us-west-2", aws_access_key_id="test", aws_secret_access_key="test")  # noqa: S106
    stub = Stubber(client)
    stub.add_response(
        "describe_stacks",
        {"Stacks": [{"StackName": "mystack", "StackId": STACK, "CreationTime": datetime(2026, 12, 1, tzinfo=UTC), "StackStatus": status}]},
        {"StackName": STACK},
    )
    stub.activate()
    return client


MISSING = "ResourceProperties lack ReservationId, InstanceType, InstanceCount, AvailabilityZone"
FIX = "Fix: the capacity stack writes them from the profile (stacks/reservation_guard.py): deploy it again with `make deploy`"


def test_the_docs_create_example_is_refused_with_what_is_missing():
    (answer,) = _answers(request("Create"))
    assert answer == {
        "success": False,
        "reason": f"Capacity Block check failed: {MISSING}. {FIX}",
        "physical_id": reservation_guard.UNNAMED,
    }


def test_the_docs_update_example_is_refused_and_keeps_its_physical_id():
    (answer,) = _answers(request("Update"), cloudformation=_stack("UPDATE_IN_PROGRESS"))
    assert answer == {"success": False, "reason": f"Capacity Block check failed: {MISSING}. {FIX}", "physical_id": DOC_ID}


def test_the_docs_update_example_during_a_rollback_is_let_through():
    """CloudFormation rolls back by sending the previous properties as an Update; refusing them would leave the stack in
    UPDATE_ROLLBACK_FAILED, whatever they look like."""
    (answer,) = _answers(request("Update"), cloudformation=_stack("UPDATE_ROLLBACK_IN_PROGRESS"))
    assert answer["success"] is True
    assert answer["physical_id"] == DOC_ID


def test_the_docs_delete_example_succeeds_with_the_physical_id_it_carries():
    assert _answers(request("Delete")) == [{"success": True, "reason": "nothing to clean up", "physical_id": DOC_ID}]


@pytest.mark.parametrize("kind", ["Create", "Update", "Delete"])
def test_a_request_without_resource_properties_is_answered(kind):
    event = {k: v for k, v in request(kind).items() if k != "ResourceProperties"}
    (answer,) = _answers(event, cloudformation=_stack("UPDATE_IN_PROGRESS") if kind == "Update" else None)
    assert answer["success"] is (kind == "Delete")
    if kind != "Delete":
        assert "ResourceProperties is NoneType, not an object" in answer["reason"]


@pytest.mark.parametrize("props", [None, "ReservationId=cr-1", ["list"], {}])
def test_a_delete_without_a_physical_id_is_answered_whatever_its_properties(props):
    event = {k: v for k, v in request("Delete", ResourceProperties=props).items() if k != "PhysicalResourceId"}
    assert _answers(event) == [{"success": True, "reason": "nothing to clean up", "physical_id": reservation_guard.UNNAMED}]


def test_a_delete_without_a_physical_id_answers_with_the_reservation_it_named():
    event = {k: v for k, v in request("Delete", ResourceProperties=GUARD).items() if k != "PhysicalResourceId"}
    (answer,) = _answers(event)
    assert answer["physical_id"] == CR


@pytest.mark.parametrize("count", ["four", "4.0", ""])
def test_a_non_integer_instance_count_is_refused_before_any_aws_call(count):
    (answer,) = _answers(request("Create", ResourceProperties=GUARD | {"InstanceCount": count}))
    assert answer["success"] is False
    words = f"InstanceCount {count!r} is not a whole number" if count else "ResourceProperties lack InstanceCount"
    assert words in answer["reason"]


def test_an_unknown_request_type_is_refused():
    (answer,) = _answers(request("Create", RequestType="Replace", ResourceProperties=GUARD))
    assert answer == {
        "success": False,
        "reason": "unknown RequestType 'Replace': the guard answers Create, Update and Delete",
        "physical_id": CR,
    }


class Lambda:
    def __init__(self, seconds):
        self.until = seconds

    def get_remaining_time_in_millis(self):
        return int(self.until * 1000)


class HangingEc2:
    """An EC2 endpoint that does not answer until released (a stand-in for a Describe hung past every timeout)."""

    class exceptions:  # botocore clients expose their error classes as `client.exceptions`
        ClientError = RuntimeError

    def __init__(self):
        self.release = threading.Event()

    def describe_capacity_reservations(self, **_params):
        self.release.wait(10)
        return {"CapacityReservations": []}


def test_a_hung_aws_call_is_answered_before_the_function_times_out():
    """0.3 s before the watchdog margin runs out the guard answers FAILED with the fix; the handler's own late answer
    is not sent a second time."""
    ec2 = HangingEc2()
    sent = []
    event = request("Create", ResourceProperties=GUARD)

    def respond(_event: dict[str, Any], **kw: Any) -> None:
        sent.append(kw)

    done = threading.Thread(
        target=reservation_guard.handler,
        args=(event, Lambda(reservation_guard.WATCHDOG_MARGIN_SECONDS + 0.3)),
        kwargs={"ec2": ec2, "respond": respond},
    )
    done.start()
    for _ in range(100):
        if sent:
            break
        threading.Event().wait(0.05)
    assert len(sent) == 1, "the watchdog answered while the call still hung"
    assert sent[0]["success"] is False
    assert sent[0]["reason"].startswith("Capacity Block check failed: AWS did not answer before the guard's time ran out. Fix: ")
    ec2.release.set()
    done.join(5)
    assert len(sent) == 1, "the handler's own answer, after the watchdog's, is not sent"


def test_a_handler_that_answers_in_time_cancels_the_watchdog():
    ec2 = boto3.client("ec2", region_name="us-west-2", aws_access_key_id="test", aws_secret_access_key="test")  # noqa: S106
    stub = Stubber(ec2)
    stub.add_client_error(
        "describe_capacity_reservations", "InvalidCapacityReservationId.NotFound", expected_params={"CapacityReservationIds": [CR]}
    )
    with stub:
        answers = _answers(
            request("Create", ResourceProperties=GUARD), ec2=ec2, context=Lambda(reservation_guard.WATCHDOG_MARGIN_SECONDS + 0.2)
        )
    threading.Event().wait(0.4)
    assert [a["success"] for a in answers] == [False]
    assert "does not exist in this account and region" in answers[0]["reason"]


def test_an_unexpected_failure_is_still_answered(monkeypatch):
    """A bug outside the AWS calls (here the property reader itself raising) must reach CloudFormation as a FAILED
    naming it, not a hung stack."""

    def broken(_props):
        raise RuntimeError("a bug")

    monkeypatch.setattr(reservation_guard, "expected", broken)
    (answer,) = _answers(request("Create", ResourceProperties=GUARD))
    assert answer == {"success": False, "reason": "Capacity Block check failed: RuntimeError: a bug", "physical_id": CR}


def test_an_answer_that_cannot_be_put_is_raised_for_lambda_to_retry():
    """When the PUT to the pre-signed URL fails, the guard does not swallow it: Lambda records the error and retries an
    asynchronous invocation (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html), and the
    read-only guard answers again then."""

    def respond(_event, **_answer):
        raise OSError("connection reset by peer")

    with pytest.raises(OSError, match="connection reset"):
        reservation_guard.handler(request("Delete"), None, respond=respond)
