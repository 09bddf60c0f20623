"""Which GPU node serves which role, chosen from the block's network topology after launch.

The GPU node groups are fixed per role (stacks/capacity_stack.py), but EC2 decides which of the
block's instances each group gets, so the decode pair can land under two bottom network nodes
while a prefill node shares one with a decode node. A hard pod affinity on
`topology.k8s.aws/network-node-layer-3` (the labels EKS puts on GPU nodes:
https://docs.aws.amazon.com/eks/latest/userguide/ml-workload-topology.html) could then only choose
among decode's own two nodes, and leave decode Pending inside the paid block when they sit apart.

So the role follows the topology instead: all GPU nodes are identical (same image, same launch
template contents; only the node-group label and taint differ), every serving pod tolerates every
GPU role's taint, and `assign` picks the decode set whose instances are closest in the
DescribeInstanceTopology answer (instances under the same bottom network node are the closest:
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/how-ec2-instance-topology-works.html).
The result is written on each Node as `pdkit/placed-role`, which the serving pods only *prefer*
(pdkit/render/serving/manifests.py): any assignment, or none at all, still schedules every pod.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import combinations
from math import comb
from typing import TYPE_CHECKING, Any

from pdkit.model.topology import GpuNode, network_nodes_between

if TYPE_CHECKING:  # standard library only at run time: the block lifecycle Lambda ships this module
    from pdkit.model.plan import Plan

PLACED_ROLE_LABEL = "pdkit/placed-role"
# EKS labels each GPU node with its network nodes; layer 4 exists only on four-layer instance types
# and is then the bottom (https://docs.aws.amazon.com/eks/latest/userguide/ml-workload-topology.html).
LAYER_LABELS = tuple(f"topology.k8s.aws/network-node-layer-{n}" for n in (4, 3))
# A pair EC2 reports no topology for counts as farther apart than any reported pair.
UNKNOWN_DISTANCE = 99
# After the scale-up at block delivery, the lifecycle Lambda waits this long for every planned GPU node to
# join and for EC2 to report its topology, then labels and restores serving; past it, serving is restored
# unlabelled (pods prefer their node group's role). Fits the function's 15 min with its reserve.
JOIN_WAIT_MINUTES = 12
# Above this many decode subsets the search keeps the node-group roles (no block of the kit gets near).
MAX_CANDIDATES = 20_000


@dataclass
class Placement:
    roles: dict[str, list[str]]
    decode_shares_bottom_network_node: bool
    moved: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def role_of(self, instance_id: str) -> str | None:
        return next((role for role, ids in self.roles.items() if instance_id in ids), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "roles": self.roles,
            "decode_shares_bottom_network_node": self.decode_shares_bottom_network_node,
            "moved_from_node_group_role": self.moved,
            "warnings": self.warnings,
        }


def _spread(nodes: tuple[GpuNode, ...]) -> int:
    """Network nodes on the longest path inside the set (1 = one shared bottom node)."""
    return max((network_nodes_between(a, b) or UNKNOWN_DISTANCE for a, b in combinations(nodes, 2)), default=1)


def assign(plan: Plan, nodes: list[GpuNode]) -> Placement:
    """Decode gets the closest set of `plan.decode.nodes` instances, prefill the rest; ties keep node-group roles."""
    return choose(node_counts(plan), nodes)


def node_counts(plan: Plan) -> dict[str, int]:
    """GPU nodes per role, in the plan's role order: all `choose` needs of the plan."""
    return {name: role.nodes for name, role in plan.roles.items()}


def choose(counts: dict[str, int], nodes: list[GpuNode]) -> Placement:
    """`assign` from the node count of each role, so the block lifecycle Lambda runs it without the plan.

    Always a full assignment of the nodes found: when no set shares a bottom node, decode gets the
    closest one there is and a warning says so; nothing is ever left without a role."""
    by_group = {name: [n.instance_id for n in nodes if n.role == name] for name in counts}
    want = counts["decode"]
    planned = sum(counts.values())
    if len(nodes) != planned or len(nodes) < want:
        return Placement(
            roles=by_group,
            decode_shares_bottom_network_node=_spread(tuple(n for n in nodes if n.role == "decode")) == 1,
            warnings=[f"{len(nodes)} of {planned} planned GPU nodes found: roles stay with the node groups until all have joined"],
        )
    ordered = sorted(nodes, key=lambda n: n.instance_id)
    candidates: Iterator[tuple[GpuNode, ...]] = combinations(ordered, want)
    if comb(len(ordered), want) > MAX_CANDIDATES:
        candidates = iter([tuple(n for n in ordered if n.role == "decode")])
    best = min(candidates, key=lambda c: (_spread(c), sum(n.role != "decode" for n in c), [n.instance_id for n in c]))
    decode = {n.instance_id for n in best}
    roles = {name: sorted(n.instance_id for n in nodes if (n.instance_id in decode) == (name == "decode")) for name in counts}
    moved = sorted(n.instance_id for n in nodes if n.role != ("decode" if n.instance_id in decode else "prefill"))
    spread = _spread(best)
    placement = Placement(roles=roles, decode_shares_bottom_network_node=spread == 1, moved=moved)
    if spread > 1:
        apart = "with no topology reported" if spread >= UNKNOWN_DISTANCE else f"{spread} network nodes apart"
        placement.warnings.append(
            f"no {want} instances of the block share a bottom network node: decode gets the closest {want} ({apart}); "
            "every pod still schedules (the role is only preferred)"
        )
    return placement


def lifecycle_environment(plan: Plan) -> dict[str, str]:
    """What the block lifecycle Lambda needs to place the nodes: the node-group role label, nodes per role, the wait."""
    from pdkit.model.plan import ROLE_LABEL

    spec = {"role_label": ROLE_LABEL, "nodes": node_counts(plan), "wait_seconds": JOIN_WAIT_MINUTES * 60}
    return {"PLACEMENT": json.dumps(spec)}


def bottom_network_node(labels: dict[str, str]) -> str | None:
    """The node's bottom network node from the EKS topology labels, None when EKS has not labelled it."""
    return next((labels[key] for key in LAYER_LABELS if labels.get(key)), None)
