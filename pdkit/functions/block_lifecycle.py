"""Capacity Block lifecycle: operators need not be awake at block start or end.

- "Capacity Block Delivered": scale the GPU node groups to their plan sizes, wait (bounded) until the
  planned GPU nodes have joined, give each its role from the instance topology (pdkit/model/placement.py:
  the closest instances serve decode) as the `pdkit/placed-role` label, and only then put every role
  of the DisaggregatedSet back to its plan replicas: a pod already scheduled keeps its node, so the
  labels must be there first. Nodes that are late, or a placement that fails, never hold serving:
  it is restored unlabelled (pods prefer their node group's role) and the notification says so.
- every few minutes: once the block's *current* end date (extensions move it) is within the drain
  lead (T-60 by default), drain: scale every role to 0 through the Kubernetes API, wait
  (bounded) for their pods to go, then scale the GPU node groups to 0. Deleting pods is not subject
  to the serving PodDisruptionBudgets, so they never hold the node drain EKS then does, ahead of
  EC2's T-40 warning, EKS's own scale-down and T-30 termination (pdkit/render/serving/drain.py).
- "Capacity Block Expiration Warning": the same drain, as a backstop.
The node groups are scaled whatever the Kubernetes API answers: a serving step that fails or times
out is reported, never a reason to keep the nodes. Every action is announced on the kit's SNS topic.

Two invocations may overlap (no reserved concurrency serializes them: a duplicate or doubly-spelled
event, a 5-minute tick during a drain's pod wait, the T-40 warning during a drain). Every step
converges instead of double-acting: scaling the roles is a JSON patch to the same replicas,
a node group already at its target is left alone, an update EKS refuses because another one is
running is accepted once the group's desired size is the target, and only the invocation that
changed a node group sends the notification.

"Capacity Block Delivered" fires once, at the start, and EventBridge never replays it: a deploy made after
the block started, or a Delivered event lost, would leave the GPU node groups at 0 for the whole paid block.
So the 5-minute check also scales up (a catch-up: the same scale-up, placement and restore) when the block
is active, outside the drain lead, every GPU node group is at 0 and the kit has neither scaled this block up nor
drained it. Both are read from the reservation itself: a scale-up by this function tags the Capacity Reservation
SCALED_UP_TAG, every drain first tags it DRAINED_TAG, and the check's own DescribeCapacityReservations answer
carries the tags back (no other store, nothing to clean up: the tags live and die with the block, a new block
starts without them). So the catch-up happens at most once per block, like the event it stands in for: node
groups someone scaled to 0 later (`pdkit nodes down` before a `make deploy`, a drain followed by an extension)
stay at 0 until `pdkit nodes up`.

Every handler acts only on its own events: EventBridge's rules filter them, but the function can be invoked
directly and a rule can be widened, so an event whose source, account or reservation id is not this
function's is ignored before any AWS call (see `foreign`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pdkit.functions import kube_api
from pdkit.model import placement, reservation
from pdkit.model.topology import TOPOLOGY_BATCH, GpuNode, block_together
from pdkit.render.serving.scale import roles_patch

# Reported with the placement only: the managed node group EKS labels each node with (as pdkit/render/ami.py) and
# the well-known zone label (https://kubernetes.io/docs/reference/labels-annotations-taints/).
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
ZONE_LABEL = "topology.kubernetes.io/zone"

POLL_SECONDS = 10
# Left on the Capacity Reservation by every drain (EC2 CreateTags; capacity reservations take tags:
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservations-using.html): once it is there,
# the periodic check never scales the block's node groups up again.
DRAINED_TAG = reservation.DRAINED_TAG
# Left by every scale-up this function makes (Delivered or the catch-up): the check then leaves the block to
# whoever scales it next (a drain, `pdkit nodes`).
SCALED_UP_TAG = reservation.SCALED_UP_TAG
# The envelope fields of the events this function is for: EC2's Capacity Block events
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-monitor.html) and the rule's schedule
# (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-run-lambda-schedule.html).
EC2_SOURCE = "aws.ec2"
SCHEDULE_SOURCE = "aws.events"
SCHEDULED = "Scheduled Event"
# Kept free of the pod wait within one invocation: node group calls and the notification.
RESERVE_SECONDS = 90


def handler(
    event: dict[str, Any],
    context: Any,
    *,
    clients: dict[str, Any] | None = None,
    now: datetime | None = None,
    kube: Callable[[], kube_api.KubeApi] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    env = os.environ
    cluster, reservation_id = env["CLUSTER_NAME"], env["RESERVATION_ID"]
    kind = detail_type(event)
    refused = foreign(event, kind, reservation_id=reservation_id, account=env["ACCOUNT_ID"])
    if refused:
        print(f"ignored: {refused}")  # the function's log: nothing was called, nothing is notified
        return {"action": "ignored", "reason": refused}
    c = clients or _clients()
    groups: dict[str, int] = json.loads(env["NODE_GROUPS"])
    serving = Serving(json.loads(env["SERVING"]), kube or (lambda: kube_api.from_env(os.environ)))
    now = now or datetime.now(UTC)
    if kind in reservation.DELIVERED:
        current = _current(c["eks"], cluster, groups)
        changed, placed, restored, text = _scale_up(c, env, groups, current, serving, context, clock, sleep, now)
        if changed or placed != "placed":
            _notify(c["sns"], f"Capacity Block {reservation_id} delivered: scaling {_sizes(groups)} on {cluster}. {text}")
        return {"action": "scale-up", "placement": placed, "serving": restored}
    if kind in reservation.EXPIRING:
        current = _current(c["eks"], cluster, groups)
        if not any(current.values()):
            _notify(c["sns"], f"Capacity Block {reservation_id} expires in 40 minutes: GPU node groups already at 0.")
            return {"action": "scale-down", "serving": "skipped"}
        marked = _mark_drained(c["ec2"], reservation_id, now)
        drained, note = serving.drain(_bounded(float(env["DRAIN_WAIT_SECONDS"]), context), clock, sleep)
        if _apply(c["eks"], cluster, groups, current, up=False):
            _notify(c["sns"], f"Capacity Block {reservation_id} expires in 40 minutes. {note} GPU node groups scaled to 0.{marked}")
        return {"action": "scale-down", "serving": drained}
    found = c["ec2"].describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    if not found or found[0].get("State") != "active" or "EndDate" not in found[0]:
        return {"action": "none"}
    end = found[0]["EndDate"]
    current = _current(c["eks"], cluster, groups)
    if not reservation.drain_due(end, now, int(env["DRAIN_LEAD_MINUTES"])):
        if any(current.values()) or held(found[0]):
            return {"action": "none"}
        # Active, outside the drain lead, every group at 0, never scaled up or drained by this function: the Delivered
        # event was lost or came before this function existed. EventBridge does not replay it: the check does its work.
        changed, placed, restored, text = _scale_up(c, env, groups, current, serving, context, clock, sleep, now)
        if changed:
            _notify(
                c["sns"],
                f"Capacity Block {reservation_id} is active but its GPU node groups were at 0 (deployed after the block started, "
                f"or its Delivered event was lost): scaling {_sizes(groups)} on {cluster}. {text}",
            )
        return {"action": "catch-up", "placement": placed, "serving": restored}
    if not any(current.values()):
        return {"action": "none"}
    marked = _mark_drained(c["ec2"], reservation_id, now)
    drained, note = serving.drain(_bounded(float(env["DRAIN_WAIT_SECONDS"]), context), clock, sleep)
    if _apply(c["eks"], cluster, groups, current, up=False):
        _notify(
            c["sns"], f"Capacity Block {reservation_id} ends at {end.isoformat()}: draining. {note} GPU node groups scale to 0.{marked}"
        )
    return {"action": "drain", "serving": drained}


def detail_type(event: dict[str, Any]) -> str:
    """The event's detail-type. EventBridge spells the field `detail-type`
    (https://docs.aws.amazon.com/eventbridge/latest/ref/overiew-event-structure.html); the EC2 guide's own Capacity
    Block examples print `detail_type` (capacity-blocks-monitor), so both are read."""
    return str(event.get("detail-type", event.get("detail_type", "")))


def foreign(event: dict[str, Any], kind: str, *, reservation_id: str, account: str) -> str | None:
    """Why this event is not this function's to act on, or None. A Capacity Block event must come from EC2 in this
    account and name this function's reservation; a tick must be EventBridge's schedule in this account."""
    if kind in reservation.DELIVERED or kind in reservation.EXPIRING:
        source = EC2_SOURCE
    elif kind == SCHEDULED:
        source = SCHEDULE_SOURCE
    else:
        return f"detail-type {kind!r} is not a Capacity Block event or the schedule"
    if event.get("source") != source:
        return f"{kind!r} from source {event.get('source')!r}, not {source}"
    if str(event.get("account", "")) != account:
        return f"{kind!r} for account {event.get('account')!r}, not this function's {account}"
    if source == EC2_SOURCE:
        named = (event.get("detail") or {}).get("capacity-reservation-id")
        if named != reservation_id:
            return f"{kind!r} for reservation {named!r}, not this function's {reservation_id}"
    return None


def held(found: dict[str, Any]) -> str | None:
    """The marker (tag key) this function left on the reservation when it scaled the block up or drained it; None
    when it has done neither."""
    return next((str(t["Key"]) for t in found.get("Tags", []) if t.get("Key") in (SCALED_UP_TAG, DRAINED_TAG)), None)


def _mark(ec2: Any, reservation_id: str, key: str, now: datetime) -> str:
    """Tag the reservation with one of the markers; '' when done, else a sentence for the notification. A failure
    never holds the scale-up or the drain: the nodes follow the block whatever the tag does."""
    try:
        ec2.create_tags(Resources=[reservation_id], Tags=[{"Key": key, "Value": now.isoformat()}])
    except Exception as exc:
        return f" The reservation could NOT be tagged {key} ({exc}): the periodic check may scale the nodes up again after they go to 0."
    return ""


def _mark_drained(ec2: Any, reservation_id: str, now: datetime) -> str:
    return _mark(ec2, reservation_id, DRAINED_TAG, now)


def _scale_up(
    c: dict[str, Any],
    env: Any,
    groups: dict[str, int],
    current: dict[str, int],
    serving: Serving,
    context: Any,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    now: datetime,
) -> tuple[bool, str, str, str]:
    """Scale the node groups to the plan, place the nodes, restore serving; (changed, placement, serving, sentences)."""
    cluster = env["CLUSTER_NAME"]
    changed = _apply(c["eks"], cluster, groups, current, up=True)
    # Only the invocation that changed a group marks it (as only it notifies); before the placement's long wait.
    marked = _mark(c["ec2"], env["RESERVATION_ID"], SCALED_UP_TAG, now) if changed else ""
    spec = json.loads(env["PLACEMENT"])
    placed, where = place(c["ec2"], serving.connect, spec, _bounded(float(spec["wait_seconds"]), context), clock, sleep)
    restored, note = serving.restore()
    return changed, placed, restored, f"{where} {note}{marked}"


class Serving:
    """The DisaggregatedSet of the plan and its roles (pdkit/render/serving/drain.py hands them over as SERVING)."""

    def __init__(self, spec: dict[str, Any], connect: Callable[[], kube_api.KubeApi]) -> None:
        self.namespace: str = spec["namespace"]
        self.pod_label: str = spec["pod_label"]
        self.name: str = spec["disaggregated_set"]
        self.replicas: dict[str, int] = {r["name"]: int(r["replicas"]) for r in spec["roles"]}
        self.connect = connect

    def drain(self, wait_seconds: float, clock: Callable[[], float], sleep: Callable[[float], None]) -> tuple[str, str]:
        """Scale every role to 0 and wait for their pods; (outcome, sentence for the notification)."""
        try:
            api = self.connect()
            found = api.scale_roles(self.namespace, self.name, dict.fromkeys(self.replicas, 0))
        except Exception as exc:  # the node groups must scale whatever the API does
            return "failed", (
                f"Serving objects NOT scaled to 0: {exc}. PodDisruptionBudgets may hold the node drain until EC2 reclaims "
                f"the instances; scale by hand: {self._kubectl(0)}."
            )
        if not found:
            return "absent", f"No DisaggregatedSet {self.name} in {self.namespace}: nothing to scale."
        scaled = [f"{self.name} {role}" for role in self.replicas]
        deadline = clock() + wait_seconds
        try:
            while True:
                left = api.pods(self.namespace, {self.pod_label: self.name})
                if not left:
                    return "drained", f"Serving scaled to 0 ({', '.join(scaled)}) and its pods are gone."
                remaining = deadline - clock()
                if remaining <= 0:
                    return "timeout", (
                        f"Serving scaled to 0 ({', '.join(scaled)}) but {len(left)} pod(s) of {self.name} were still there after "
                        f"{round(wait_seconds)} s; scaling the node groups anyway."
                    )
                sleep(min(POLL_SECONDS, remaining))
        except Exception as exc:  # scaled, but the wait failed: the nodes still go
            return "unconfirmed", f"Serving scaled to 0 ({', '.join(scaled)}), but its pods could not be listed: {exc}."

    def restore(self) -> tuple[str, str]:
        """Scale every role back to its plan replicas; (outcome, sentence for the notification)."""
        try:
            api = self.connect()
            found = api.scale_roles(self.namespace, self.name, self.replicas)
        except Exception as exc:  # the nodes are coming up either way
            return "failed", f"Serving objects NOT restored: {exc}. Restore by hand: {self._kubectl(None)}."
        if not found:
            return "partial", f"No DisaggregatedSet {self.name} in {self.namespace}; deploy the serving stack."
        return "restored", f"Serving restored to the plan's replicas ({', '.join(f'{n}: {c}' for n, c in self.replicas.items())})."

    def _kubectl(self, replicas: int | None) -> str:
        counts = self.replicas if replicas is None else dict.fromkeys(self.replicas, replicas)
        patch = json.dumps(roles_patch(counts), separators=(",", ":"))
        return f"kubectl -n {self.namespace} patch disaggregatedset {self.name} --type=json -p '{patch}'"


def place(
    ec2: Any,
    connect: Callable[[], kube_api.KubeApi],
    spec: dict[str, Any],
    wait_seconds: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> tuple[str, str]:
    """Wait until every planned GPU node has joined and EC2 reports its topology, then label each Node with
    the role pdkit/model/placement.py chooses; (outcome, sentence for the notification). Never raises: serving
    is restored after this whatever it answers."""
    counts: dict[str, int] = spec["nodes"]
    role_label: str = spec["role_label"]
    selector = f"{role_label} in ({','.join(counts)})"
    planned = sum(counts.values())
    deadline = clock() + wait_seconds
    try:
        api = connect()
        while True:
            joined = [n for n in api.nodes(selector) if n["instance_id"]]
            complete = all(sum(n["labels"].get(role_label) == role for n in joined) >= count for role, count in counts.items())
            paths = _topology(ec2, [n["instance_id"] for n in joined]) if complete else {}
            remaining = deadline - clock()
            # EC2 may not report a just-launched instance's topology yet: wait for it too, then place with what there is.
            if complete and (all(paths.get(n["instance_id"]) for n in joined) or remaining <= 0):
                break
            if remaining <= 0:
                return "late", (
                    f"Only {len(joined)} of {planned} planned GPU nodes joined within {round(wait_seconds)} s: serving is restored "
                    "without placement (each pod prefers its node group's role). Once every node has joined: "
                    "pdkit topology --assign (pods already running keep their nodes until they restart)."
                )
            sleep(min(POLL_SECONDS, remaining))
        nodes = [
            GpuNode(
                instance_id=n["instance_id"],
                role=n["labels"].get(role_label, "?"),
                node_group=n["labels"].get(NODEGROUP_LABEL, "?"),
                state="running",
                availability_zone=n["labels"].get(ZONE_LABEL, "?"),
                reservation_id=None,
                network_nodes=paths.get(n["instance_id"], ()),
            )
            for n in joined
        ]
        chosen = placement.choose(counts, nodes)
        name_of = {n["instance_id"]: n["name"] for n in joined}
        for role, ids in chosen.roles.items():
            for instance_id in ids:
                api.label_node(name_of[instance_id], {placement.PLACED_ROLE_LABEL: role})
    except Exception as exc:  # serving comes back either way; only the preference is lost
        return "failed", (
            f"Placement NOT applied: {exc}. Serving is restored without it (each pod prefers its node group's role); "
            "label the nodes with pdkit topology --assign."
        )
    roles = "; ".join(f"{role} on {', '.join(ids) or 'none'}" for role, ids in chosen.roles.items())
    warnings = "".join(f" WARN: {w}." for w in chosen.warnings)
    _, proof = block_together(nodes)
    return "placed", f"Placement from the instance topology: {roles} (labelled {placement.PLACED_ROLE_LABEL}).{warnings} {proof}"


def _topology(ec2: Any, instance_ids: list[str]) -> dict[str, tuple[str, ...]]:
    """Network nodes of each instance, top layer to bottom; an instance EC2 does not report yet is left out.
    DescribeInstanceTopology pages at 20 instances by default and takes at most 100 ids per call
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-topology-examples.html)."""
    paths: dict[str, tuple[str, ...]] = {}
    for start in range(0, len(instance_ids), TOPOLOGY_BATCH):
        request: dict[str, Any] = {"InstanceIds": instance_ids[start : start + TOPOLOGY_BATCH]}
        while True:
            page = ec2.describe_instance_topology(**request)
            for item in page.get("Instances", []):
                if item.get("NetworkNodes"):
                    paths[item["InstanceId"]] = tuple(item["NetworkNodes"])
            if not page.get("NextToken"):
                break
            request["NextToken"] = page["NextToken"]
    return paths


def _bounded(wait: float, context: Any) -> float:
    """A wait, never longer than this invocation has left after the node group calls."""
    if context is not None:
        wait = min(wait, context.get_remaining_time_in_millis() / 1000 - RESERVE_SECONDS)
    return max(wait, 0.0)


def _current(eks: Any, cluster: str, groups: dict[str, int]) -> dict[str, int]:
    """Each group's desired size now."""
    return {name: _desired(eks, cluster, name) for name in groups}


