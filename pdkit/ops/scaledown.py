"""EKS's own scale-down before the block ends, checked against the reservation's current end date.

EKS creates, on the Auto Scaling group of every CAPACITY_BLOCK managed node group, a scheduled action named
"Amazon EKS Node Group Capacity Scaledown Before Reservation End" that scales the group to 0 forty minutes before
the reservation ends, and says not to edit or delete it
(https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html). `pdkit capacity extend` moves the end
date (once the extension's payment succeeds: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-extend.html),
and no AWS document says whether EKS then moves its action. If it does not, the action still fires at the old end
minus 40 min and takes the GPU nodes away hours or days before the paid block ends. So the kit reads the action
(autoscaling:DescribeScheduledActions) and compares it with the current end minus 40 min, after an extension and
in `pdkit preflight`, and says what to do when they disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pdkit.console import span, when
from pdkit.model.plan import Plan
from pdkit.ops.aws_clients import Aws
from pdkit.ops.aws_errors import error_code
from pdkit.ops.capacity import Reservation

ACTION = "Amazon EKS Node Group Capacity Scaledown Before Reservation End"
LEAD = timedelta(minutes=40)
# EKS publishes no rounding for the action's time; an extension moves the end by a day at least (1-day steps,
# capacity-blocks-extend), so a few minutes of slack can only absorb rounding, never hide a stale action.
SLACK = timedelta(minutes=5)

Verdict = Literal["follows", "stale", "late", "missing", "absent"]
Status = Literal["PASS", "WARN", "FAIL"]


@dataclass(frozen=True)
class GroupScaledown:
    """What EKS scheduled for one GPU node group, against when it should fire (the reservation's end minus 40 min)."""

    node_group: str
    auto_scaling_group: str | None
    scheduled: datetime | None
    expected: datetime
    verdict: Verdict


def expected_time(end: datetime) -> datetime:
    return end - LEAD


def auto_scaling_groups(eks: Any, plan: Plan, node_group: str) -> list[str] | None:
    """The node group's Auto Scaling groups (DescribeNodegroup resources.autoScalingGroups); None if it does not exist."""
    try:
        group = eks.describe_nodegroup(clusterName=plan.cluster_name, nodegroupName=node_group)["nodegroup"]
    except Exception as err:
        if error_code(err) != "ResourceNotFoundException":
            raise
        return None
    return [a["name"] for a in group.get("resources", {}).get("autoScalingGroups", []) if a.get("name")]


def scheduled_time(autoscaling: Any, auto_scaling_group: str) -> datetime | None:
    """When EKS's action fires on this group (StartTime, else the older Time field), every page read; None if there is none."""
    pages = autoscaling.get_paginator("describe_scheduled_actions").paginate(
        AutoScalingGroupName=auto_scaling_group, ScheduledActionNames=[ACTION]
    )
    times = [
        action.get("StartTime") or action.get("Time")
        for page in pages
        for action in page.get("ScheduledUpdateGroupActions", [])
        if action.get("ScheduledActionName") == ACTION
    ]
    found = [t for t in times if t is not None]
    return min(found) if found else None


def verdict(scheduled: datetime | None, expected: datetime) -> Verdict:
    if scheduled is None:
        return "missing"
    if scheduled < expected - SLACK:
        return "stale"
    if scheduled > expected + SLACK:
        return "late"
    return "follows"


def check(aws: Aws, plan: Plan, end: datetime) -> list[GroupScaledown]:
    """One entry per GPU node group of the plan (a rehearsal's on-demand groups have no such action: none)."""
    if plan.market != "capacity-block":
        return []
    expected = expected_time(end)
    out: list[GroupScaledown] = []
    for role in plan.roles.values():
        groups = auto_scaling_groups(aws.eks, plan, role.node_group_name)
        if not groups:
            out.append(GroupScaledown(role.node_group_name, None, None, expected, "absent"))
            continue
        for asg in groups:
            at = scheduled_time(aws.client("autoscaling"), asg)
            out.append(GroupScaledown(role.node_group_name, asg, at, expected, verdict(at, expected)))
    return out


def advice(found: GroupScaledown, *, end: datetime, now: datetime, nodes_up: str, drain_minutes: int) -> tuple[Status, str, str]:
    """(status, detail, fix) for one node group, as preflight and `capacity extend` print it."""
    group = found.node_group
    if found.verdict == "absent":
        return "PASS", f"{group}: not deployed yet (EKS schedules its scale-down when it creates the group)", ""
    if found.verdict == "follows":
        return "PASS", f"{group}: EKS scales it to 0 at {when(found.expected)}, 40 min before the block ends ({when(end)})", ""
    if found.scheduled is None:  # "missing"
        return (
            "WARN",
            f"{group}: no '{ACTION}' on {found.auto_scaling_group}; the kit's own drain (T-{drain_minutes} min) is the only scale-down",
            f"nothing to do for serving; `aws autoscaling describe-scheduled-actions --auto-scaling-group-name {found.auto_scaling_group}` "
            "shows what EKS set",
        )
    if found.verdict == "late":
        return (
            "WARN",
            f"{group}: EKS scales it to 0 at {when(found.scheduled)}, after the block's end - 40 min ({when(found.expected)}); "
            "EC2 terminates block instances at T-30 whatever the group says",
            f"nothing to change: the kit drains serving and scales the groups to 0 at T-{drain_minutes} min, before either",
        )
    early = found.expected - found.scheduled
    gone = "already scaled the group to 0" if found.scheduled <= now else f"scales it to 0 at {when(found.scheduled)}"
    return (
        "WARN",
        f"{group}: EKS {gone}, {span(early)} before the block's end - 40 min ({when(found.expected)}): its scale-down did not "
        "follow the extension",
        f"EKS says not to edit or delete that action; after {when(found.scheduled)} bring the nodes back into the block, which "
        f"stays yours until {when(end)}: {nodes_up}",
    )


def report(plan: Plan, aws: Aws, res: Reservation | None, add: Callable[[str, Status, str, str], None], *, now: datetime) -> None:
    """Preflight's "EKS scale-down" rows: `add(name, status, detail, fix)` once per GPU node group of a block the
    reservation rows found (none for a rehearsal, a placeholder or a reservation preflight could not read)."""
    name = "EKS scale-down"
    if plan.market != "capacity-block" or res is None:
        return
    end = res.end
    if end is None:
        add(name, "WARN", "the reservation reports no end date to compare EKS's scale-down with", "check it: pdkit capacity status")
        return
    nodes_up = f"pdkit nodes up --profile {plan.profile_path}"
    for found in check(aws, plan, end):
        add(name, *advice(found, end=end, now=now, nodes_up=nodes_up, drain_minutes=plan.drain_lead_minutes))
