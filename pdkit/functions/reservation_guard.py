"""Deploy-time guard: a custom resource ordered before the GPU node groups.

It fails the deploy with one clear message when the reservation is the placeholder, unknown,
expired or cancelled, or differs from the profile in instance type, count or AZ: a node group on a
wrong or stale reservation retries launches forever (pytorch/ci-infra#1065).
"""

from __future__ import annotations

from typing import Any

from pdkit import reservation
from pdkit.functions import cfn_response


def handler(event: dict[str, Any], context: Any, *, ec2: Any = None, respond: Any = cfn_response.send) -> None:
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
    if found:
        respond(event, success=False, reason="Capacity Block check failed: " + "; ".join(found), physical_id=want.reservation_id)
    else:
        respond(event, success=True, reason=f"reservation {want.reservation_id} matches the profile", physical_id=want.reservation_id)


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