def _desired(eks: Any, cluster: str, name: str) -> int:
    return int(eks.describe_nodegroup(clusterName=cluster, nodegroupName=name)["nodegroup"]["scalingConfig"].get("desiredSize", 0))


def _apply(eks: Any, cluster: str, groups: dict[str, int], current: dict[str, int], *, up: bool) -> bool:
    """Set every group's size; True when this invocation changed one. Desired size is owned here and by `pdkit nodes`."""
    changed = False
    for name, size in groups.items():
        desired = size if up else 0
        if current.get(name) == desired:
            continue
        try:
            eks.update_nodegroup_config(
                clusterName=cluster, nodegroupName=name, scalingConfig={"minSize": 0, "maxSize": max(size, 1), "desiredSize": desired}
            )
        except eks.exceptions.ClientError:
            # An overlapping invocation got there first (EKS answers ResourceInUseException while its update
            # runs): converged is done. Anything else is raised, and Lambda retries the asynchronous event.
            if _desired(eks, cluster, name) != desired:
                raise
            continue
        changed = True
    return changed


def _sizes(groups: dict[str, int]) -> str:
    return ", ".join(f"{name} to {size}" for name, size in groups.items())


def _notify(sns: Any, message: str) -> None:
    sns.publish(TopicArn=os.environ["TOPIC_ARN"], Subject="Capacity Block lifecycle", Message=message)


def _clients() -> dict[str, Any]:
    import boto3

    return {name: boto3.client(name) for name in ("ec2", "eks", "sns")}
