"""The deploy-time guard's answers to CloudFormation, field by field, on every path.

A custom resource answers with Status, Reason and PhysicalResourceId for the request it got; on Delete the
PhysicalResourceId must be the one CloudFormation sent, and a different one on Update means a replacement
(CloudFormation User Guide, custom resource response objects:
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-responses.html). EC2 answers an unknown
id with InvalidCapacityReservationId.NotFound and a badly formed one with InvalidCapacityReservationId.Malformed
(EC2 API error codes: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html).
"""

from __future__ import annotations

from datetime import UTC, datetime

import boto3
import pytest
from botocore.stub import Stubber

from pdkit.functions import reservation_guard
from pdkit.model import reservation
from tests.fixtures import cfn_requests
from tests.fixtures.cmd_support import pending_block

RID = "cr-0123456789abcdef0"
PROPS = {"ReservationId": RID, "InstanceType": "p5en.48xlarge", "InstanceCount": "4", "AvailabilityZone": "eu-south-2a"}
STACK = "arn:aws:cloudformation:eu-south-2:111122223333:stack/glm51-2p2d-capacity/5b918d10-cd98-11ea-90d5-0a9cd3354c10"
# A block before its start as EC2 reports it: TotalInstanceCount 0, the count in its tag (tests/fixtures/ec2/README.md).
BLOCK = pending_block(State="scheduled")
TAG = "aws:ec2capacityreservation:incrementalRequestedQuantity"


REAL_CLIENT = boto3.client


def _client(name):
    return REAL_CLIENT(name, region_name="eu-south-2", aws_access_key_id="test", aws_secret_access_key="test")  # noqa: S106


def _event(request, **extra):
    """The CloudFormation User Guide's example request of that type (tests/fixtures/cfn_requests.py) carrying the
    guard's properties, this test's stack and a physical id only where given: the docs' Update and Delete carry one."""
    event = cfn_requests.request(
        request, ResourceProperties=PROPS, StackId=STACK, LogicalResourceId="Guard", ResponseURL="https://example.invalid/x"
    )
    event.pop("PhysicalResourceId", None)
    event.pop("OldResourceProperties", None)
    return event | extra


def _answer(event, ec2=None, cloudformation=None):
    answers = []
    reservation_guard.handler(event, None, ec2=ec2, cloudformation=cloudformation, respond=lambda e, **kw: answers.append((e, kw)))
    ((to, answer),) = answers
    assert to is event, "the answer goes to the request's own ResponseURL and ids"
    return answer


def _ec2(found=None, error=None):
    ec2 = _client("ec2")
    stub = Stubber(ec2)
    if error:
        stub.add_client_error("describe_capacity_reservations", service_error_code=error, expected_params={"CapacityReservationIds": [RID]})
    else:
        stub.add_response("describe_capacity_reservations", {"CapacityReservations": found}, {"CapacityReservationIds": [RID]})
    stub.activate()
    return ec2


@pytest.mark.parametrize(("sent", "echoed"), [({"PhysicalResourceId": "guard-1"}, "guard-1"), ({}, RID)])
def test_delete_echoes_the_physical_id_it_was_sent(sent, echoed):
    assert _answer(_event("Delete", **sent)) == {"success": True, "reason": "nothing to clean up", "physical_id": echoed}


def test_a_matching_block_answers_success_with_the_reservation_as_physical_id():
    assert _answer(_event("Create"), ec2=_ec2([BLOCK])) == {
        "success": True,
        "reason": f"reservation {RID} matches the profile",
        "physical_id": RID,
    }


@pytest.mark.parametrize("error", ["InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"])
def test_unknown_and_malformed_ids_are_a_missing_reservation(error):
    answer = _answer(_event("Create"), ec2=_ec2(error=error))
    assert answer["reason"] == (
        f"Capacity Block check failed: reservation {RID} does not exist in this account and region: "
        "check capacity.reservation_id and aws.region"
    )


def test_an_empty_describe_answer_is_a_missing_reservation():
    answer = _answer(_event("Create"), ec2=_ec2([]))
    assert answer["success"] is False
    assert "does not exist in this account and region" in answer["reason"]


