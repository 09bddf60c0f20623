"""Scaling the GPU node groups at run time: the only place besides the block lifecycle rule that sets their size.

The CloudFormation template keeps desired size at 0 (a redeploy must never shrink a running
block), so `pdkit nodes up|down` changes it with UpdateNodegroupConfig. Before the block is active
EKS accepts a non-zero size, but the Auto Scaling group can only log launch errors until the start
(https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html), so `up` refuses then
and says when the block starts. An on-demand rehearsal has no block: its groups scale straight away.
EKS also does not check that launched instances join the cluster: `pdkit status` does.
"""

from __future__ import annotations

import shlex
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pdkit.console import span, when
from pdkit.errors import KitError
from pdkit.model import placement
from pdkit.model import reservation as reservation_rules
from pdkit.model.plan import Plan, RolePlan
from pdkit.model.topology import CLUSTER_TAG, NODEGROUP_TAG
from pdkit.ops import capacity
from pdkit.ops.aws_errors import error_code
from pdkit.ops.capacity import Reservation

POLL_SECONDS = 15.0
# How long `up` waits for the nodes to join Kubernetes before it restores serving without placement.
JOIN_POLLS = int(placement.JOIN_WAIT_MINUTES * 60 / POLL_SECONDS)  # as long as the block lifecycle function waits
LIVE_STATES = ("pending", "running", "stopping", "shutting-down")


def sleep(seconds: float) -> None:
    """Between polls; tests replace it."""
    time.sleep(seconds)


@dataclass(frozen=True)
class Scaling:
    min: int
    max: int
    desired: int

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Scaling:
        return cls(min=int(raw.get("minSize", 0)), max=int(raw.get("maxSize", 0)), desired=int(raw.get("desiredSize", 0)))

    def to_api(self) -> dict[str, int]:
        return {"minSize": self.min, "maxSize": self.max, "desiredSize": self.desired}


def target(role: RolePlan, *, up: bool) -> Scaling:
    # EKS requires maxSize >= 1, so "down" keeps max at the plan's size and only zeroes desired.
    return Scaling(min=0, max=max(role.nodes, 1), desired=role.nodes if up else 0)


def needs_block(plan: Plan) -> bool:
    """Only GPU nodes bought as a Capacity Block wait for one; on-demand instances launch whenever EC2 has them."""
    return plan.market == "capacity-block"


def launch_hint(plan: Plan) -> str:
    if needs_block(plan):
        return "otherwise check the block with `pdkit capacity status`"
    # On demand, EC2 answers a shortfall with InsufficientInstanceCapacity or, past the quota, VcpuLimitExceeded
    # (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/troubleshooting-launch.html).
    return f"otherwise on-demand {plan.instance.name} may be short in {plan.block_az} or past your vCPU quota: `pdkit preflight` shows the quota"


def down_note(plan: Plan) -> str:
    if needs_block(plan):
        return "The block was paid upfront and keeps running until its end;"
    return "On-demand instances stop billing as they terminate;"


def require_block_for_up(res: Reservation, *, now: datetime, drain_minutes: int, need: int | None = None) -> None:
    """Refuse `up` unless the block is active, ends after the kit's drain point and holds the `need` instances the
    node groups ask for (the count read once, in pdkit/model/reservation.py)."""
    if res.state == "scheduled":
        starts = res.starts_in(now)
        eta = f" (in {span(starts)})" if starts else ""
        raise KitError(
            f"the block {res.id} is scheduled and starts {when(res.start)}{eta}; until then the node groups could only fail to launch. "
            "Fix: run `pdkit nodes up` after the start (the kit's lifecycle rule also scales up when EC2 delivers the block)"
        )
    if res.state != "active":
        rule = reservation_rules.state_rule(res.state)
        raise KitError(f"the block {res.id} is {res.state} ({rule.meaning}), so no instance can launch into it. Fix: {rule.todo}")
    left = res.time_left(now)
    if left is not None and left <= timedelta(minutes=drain_minutes):
        raise KitError(
            f"the block {res.id} ends {when(res.end)}, {span(left)} from now, inside the kit's {drain_minutes} min drain window; "
            "nodes would be drained as they start. Fix: `pdkit capacity extend`, or buy a new block"
        )
    if need is not None and res.count.instances != need:
        # A smaller block leaves the Auto Scaling groups retrying the launches it cannot hold, inside the paid window.
        note = f" (EC2 reports {res.count.note})" if res.count.note else ""
        raise KitError(
            f"the block {res.id} has {res.count.describe()}{note}, the node groups would ask for {need}. "
            "Fix: make the profile's roles and capacity.instance_count match the block (`pdkit preflight` shows the count)"
        )


