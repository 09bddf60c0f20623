"""The end-of-block drain as plain data, for the lifecycle automation and runbooks/02-serve.md.

The PodDisruptionBudgets protect serving from voluntary evictions (a `kubectl drain`, a node
upgrade), and with one group per role they allow none. The drain therefore never evicts serving
pods: it first scales every LeaderWorkerSet to zero, which deletes their pods (deletion is not
subject to a PodDisruptionBudget), waits for them to be gone, and only then scales the GPU node
groups to zero, whose nodes then hold no pod a budget covers. At the next block the LeaderWorkerSets
go back to the plan's replicas (pods wait as Pending until the nodes join).
"""

from __future__ import annotations

from dataclasses import dataclass

from pdkit.plan import Plan
from pdkit.serving import names


@dataclass(frozen=True)
class DrainPlan:
    namespace: str
    # LeaderWorkerSet name -> replicas to restore when the next block is delivered.
    leader_worker_sets: dict[str, int]
    node_groups: tuple[str, ...]

    def kubectl_scale_down(self) -> list[list[str]]:
        return [["kubectl", "-n", self.namespace, "scale", f"leaderworkerset/{name}", "--replicas=0"] for name in self.leader_worker_sets]

    def kubectl_wait_gone(self) -> list[list[str]]:
        return [
            ["kubectl", "-n", self.namespace, "wait", "--for=delete", "pod", "-l", f"{names.LWS_NAME_LABEL}={name}", "--timeout=10m"]
            for name in self.leader_worker_sets
        ]

    def kubectl_restore(self) -> list[list[str]]:
        return [
            ["kubectl", "-n", self.namespace, "scale", f"leaderworkerset/{name}", f"--replicas={replicas}"]
            for name, replicas in self.leader_worker_sets.items()
        ]


def drain_plan(plan: Plan) -> DrainPlan:
    return DrainPlan(
        namespace=names.namespace(plan),
        leader_worker_sets={names.lws_name(plan, r.name): r.replicas for r in plan.roles.values()},
        node_groups=tuple(r.node_group_name for r in plan.roles.values()),
    )