def test_every_problem_is_in_the_refusal_joined_by_semicolons():
    wrong = BLOCK | {"State": "expired", "Tags": [{"Key": TAG, "Value": "2"}]}
    answer = _answer(_event("Create"), ec2=_ec2([wrong]))
    assert answer == {
        "success": False,
        "reason": f"Capacity Block check failed: reservation {RID} is expired (ended; its instances were terminated): buy a new block "
        f"(`pdkit capacity offerings`) and update capacity.reservation_id; reservation {RID} has 2 instances (its {TAG} tag: EC2 "
        "reports TotalInstanceCount 0) but the profile says 4: "
        "make the profile match the block",
        "physical_id": RID,
    }


def _cfn(status=None, error=None):
    cloudformation = _client("cloudformation")
    stub = Stubber(cloudformation)
    if error:
        stub.add_client_error("describe_stacks", service_error_code=error, expected_params={"StackName": STACK})
    else:
        stub.add_response(
            "describe_stacks",
            {"Stacks": [{"StackName": "s", "StackStatus": status, "CreationTime": datetime(2026, 12, 1, tzinfo=UTC)}]},
            {"StackName": STACK},
        )
    stub.activate()
    return cloudformation


def test_an_update_refusal_keeps_the_physical_id():
    answer = _answer(_event("Update"), ec2=_ec2([BLOCK | {"State": "expired"}]), cloudformation=_cfn("UPDATE_IN_PROGRESS"))
    assert answer["success"] is False
    assert answer["physical_id"] == RID


def test_a_rollback_keeps_the_physical_id():
    answer = _answer(_event("Update"), ec2=_ec2([BLOCK | {"State": "expired"}]), cloudformation=_cfn("UPDATE_ROLLBACK_IN_PROGRESS"))
    assert answer["success"] is True
    assert answer["physical_id"] == RID


def test_an_unreadable_status_keeps_the_physical_id():
    answer = _answer(_event("Update"), ec2=_ec2([BLOCK | {"State": "expired"}]), cloudformation=_cfn(error="AccessDenied"))
    assert answer["success"] is False
    assert answer["physical_id"] == RID


def test_in_lambda_it_builds_its_own_ec2_and_cloudformation_clients(monkeypatch):
    """Without injected clients (the Lambda runtime) the guard asks boto3 for exactly ec2 and cloudformation."""
    made = []

    def client(service, *args, **kwargs):
        made.append(service)
        return {"ec2": lambda: _ec2([BLOCK | {"State": "expired"}]), "cloudformation": lambda: _cfn("UPDATE_ROLLBACK_IN_PROGRESS")}[
            service
        ]()

    monkeypatch.setattr(boto3, "client", client)
    assert _answer(_event("Update"))["success"] is True
    assert made == ["ec2", "cloudformation"]


def test_an_aws_failure_is_a_refusal_that_says_so():
    """The guard could not look: a deploy is never let onto a block nobody checked (UnauthorizedOperation is
    what EC2 answers without ec2:DescribeCapacityReservations)."""
    answer = _answer(_event("Create"), ec2=_ec2(error="UnauthorizedOperation"))
    assert answer["success"] is False
    assert answer["reason"].startswith(f"Capacity Block check failed: could not check reservation {RID}: ")
    assert "UnauthorizedOperation" in answer["reason"]


def test_the_placeholder_is_refused_without_calling_aws():
    """ec2=object(): any EC2 call would raise AttributeError; the refusal says how to buy a block."""
    answer = _answer(_event("Create", ResourceProperties=PROPS | {"ReservationId": reservation.PLACEHOLDER}), ec2=object())
    assert answer["success"] is False
    assert "placeholder" in answer["reason"]
    assert "pdkit capacity offerings" in answer["reason"]


@pytest.mark.parametrize("state", ["expired", "cancelled", "failed", "payment-failed"])
def test_every_dead_state_is_refused(state):
    """States a Capacity Block can end in (EC2 CapacityReservation.State)."""
    answer = _answer(_event("Create"), ec2=_ec2([BLOCK | {"State": state}]))
    assert answer["success"] is False
    assert f"is {state}" in answer["reason"]


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("InstanceType", "p5.48xlarge", "instance type"),
        ("Tags", [{"Key": TAG, "Value": "2"}], "has 2 instances"),
        ("AvailabilityZone", "eu-south-2b", "Availability Zone"),
    ],
)
def test_a_block_that_differs_from_the_profile_is_refused(field, value, words):
    answer = _answer(_event("Create"), ec2=_ec2([BLOCK | {field: value}]))
    assert answer["success"] is False
    assert words in answer["reason"]