def describe(eks: Any, plan: Plan, role: RolePlan) -> dict[str, Any]:
    try:
        group: dict[str, Any] = eks.describe_nodegroup(clusterName=plan.cluster_name, nodegroupName=role.node_group_name)["nodegroup"]
    except Exception as err:
        if error_code(err) != "ResourceNotFoundException":
            raise
        raise KitError(
            f"node group {role.node_group_name} (or cluster {plan.cluster_name}) does not exist in this region. "
            "Fix: deploy the cluster first (`make deploy`), or check --region / --profile"
        ) from None
    return group


def request(eks: Any, plan: Plan, role: RolePlan, scaling: Scaling) -> str:
    try:
        reply = eks.update_nodegroup_config(
            clusterName=plan.cluster_name, nodegroupName=role.node_group_name, scalingConfig=scaling.to_api()
        )
    except Exception as err:
        if error_code(err) != "ResourceInUseException":
            raise
        raise KitError(
            f"another update of {role.node_group_name} is still running. Fix: wait for it "
            f"(`aws eks list-updates --name {plan.cluster_name} --nodegroup-name {role.node_group_name}`), then run this again"
        ) from None
    return str(reply["update"]["id"])


def wait_update(eks: Any, plan: Plan, role: RolePlan, update_id: str, *, polls: int) -> None:
    for _ in range(polls):
        update = eks.describe_update(name=plan.cluster_name, updateId=update_id, nodegroupName=role.node_group_name)["update"]
        status = update.get("status")
        if status == "Successful":
            return
        if status in ("Failed", "Cancelled"):
            reasons = "; ".join(e.get("errorMessage", e.get("errorCode", "?")) for e in update.get("errors", [])) or "no reason given"
            raise KitError(
                f"EKS update {update_id} of {role.node_group_name} {status.lower()}: {reasons}. "
                f"Fix: `aws eks describe-nodegroup --cluster-name {plan.cluster_name} --nodegroup-name {role.node_group_name}` shows its health"
            )
        sleep(POLL_SECONDS)
    raise KitError(f"EKS update {update_id} of {role.node_group_name} is still in progress. Fix: check it later with `pdkit status`")


