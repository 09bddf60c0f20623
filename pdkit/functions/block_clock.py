"""The Capacity Block clock, every minute: how much of the paid block is left, as CloudWatch metrics.

Reads the reservation's *current* StartDate/EndDate (extensions move the end) and publishes, in
PDKit/CapacityBlock with dimensions CapacityReservationId and ClusterName:
- BlockActive: 1 while the reservation is active, else 0;
- BlockMinutesLeft and BlockMinutesElapsed: only while it is active.
The infrastructure dashboard shows them; the block-ending alarm and the serving alarms' gates read them.
Overlapping runs (nothing reserves concurrency) only publish the same readings twice for a minute,
which the alarms' 60 s statistics absorb. Standard library + boto3 only.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

from pdkit.model.reservation import PLACEHOLDER
from pdkit.render.observability import catalog as c


def readings(reservation: dict[str, Any] | None, now: datetime) -> dict[str, float]:
    """Metric name -> value. Minutes are rounded to 0.1 and never negative."""
    if reservation is None or reservation.get("State") != "active":
        return {c.BLOCK_ACTIVE: 0.0}
    out = {c.BLOCK_ACTIVE: 1.0}
    if end := reservation.get("EndDate"):
        out[c.BLOCK_MINUTES_LEFT] = max(0.0, round((end - now).total_seconds() / 60, 1))
    if start := reservation.get("StartDate"):
        out[c.BLOCK_MINUTES_ELAPSED] = max(0.0, round((now - start).total_seconds() / 60, 1))
    return out


def handler(event: dict[str, Any], context: Any, *, clients: dict[str, Any] | None = None, now: datetime | None = None) -> dict[str, Any]:
    reservation_id, cluster = os.environ["RESERVATION_ID"], os.environ["CLUSTER_NAME"]
    if reservation_id == PLACEHOLDER:
        return {"published": {}}
    cl = clients or _clients()
    now = now or datetime.now(UTC)
    values = readings(_describe(cl["ec2"], reservation_id), now)
    dims = [{"Name": "CapacityReservationId", "Value": reservation_id}, {"Name": "ClusterName", "Value": cluster}]
    cl["cloudwatch"].put_metric_data(
        Namespace=c.BLOCK_NAMESPACE,
        MetricData=[
            {"MetricName": name, "Dimensions": dims, "Timestamp": now, "Value": value, "Unit": "None"} for name, value in values.items()
        ],
    )
    return {"published": values}


def _describe(ec2: Any, reservation_id: str) -> dict[str, Any] | None:
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except Exception as err:
        code = getattr(err, "response", {}).get("Error", {}).get("Code", "")
        if code.startswith("InvalidCapacityReservationId"):
            return None  # gone or never bought: the block is not active
        raise
    return found[0] if found else None


def _clients() -> dict[str, Any]:
    import boto3

    return {"ec2": boto3.client("ec2"), "cloudwatch": boto3.client("cloudwatch")}
