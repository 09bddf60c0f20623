"""Where the GPU nodes sit in the EC2 network, and whether the latency-critical decode nodes sit together.

DescribeInstanceTopology returns, per instance, its network nodes from the top layer down to the
bottom node it hangs off; instances under the same bottom node are the closest
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/how-ec2-instance-topology-works.html).
Decode runs expert parallelism across its nodes (150 dispatch/combine messages per token for
GLM-5.1), so every extra network layer between decode nodes is paid on every token.

Finding the instances: by the EKS managed node group tags `eks:cluster-name` and
`eks:nodegroup-name`, which EKS puts on every instance of a managed node group (custom launch
template or not). The tag names the role directly, and it keeps finding the nodes after the profile
moves to a new reservation id; each instance's CapacityReservationId is then compared with the
profile so a node outside the block is reported, not silently mixed in.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the block lifecycle Lambda ships this module (via placement.py) without the plan's pydantic
    from pdkit.model.plan import Plan

NODEGROUP_TAG = "eks:nodegroup-name"
CLUSTER_TAG = "eks:cluster-name"
# DescribeInstanceTopology accepts at most 100 instance ids per call.
TOPOLOGY_BATCH = 100


@dataclass(frozen=True)
class GpuNode:
    instance_id: str
    role: str
    node_group: str
    state: str
    availability_zone: str
    reservation_id: str | None
    network_nodes: tuple[str, ...] = ()

    @property
    def bottom(self) -> str | None:
        return self.network_nodes[-1] if self.network_nodes else None


@dataclass
class Report:
    nodes: list[GpuNode]
    groups: dict[str, list[str]]
    hops: dict[str, dict[str, int | None]]
    decode_together: bool | None = None
    # The block's own placement, checked (block_together): all instances under one bottom network node.
    block_together: bool | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": [asdict(n) | {"bottom_network_node": n.bottom} for n in self.nodes],
            "groups_by_bottom_network_node": self.groups,
            "network_nodes_between": self.hops,
            "decode_shares_bottom_network_node": self.decode_together,
            "block_shares_bottom_network_node": self.block_together,
            "warnings": self.warnings,
        }


def instance_filters(plan: Plan) -> list[dict[str, Any]]:
    return [
        {"Name": f"tag:{CLUSTER_TAG}", "Values": [plan.cluster_name]},
        {"Name": f"tag:{NODEGROUP_TAG}", "Values": [r.node_group_name for r in plan.roles.values()]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]},
    ]


def find_gpu_nodes(ec2: Any, plan: Plan) -> list[GpuNode]:
    role_of = {r.node_group_name: name for name, r in plan.roles.items()}
    nodes: list[GpuNode] = []
    token: str | None = None
    while True:
        page = ec2.describe_instances(Filters=instance_filters(plan), **({"NextToken": token} if token else {}))
        for reservation in page.get("Reservations", []):
            for raw in reservation.get("Instances", []):
                group = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}.get(NODEGROUP_TAG, "?")
                nodes.append(
                    GpuNode(
                        instance_id=raw["InstanceId"],
                        role=role_of.get(group, "?"),
                        node_group=group,
                        state=raw.get("State", {}).get("Name", "?"),
                        availability_zone=raw.get("Placement", {}).get("AvailabilityZone", "?"),
                        reservation_id=raw.get("CapacityReservationId"),
                    )
                )
        token = page.get("NextToken")
        if not token:
            return sorted(nodes, key=lambda n: (n.role, n.instance_id))


def with_topology(ec2: Any, nodes: list[GpuNode]) -> list[GpuNode]:
    paths: dict[str, tuple[str, ...]] = {}
    ids = [n.instance_id for n in nodes]
    for start in range(0, len(ids), TOPOLOGY_BATCH):
        # No MaxResults here: EC2 refuses it together with InstanceIds.
        request: dict[str, Any] = {"InstanceIds": ids[start : start + TOPOLOGY_BATCH]}
        while True:
            page = ec2.describe_instance_topology(**request)
            for item in page.get("Instances", []):
                paths[item["InstanceId"]] = tuple(item.get("NetworkNodes", []))
            if not page.get("NextToken"):
                break
            request["NextToken"] = page["NextToken"]
    return [GpuNode(**{**asdict(n), "network_nodes": paths.get(n.instance_id, ())}) for n in nodes]


def network_nodes_between(a: GpuNode, b: GpuNode) -> int | None:
    """Network nodes on the path between two instances: 1 under the same bottom node, 3 one layer up, 5 two layers up."""
    if not a.network_nodes or not b.network_nodes or len(a.network_nodes) != len(b.network_nodes):
        return None
    shared = 0
    for x, y in zip(a.network_nodes, b.network_nodes, strict=True):
        if x != y:
            break
        shared += 1
    return 2 * (len(a.network_nodes) - shared) + 1


def block_together(nodes: list[GpuNode]) -> tuple[bool | None, str]:
    """The delivery's proof of the block's own placement: do all its instances hang off one bottom network node?
    (True/False/None when EC2 reported no topology, a sentence for the notification.)

    A Capacity Block's instances are placed close together by EC2 ("automatically placed close together inside EC2
    UltraClusters", https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityBlock.html), which is why
    the kit asks for no placement group on a block (README, "Placement group"); this is where that claim is checked, from
    DescribeInstanceTopology, the way the seed checked its cluster placement group: one bottom network node."""
    reported = [n for n in nodes if n.bottom]
    if not reported:
        return None, "Block placement NOT checked: EC2 reported no instance topology yet (run pdkit topology once the nodes run)."
    bottoms = sorted({n.bottom for n in reported if n.bottom})
    unreported = len(nodes) - len(reported)
    missing = f" ({unreported} instance(s) without topology yet)" if unreported else ""
    if len(bottoms) == 1:
        return True, f"Block placement: all {len(reported)} instances under one bottom network node ({bottoms[0]}){missing}."
    return False, (
        f"WARN: block placement: the {len(reported)} instances sit under {len(bottoms)} bottom network nodes "
        f"({', '.join(bottoms)}){missing}; decode gets the closest ones (pdkit topology shows the distances)."
    )


def analyse(plan: Plan, nodes: list[GpuNode]) -> Report:
    groups: dict[str, list[str]] = defaultdict(list)
    for n in nodes:
        groups[n.bottom or "(not reported)"].append(n.instance_id)
    hops = {a.instance_id: {b.instance_id: network_nodes_between(a, b) for b in nodes if b is not a} for a in nodes}
    report = Report(nodes=nodes, groups=dict(groups), hops=hops, block_together=block_together(nodes)[0])
    for n in nodes:
        if n.reservation_id != plan.reservation_id:
            report.warnings.append(
                f"{n.instance_id} ({n.role}) runs on {n.reservation_id or 'no reservation'}, not the profile's {plan.reservation_id}"
            )
    missing = [n.instance_id for n in nodes if not n.network_nodes]
    if missing:
        report.warnings.append(
            f"EC2 reports no topology yet for {', '.join(missing)} (just launched?); run pdkit topology again in a minute"
        )
    for name, role in plan.roles.items():
        placed = [n for n in nodes if n.role == name]
        if len(placed) != role.nodes:
            report.warnings.append(f"{name}: {len(placed)} of {role.nodes} planned nodes running")
    decode = [n for n in nodes if n.role == "decode" and n.bottom]
    bottoms = {n.bottom for n in decode}
    report.decode_together = len(bottoms) == 1 if decode else None
    if len(bottoms) > 1:
        worst = max((network_nodes_between(a, b) or 0) for a in decode for b in decode if a is not b)
        pairing = " (with several decode replicas, LeaderWorkerSet does not pair nodes by network node)" if plan.decode.replicas > 1 else ""
        report.warnings.append(
            f"decode nodes do not share the lowest network layer: they sit under {len(bottoms)} bottom nodes, up to {worst} network nodes apart, "
            f"and the EP{plan.decode.ep} all-to-all pays that on every token{pairing}. "
            "The node groups are EC2's choice; the placement below gives decode the closest instances the block has"
        )
    return report