def live_instances(ec2: Any, plan: Plan, role: RolePlan) -> dict[str, int]:
    """Instance counts per state for the node group (by the EKS managed node group tags)."""
    filters = [
        {"Name": f"tag:{CLUSTER_TAG}", "Values": [plan.cluster_name]},
        {"Name": f"tag:{NODEGROUP_TAG}", "Values": [role.node_group_name]},
        {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
    ]
    return dict(Counter(raw.get("State", {}).get("Name", "?") for raw in capacity.described_instances(ec2, filters)))


def wait_instances(
    ec2: Any, plan: Plan, targets: dict[str, Scaling], *, polls: int, report: Callable[[str, int, int], None]
) -> dict[str, dict[str, int]]:
    """Poll until each group runs exactly its desired count (and nothing is still starting or stopping)."""
    counts: dict[str, dict[str, int]] = {}
    for _ in range(polls):
        done = True
        for name, scaling in targets.items():
            counts[name] = live_instances(ec2, plan, plan.roles[name])
            running = counts[name].get("running", 0)
            report(name, running, scaling.desired)
            if running != scaling.desired or sum(counts[name].values()) != running:
                done = False
        if done:
            return counts
        sleep(POLL_SECONDS)
    raise TimeoutError(counts)


def health_issues(group: dict[str, Any]) -> list[str]:
    return [f"{i.get('code', '?')}: {i.get('message', '')}" for i in group.get("health", {}).get("issues", [])]


def scale_serving(plan: Plan, connect: Callable[[], Any], *, up: bool) -> list[str]:
    """Restore (up) or empty (down) the DisaggregatedSet's roles, as the block lifecycle function does: scaling
    to 0 before the nodes go means no PodDisruptionBudget can hold the node drain. Its controller reverts a
    scaled LeaderWorkerSet, so the roles' replicas on the DisaggregatedSet are what changes. Returns lines
    for the operator; an unreachable API is reported with the kubectl commands, never raised (the node
    groups matter more)."""
    from pdkit.ops.kube import KubeUnreachable
    from pdkit.render.serving.drain import drain_plan

    drain = drain_plan(plan)
    target = drain.roles if up else dict.fromkeys(drain.roles, 0)
    where = f"{drain.namespace}/{drain.disaggregated_set}"
    try:
        if not connect().scale_roles(drain.namespace, drain.disaggregated_set, target):
            return [f"{where}: not deployed, nothing to scale"]
        return [f"{where}: replicas " + ", ".join(f"{role} {count}" for role, count in target.items())]
    except KubeUnreachable as err:
        commands = drain.kubectl_restore() if up else drain.kubectl_scale_down()
        return [f"serving NOT {'restored' if up else 'scaled to 0'}: {err}", "run through the SSM access path:"] + [
            "  " + shlex.join(c) for c in commands
        ]


def place_nodes(ec2: Any, plan: Plan, connect: Callable[[], Any], *, polls: int) -> list[str]:
    """Once every planned GPU node has joined Kubernetes, label each with the role the instance topology gives it
    (pdkit/model/placement.py), as the block lifecycle function does at delivery. Run before serving is restored: a pod
    already scheduled keeps its node. Returns lines for the operator; placement never fails the command (a
    problem is a WARN line and serving comes back unlabelled, each pod preferring its node group's role)."""
    from pdkit.model import topology

    later = "once every node has joined: pdkit topology --assign (pods already running keep their nodes until they restart)"
    try:
        cluster = connect()
        for attempt in range(polls):
            by_instance = {n.instance_id: n.name for n in cluster.gpu_nodes() if n.instance_id}
            if len(by_instance) >= plan.instance_count:
                break
            if attempt == polls - 1:
                return [f"WARN: {len(by_instance)} of {plan.instance_count} GPU nodes joined Kubernetes in time: no placement; {later}"]
            sleep(POLL_SECONDS)
        found = topology.with_topology(ec2, topology.find_gpu_nodes(ec2, plan))
        chosen = placement.assign(plan, found)
        missing = [i for ids in chosen.roles.values() for i in ids if i not in by_instance]
        if missing:
            return [f"WARN: {', '.join(missing)} not registered in Kubernetes: no placement; {later}"]
        for role, ids in chosen.roles.items():
            for instance_id in ids:
                cluster.label_node(by_instance[instance_id], {placement.PLACED_ROLE_LABEL: role})
    except Exception as err:  # placement only steers scheduling: never a reason to leave serving down
        return [f"WARN: placement not applied ({str(err).splitlines()[0][:200] or type(err).__name__}); {later}"]
    roles = "; ".join(f"{role}: {', '.join(ids) or 'none'}" for role, ids in chosen.roles.items())
    return [f"WARN: {w}" for w in chosen.warnings] + [f"Placement from the topology: {roles} (labelled {placement.PLACED_ROLE_LABEL})."]


def mark_block(ec2: Any, reservation_id: str, *, up: bool, now: datetime) -> str | None:
    """Tag the block as scaled on purpose (reservation.SCALED_UP_TAG / DRAINED_TAG), so the lifecycle function's
    catch-up never scales it back up after `pdkit nodes down` (the runbooks' nodes down, make deploy, nodes up keeps the
    groups at 0 while EKS updates them, as EKS requires for Capacity Block node groups). The warning when it cannot."""
    key = reservation_rules.SCALED_UP_TAG if up else reservation_rules.DRAINED_TAG
    try:
        ec2.create_tags(Resources=[reservation_id], Tags=[{"Key": key, "Value": now.isoformat()}])
    except Exception as err:
        from pdkit.ops.aws_errors import is_denied

        if not is_denied(err):
            raise
        return (
            f"Warning: could not tag {reservation_id} {key} (ec2:CreateTags denied): the block lifecycle function's "
            "5-minute check may scale the node groups back up while the block is active and they are at 0. "
            "Fix: allow ec2:CreateTags on the reservation for your role (runbooks/00-capacity-block.md, permissions)"
        )
    return None
