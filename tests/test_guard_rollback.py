"""The reservation guard during a CloudFormation rollback, against botocore's cloudformation and ec2 models (Stubber).

CloudFormation rolls a custom resource back after a failed stack update by sending it an Update whose
ResourceProperties are the *previous* ones; the request has no rollback flag
(https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-requesttypes-update.html).
The only signal is the stack's own status, which DescribeStacks reports (StackStatus enum of the
cloudformation API model: UPDATE_ROLLBACK_IN_PROGRESS, ROLLBACK_IN_PROGRESS, IMPORT_ROLLBACK_IN_PROGRESS, ...).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.stub import Stubber

from pdkit.functions import reservation_guard
from tests.fixtures import cfn_requests
from tests.fixtures.cmd_support import reservation

OLD = "cr-0aaaaaaaaaaaaaaaa"  # the block the stack was deployed on; it has expired since
NEW = "cr-0bbbbbbbbbbbbbbbb"  # the block the profile now names
STACK = "arn:aws:cloudformation:eu-south-2:123456789012:stack/glm51-2p2d-capacity/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _props(rid):
    return {"ReservationId": rid, "InstanceType": "p5en.48xlarge", "InstanceCount": "4", "AvailabilityZone": "eu-south-2a"}


def _block(rid, state):
    """A Capacity Block as AWS ParallelCluster records one (tests/fixtures/ec2/README.md), with this test's id and state."""
    return reservation(CapacityReservationId=rid, State=state, EndDate=NOW + timedelta(hours=24))


def _client(name):
    return boto3.client(name, region_name="eu-south-2", aws_access_key_id="test", aws_secret_access_key="test")  # noqa: S106


class Guard:
    """One guard Lambda with Stubber-checked ec2 and cloudformation clients; records every answer to CloudFormation."""

    def __init__(self):
        self.ec2, self.cloudformation = _client("ec2"), _client("cloudformation")
        self.ec2_stub, self.cfn_stub = Stubber(self.ec2), Stubber(self.cloudformation)
        self.answers = []

    def block(self, rid, state):
        self.ec2_stub.add_response(
            "describe_capacity_reservations", {"CapacityReservations": [_block(rid, state)]}, {"CapacityReservationIds": [rid]}
        )

    def stack(self, status):
        self.cfn_stub.add_response(
            "describe_stacks",
            {"Stacks": [{"StackName": "glm51-2p2d-capacity", "StackId": STACK, "CreationTime": NOW, "StackStatus": status}]},
            {"StackName": STACK},
        )

    def request(self, kind, props, *, old=None, physical=None):
        # The CloudFormation User Guide's example request of this type (tests/fixtures/cfn_requests.py), with this stack,
        # the guard's resource and properties.
        event = cfn_requests.request(
            kind,
            RequestId=f"req-{len(self.answers)}",
            ResponseURL="https://cloudformation-custom-resource-response.example/signed",
            ResourceType="Custom::CapacityBlockGuard",
            LogicalResourceId="ReservationGuardCheck",
            StackId=STACK,
            ResourceProperties={"ServiceToken": "arn:aws:lambda:eu-south-2:123456789012:function:guard", **props},
        )
        event.pop("OldResourceProperties", None)
        event.pop("PhysicalResourceId", None)
        if old is not None:
            event["OldResourceProperties"] = {"ServiceToken": "arn:aws:lambda:eu-south-2:123456789012:function:guard", **old}
        if physical is not None:
            event["PhysicalResourceId"] = physical
        with self.ec2_stub, self.cfn_stub:
            reservation_guard.handler(event, None, ec2=self.ec2, cloudformation=self.cloudformation, respond=self._respond)
            self.ec2_stub.assert_no_pending_responses()
            self.cfn_stub.assert_no_pending_responses()
        return self.answers[-1]

    def _respond(self, event, **answer):
        self.answers.append(answer)


