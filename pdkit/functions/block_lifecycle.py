"""Capacity Block lifecycle: operators need not be awake at block start or end.

- "Capacity Block Delivered": scale the GPU node groups to their plan sizes.
- every few minutes: once the block's *current* end date (extensions move it) is within the drain
  lead (T-60 by default), scale the GPU node groups to 0. EKS managed node groups drain nodes as
  they scale in, ahead of EC2's T-40 warning, EKS's own scale-down and T-30 termination.
- "Capacity Block Expiration Warning": the same scale-down, as a backstop.
Every action is announced on the kit's SNS topic.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any

from pdkit import reservation


def handler(event: dict[str, Any], context: Any, *, clients: dict[str, Any] | None = None, now: datetime | None = None) -> dict[str, Any]:
    env = os.environ
    c = clients or _clients()
    groups: dict[str, int] = json.loads(env["NODE_GROUPS"])
    cluster, reservation_id = env["CLUSTER_NAME"], env["RESERVATION_ID"]
    kind = event.get("detail-type", "")
    if kind in reservation.DELIVERED:
        _scale(c["eks"], cluster, groups, up=True)
        _notify(c["sns"], f"Capacity Block {reservation_id} delivered: scaling {_sizes(groups)} on {cluster}.")
        return {"action": "scale-up"}
    if kind in reservation.EXPIRING:
        changed = _scale(c["eks"], cluster, groups, up=False)
        _notify(
            c["sns"],
            f"Capacity Block {reservation_id} expires in 40 minutes: GPU node groups {'scaled to 0' if changed else 'already at 0'}.",
        )
        return {"action": "scale-down"}
    found = c["ec2"].describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    if not found or found[0].get("State") != "active" or "EndDate" not in found[0]:
        return {"action": "none"}
    end = found[0]["EndDate"]
    if not reservation.drain_due(end, now or datetime.now(UTC), int(env["DRAIN_LEAD_MINUTES"])):
        return {"action": "none"}
    if _scale(c["eks"], cluster, groups, up=False):
        _notify(c["sns"], f"Capacity Block {reservation_id} ends at {end.isoformat()}: draining serving now, GPU node groups scale to 0.")
        return {"action": "drain"}
    return {"action": "none"}


def _scale(eks: Any, cluster: str, groups: dict[str, int], *, up: bool) -> bool:
    """Set every group's size; True when anything changed. Desired size is owned here and by `pdkit nodes`."""
    changed = False
    for name, size in groups.items():
        current = eks.describe_nodegroup(clusterName=cluster, nodegroupName=name)["nodegroup"]["scalingConfig"]
        desired = size if up else 0
        if current.get("desiredSize") == desired:
            continue
        eks.update_nodegroup_config(
            clusterName=cluster, nodegroupName=name, scalingConfig={"minSize": 0, "maxSize": max(size, 1), "desiredSize": desired}
        )
        changed = True
    return changed


def _sizes(groups: dict[str, int]) -> str:
    return ", ".join(f"{name} to {size}" for name, size in groups.items())


def _notify(sns: Any, message: str) -> None:
    sns.publish(TopicArn=os.environ["TOPIC_ARN"], Subject="Capacity Block lifecycle", Message=message)


def _clients() -> dict[str, Any]:
    import boto3

    return {name: boto3.client(name) for name in ("ec2", "eks", "sns")}
