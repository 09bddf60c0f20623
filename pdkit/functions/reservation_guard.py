"""Deploy-time guard: a custom resource ordered before the GPU node groups.

It fails the deploy with one clear message when the reservation is the placeholder, unknown, in a state
no deployment may proceed in, or differs from the profile in instance type, count or AZ: a node group on
a wrong or stale reservation retries launches forever (pytorch/ci-infra#1065). The states and the count
are read by pdkit/model/reservation.py (STATES, instance_count: a block that has not started reports 0
instances and carries its count in a tag), the same rules the purchase handler and `pdkit preflight` use.

Every request gets one answer before the function's time runs out: properties that are missing or not
the guard's, a missing PhysicalResourceId or an unknown RequestType are answered FAILED with the fix
(Delete always SUCCESS), and a watchdog answers FAILED a few seconds before the Lambda timeout if an AWS
call hangs. Without an answer CloudFormation waits for the resource's ServiceTimeout, an hour by default.

Rollback: when a stack update fails, CloudFormation rolls this resource back by sending Update with
the *previous* properties; the request carries no rollback flag
(https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-requesttypes-update.html).
By then the previous block may have expired; refusing it would strand the stack in
UPDATE_ROLLBACK_FAILED. So a failed check asks CloudFormation for the stack's status and lets the
request through while the stack is rolling back (a StackStatus ending in ROLLBACK_IN_PROGRESS, as
DescribeStacks spells them: https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_Stack.html).

A block bought by this stack's purchase resource moments earlier (property ReservationFrom: purchase) may not
be visible yet: the EC2 API is eventually consistent, a new id can be answered NotFound, and EC2 asks callers to
repeat the Describe with an exponential backoff
(https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html). Only that id is waited for; a
hand-entered id that EC2 does not know is a typo or the wrong region and is refused at once.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from pdkit.functions import cfn_response
from pdkit.model import reservation

# UPDATE_ROLLBACK_IN_PROGRESS, ROLLBACK_IN_PROGRESS and IMPORT_ROLLBACK_IN_PROGRESS. The cleanup
# phases (UPDATE_*_CLEANUP_IN_PROGRESS) send only Delete, which always succeeds here.
ROLLING_BACK = "ROLLBACK_IN_PROGRESS"
# The property value that says the id comes from the purchase resource in the same stack (stacks/reservation_guard.py).
FROM_PURCHASE = "purchase"
NOT_FOUND = "InvalidCapacityReservationId.NotFound"
# Seconds between Describe calls while a bought id propagates: 60 s in all, inside the function's 2-minute timeout.
PROPAGATION_WAITS = (2.0, 4.0, 8.0, 16.0, 30.0)
# Time kept after the last wait for one more Describe and the answer to CloudFormation: a handler that times out
# never answers, and CloudFormation then waits an hour for the resource.
ANSWER_RESERVE_SECONDS = 20.0


# Seconds before the function's timeout at which the watchdog answers FAILED for a handler still waiting on AWS:
# time for the PUT of the answer itself. crhelper (aws-cloudformation/custom-resource-helper, crhelper/resource_helper.py,
# _set_timeout) answers the same way, from a timer set to the remaining time.
WATCHDOG_MARGIN_SECONDS = 10.0
# The physical id of a Create refused before it named a reservation (its properties unreadable).
UNNAMED = "capacity-block-guard"
PROPERTIES = ("ReservationId", "InstanceType", "InstanceCount", "AvailabilityZone")


class BadProperties(ValueError):
    """The request's ResourceProperties cannot be read as the guard's (stacks/reservation_guard.py writes them)."""


def expected(props: Any) -> reservation.Expected:
    """The reservation the stack asks for, from ResourceProperties; BadProperties names what is missing or wrong."""
    if not isinstance(props, dict):
        raise BadProperties(f"ResourceProperties is {type(props).__name__}, not an object")
    missing = [k for k in PROPERTIES if not isinstance(props.get(k), str) or not props[k]]
    if missing:
        raise BadProperties(f"ResourceProperties lack {', '.join(missing)}")
    try:
        count = int(props["InstanceCount"])
    except ValueError:
        raise BadProperties(f"InstanceCount {props['InstanceCount']!r} is not a whole number") from None
    return reservation.Expected(props["ReservationId"], props["InstanceType"], count, props["AvailabilityZone"])


class Answer:
    """CloudFormation gets one answer per request: the handler's, or the watchdog's when the function's time is about
    to run out (a handler that times out never answers, and CloudFormation then waits for the resource's
    ServiceTimeout, an hour by default)."""

    def __init__(self, event: dict[str, Any], respond: Any) -> None:
        self.event, self.respond = event, respond
        self.lock = threading.Lock()
        self.sent = False

    def __call__(self, *, success: bool, reason: str, physical_id: str) -> None:
        with self.lock:
            if self.sent:
                return
            self.sent = True
        self.respond(self.event, success=success, reason=reason, physical_id=physical_id)


def handler(
    event: dict[str, Any],
    context: Any,
    *,
    ec2: Any = None,
    cloudformation: Any = None,
    respond: Any = cfn_response.send,
    sleep: Any = time.sleep,
) -> None:
    answer = Answer(event, respond)
    kind = event.get("RequestType")
    props = event.get("ResourceProperties")
    sent_id = event.get("PhysicalResourceId")
    named = props.get("ReservationId") if isinstance(props, dict) else None
    fallback = sent_id or (named if isinstance(named, str) and named else UNNAMED)
    watchdog = _watchdog(context, answer, kind, fallback)
    try:
        if kind == "Delete":
            answer(success=True, reason="nothing to clean up", physical_id=fallback)
        elif kind in ("Create", "Update"):
            _check(event, context, answer, ec2=ec2, cloudformation=cloudformation, sleep=sleep, fallback=fallback)
        else:
            answer(success=False, reason=f"unknown RequestType {kind!r}: the guard answers Create, Update and Delete", physical_id=fallback)
    except Exception as exc:  # a bug or an unexpected answer must still reach CloudFormation, or the stack waits an hour
        if answer.sent:
            # The answer itself did not go out (the PUT to the response URL failed): raise, so Lambda records the error
            # and retries the invocation, which answers again (the guard only reads).
            raise
        answer(success=kind == "Delete", reason=f"Capacity Block check failed: {type(exc).__name__}: {exc}", physical_id=fallback)
    finally:
        if watchdog is not None:
            watchdog.cancel()


def _watchdog(context: Any, answer: Answer, kind: Any, physical_id: str) -> threading.Timer | None:
    left = _seconds_left(context)
    if left is None:
        return None
    timer = threading.Timer(
        max(0.0, left - WATCHDOG_MARGIN_SECONDS),
        lambda: answer(
            success=kind == "Delete",
            reason="Capacity Block check failed: AWS did not answer before the guard's time ran out. "
            "Fix: deploy again with `make deploy`; if it persists, check the EC2 and CloudFormation endpoints from the VPC",
            physical_id=physical_id,
        ),
    )
    timer.daemon = True
    timer.start()
    return timer


def _check(event: dict[str, Any], context: Any, answer: Answer, *, ec2: Any, cloudformation: Any, sleep: Any, fallback: str) -> None:
    props = event.get("ResourceProperties")
    try:
        want = expected(props)
    except BadProperties as bad:
        found = [
            f"{bad}. Fix: the capacity stack writes them from the profile (stacks/reservation_guard.py): deploy it again with `make deploy`"
        ]
        physical = fallback
    else:
        physical = want.reservation_id
        bought = isinstance(props, dict) and props.get("ReservationFrom") == FROM_PURCHASE
        try:
            if bought:
                block, waited = _describe_propagating(want.reservation_id, ec2, context, sleep)
                found = reservation.problems(block, want) if block is not None else [_still_unknown(want.reservation_id, waited)]
            else:
                found = reservation.problems(_describe(want.reservation_id, ec2), want)
        except Exception as exc:  # any AWS failure must still answer CloudFormation, or the stack hangs for an hour
            found = [f"could not check reservation {want.reservation_id}: {exc}"]
        if not found:
            answer(success=True, reason=f"reservation {want.reservation_id} matches the profile", physical_id=physical)
            return
    refusal = "Capacity Block check failed: " + "; ".join(found)
    if event.get("RequestType") == "Update":
        stack_id, logical = event.get("StackId", "?"), event.get("LogicalResourceId", "?")
        try:
            status = stack_status(stack_id, cloudformation)
        except Exception as exc:
            # Unknown: refuse. A wrongly refused rollback is recoverable with the command below; a deploy
            # wrongly let onto a stale block leaves its node groups retrying launches inside the paid window.
            answer(
                success=False,
                reason=f"{refusal}. Could not read the stack status to tell a rollback from a deploy ({exc}). If the stack is now "
                f"UPDATE_ROLLBACK_FAILED: aws cloudformation continue-update-rollback --stack-name {stack_id} "
                f"--resources-to-skip {logical}",
                physical_id=physical,
            )
            return
        if status.endswith(ROLLING_BACK):
            answer(
                success=True,
                reason=f"stack is {status}: restoring the previous properties without checking them ({refusal})",
                physical_id=physical,
            )
            return
    answer(success=False, reason=refusal, physical_id=physical)


def stack_status(stack_id: str, cloudformation: Any) -> str:
    if cloudformation is None:
        import boto3

        cloudformation = boto3.client("cloudformation")
    status: str = cloudformation.describe_stacks(StackName=stack_id)["Stacks"][0]["StackStatus"]
    return status


def _still_unknown(reservation_id: str, waited: float) -> str:
    return (
        f"reservation {reservation_id}, bought by this stack's purchase resource, is still unknown to EC2 after {waited:g} s "
        "(the EC2 API is eventually consistent): deploy again with `make deploy` in a few minutes; nothing is bought again "
        "(the purchase resource never buys on Update)"
    )


def _describe_propagating(reservation_id: str, ec2: Any, context: Any, sleep: Any) -> tuple[dict[str, Any] | None, float]:
    """The reservation, asking again with a growing wait while EC2 answers NotFound; (None, seconds waited) when it never shows."""
    ec2 = ec2 or _ec2()
    waited = 0.0
    for wait in (*PROPAGATION_WAITS, None):
        try:
            # Any other error, Malformed included, goes to the caller with EC2's words: waiting cannot fix it.
            return _describe(reservation_id, ec2, unknown=()), waited
        except ec2.exceptions.ClientError as exc:
            if exc.response["Error"]["Code"] != NOT_FOUND:
                raise
        if wait is None or not _time_for(wait, context):
            return None, waited
        sleep(wait)
        waited += wait
    return None, waited


def _seconds_left(context: Any) -> float | None:
    """The invocation's remaining time (Lambda's context object); None for a caller without the Lambda clock."""
    if context is None or not hasattr(context, "get_remaining_time_in_millis"):
        return None
    return float(context.get_remaining_time_in_millis()) / 1000


def _time_for(wait: float, context: Any) -> bool:
    """Whether the function can wait this long and still answer CloudFormation before its timeout."""
    left = _seconds_left(context)
    return left is None or left > wait + ANSWER_RESERVE_SECONDS


def _ec2() -> Any:
    import boto3

    return boto3.client("ec2")


def _describe(
    reservation_id: str, ec2: Any, *, unknown: tuple[str, ...] = (NOT_FOUND, "InvalidCapacityReservationId.Malformed")
) -> dict[str, Any] | None:
    if reservation_id == reservation.PLACEHOLDER:
        return None
    ec2 = ec2 or _ec2()
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except ec2.exceptions.ClientError as exc:
        if exc.response["Error"]["Code"] in unknown:
            return None
        raise
    return found[0] if found else None
