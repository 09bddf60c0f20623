"""Deploy-time guard: a custom resource ordered before the GPU node groups.

It fails the deploy with one clear message when the reservation is the placeholder, unknown,
expired or cancelled, or differs from the profile in instance type, count or AZ: a node group on a
wrong or stale reservation retries launches forever (pytorch/ci-infra#1065).

Rollback: when a stack update fails, CloudFormation rolls this resource back by sending Update with
the *previous* properties; the request carries no rollback flag
(https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-requesttypes-update.html).
By then the previous block may have expired; refusing it would strand the stack in
UPDATE_ROLLBACK_FAILED. So a failed check asks CloudFormation for the stack's status and lets the
request through while the stack is rolling back (a StackStatus ending in ROLLBACK_IN_PROGRESS, as
DescribeStacks spells them: https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_Stack.html).
"""

from __future__ import annotations

from typing import Any

from pdkit import reservation
from pdkit.functions import cfn_response

# UPDATE_ROLLBACK_IN_PROGRESS, ROLLBACK_IN_PROGRESS and IMPORT_ROLLBACK_IN_PROGRESS. The cleanup
# phases (UPDATE_*_CLEANUP_IN_PROGRESS) send only Delete, which always succeeds here.
ROLLING_BACK = "ROLLBACK_IN_PROGRESS"


def handler(event: dict[str, Any], context: Any, *, ec2: Any = None, cloudformation: Any = None, respond: Any = cfn_response.send) -> None:
    props = event["ResourceProperties"]
    want = reservation.Expected(
        reservation_id=props["ReservationId"],
        instance_type=props["InstanceType"],
        instance_count=int(props["InstanceCount"]),
        availability_zone=props["AvailabilityZone"],
    )
    if event["RequestType"] == "Delete":
        respond(event, success=True, reason="nothing to clean up", physical_id=event.get("PhysicalResourceId", want.reservation_id))
        return
    try:
        found = reservation.problems(_describe(want.reservation_id, ec2), want)
    except Exception as exc:  # any AWS failure must still answer CloudFormation, or the stack hangs for an hour
        found = [f"could not check reservation {want.reservation_id}: {exc}"]
    if not found:
        respond(event, success=True, reason=f"reservation {want.reservation_id} matches the profile", physical_id=want.reservation_id)
        return
    refusal = "Capacity Block check failed: " + "; ".join(found)
    if event["RequestType"] == "Update":
        try:
            status = _stack_status(event["StackId"], cloudformation)
        except Exception as exc:
            # Unknown: refuse. A wrongly refused rollback is recoverable with the command below; a deploy
            # wrongly let onto a stale block leaves its node groups retrying launches inside the paid window.
            respond(
                event,
                success=False,
                reason=f"{refusal}. Could not read the stack status to tell a rollback from a deploy ({exc}). If the stack is now "
                f"UPDATE_ROLLBACK_FAILED: aws cloudformation continue-update-rollback --stack-name {event['StackId']} "
                f"--resources-to-skip {event['LogicalResourceId']}",
                physical_id=want.reservation_id,
            )
            return
        if status.endswith(ROLLING_BACK):
            respond(
                event,
                success=True,
                reason=f"stack is {status}: restoring the previous properties without checking them ({refusal})",
                physical_id=want.reservation_id,
            )
            return
    respond(event, success=False, reason=refusal, physical_id=want.reservation_id)


def _stack_status(stack_id: str, cloudformation: Any) -> str:
    if cloudformation is None:
        import boto3

        cloudformation = boto3.client("cloudformation")
    status: str = cloudformation.describe_stacks(StackName=stack_id)["Stacks"][0]["StackStatus"]
    return status


def _describe(reservation_id: str, ec2: Any) -> dict[str, Any] | None:
    if reservation_id == reservation.PLACEHOLDER:
        return None
    if ec2 is None:
        import boto3

        ec2 = boto3.client("ec2")
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except ec2.exceptions.ClientError as exc:
        if exc.response["Error"]["Code"] in ("InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"):
            return None
        raise
    return found[0] if found else None