def test_rollback_after_the_block_expired_restores_the_old_id():
    """The issue's sequence: the stack runs on OLD; OLD expires; the profile moves to NEW; the update checks NEW
    (it passes), another resource of the update fails, and CloudFormation sends Update with OLD's properties
    while the stack is UPDATE_ROLLBACK_IN_PROGRESS. Answering FAILED there ends in UPDATE_ROLLBACK_FAILED."""
    g = Guard()
    g.block(NEW, "scheduled")
    assert g.request("Update", _props(NEW), old=_props(OLD), physical=OLD) | {"reason": ""} == {
        "success": True,
        "reason": "",
        "physical_id": NEW,
    }
    # ... another resource of the update fails; CloudFormation rolls the guard back:
    g.block(OLD, "expired")
    g.stack("UPDATE_ROLLBACK_IN_PROGRESS")
    answer = g.request("Update", _props(OLD), old=_props(NEW), physical=NEW)
    assert answer["success"] is True
    assert answer["physical_id"] == OLD, "the physical id goes back with the properties"
    assert "UPDATE_ROLLBACK_IN_PROGRESS" in answer["reason"]
    assert "is expired" in answer["reason"], "the operator still sees what the check found"


def test_the_same_update_outside_a_rollback_is_refused():
    """An operator who points the profile back at an expired block gets the refusal: only a rollback is let through."""
    g = Guard()
    g.block(OLD, "expired")
    g.stack("UPDATE_IN_PROGRESS")
    answer = g.request("Update", _props(OLD), old=_props(NEW), physical=NEW)
    assert answer["success"] is False
    assert "is expired" in answer["reason"]


@pytest.mark.parametrize("status", ["ROLLBACK_IN_PROGRESS", "IMPORT_ROLLBACK_IN_PROGRESS", "UPDATE_ROLLBACK_IN_PROGRESS"])
def test_every_rolling_back_status_lets_the_previous_properties_through(status):
    g = Guard()
    g.block(OLD, "cancelled")
    g.stack(status)
    assert g.request("Update", _props(OLD), old=_props(NEW), physical=NEW)["success"] is True


@pytest.mark.parametrize(
    "status", ["UPDATE_IN_PROGRESS", "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS", "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS"]
)
def test_statuses_that_are_not_a_rollback_keep_the_refusal(status):
    """The cleanup phases send only Delete (always answered SUCCESS); an Update seen there is not a rollback."""
    g = Guard()
    g.block(OLD, "expired")
    g.stack(status)
    assert g.request("Update", _props(OLD), old=_props(NEW), physical=NEW)["success"] is False


def test_an_unreadable_stack_status_refuses_with_the_way_out():
    """Refusing is the safe side: a deploy let onto a stale block retries launches inside the paid window, while a
    refused rollback is resumed with ContinueUpdateRollback --resources-to-skip (named in the reason)."""
    g = Guard()
    g.block(OLD, "expired")
    g.cfn_stub.add_client_error("describe_stacks", "AccessDenied", "not authorized to perform cloudformation:DescribeStacks", 403)
    answer = g.request("Update", _props(OLD), old=_props(NEW), physical=NEW)
    assert answer["success"] is False
    assert f"aws cloudformation continue-update-rollback --stack-name {STACK} --resources-to-skip ReservationGuardCheck" in answer["reason"]


def test_a_passing_check_needs_no_stack_status():
    """The status is read only to excuse a failed check: a rollback onto a still-valid block costs no extra call."""
    g = Guard()
    g.block(OLD, "active")
    assert g.request("Update", _props(OLD), old=_props(NEW), physical=NEW)["success"] is True


def test_create_never_asks_for_the_stack_status():
    """A failed Create rolls back with Delete, never Update: a stale id on Create is refused outright."""
    g = Guard()
    g.block(NEW, "expired")
    assert g.request("Create", _props(NEW))["success"] is False


def test_the_guard_may_read_its_own_stack_and_no_other(kit):
    """DescribeStacks is granted on the stack's own ARN (AWS::StackId), not on `*`."""
    policies = kit.template_json("capacity")["Resources"]
    statements = [
        s
        for r in policies.values()
        if r["Type"] == "AWS::IAM::ManagedPolicy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
        if "cloudformation:DescribeStacks" in str(s["Action"])
    ]
    assert statements == [{"Action": "cloudformation:DescribeStacks", "Effect": "Allow", "Resource": {"Ref": "AWS::StackId"}}]
