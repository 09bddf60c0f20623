"""The end-of-block drain as plain data, for the lifecycle automation and runbooks/02-serve.md.

The PodDisruptionBudgets protect serving from voluntary evictions (a `kubectl drain`, a node
upgrade), and with one group per role they allow none. The drain therefore never evicts serving
pods: it first scales every LeaderWorkerSet to zero, which deletes their pods (deletion is not
subject to a PodDisruptionBudget), waits for them to be gone, and only then scales the GPU node
groups to zero, whose nodes then hold no pod a budget covers. At the next block the LeaderWorkerSets
go back to the plan's replicas (pods wait as Pending until the nodes join).

Deleting the pods is also what saves SGLang's warm compile cache for the next block: kubelet runs the
serving container's preStop hook (`python -m pdkit.serving.compile_cache save`, leader only, skipped
when nothing changed) before it stops the container, within the pod's terminationGracePeriodSeconds
(pdkit/serving/compile_cache_objects.py SAVE_GRACE_SECONDS), which is shorter than POD_WAIT_MINUTES.
A Job started after the scale-down could not do it: the cache is on the nodes' instance store, and
the node groups go to zero right after.

This module is the one source of what the block lifecycle Lambda (pdkit/functions/block_lifecycle.py)
scales: `lifecycle_environment` hands it the namespace, the pod label and every LeaderWorkerSet with
its plan replicas, and the Kubernetes group its access entry maps to (bound by the Role that
pdkit/serving/manifests.py renders).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pdkit.plan import Plan
from pdkit.serving import names

# The access entry of the lifecycle function maps its IAM role to this Kubernetes group; the serving
# objects bind it to a Role that may only scale this deployment's LeaderWorkerSets and list pods.
LIFECYCLE_GROUP = "pdkit:block-lifecycle"
# How long the lifecycle waits for serving pods to go before it scales the node groups anyway.
POD_WAIT_MINUTES = 10


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
            [
                "kubectl",
                "-n",
                self.namespace,
                "wait",
                "--for=delete",
                "pod",
                "-l",
                f"{names.LWS_NAME_LABEL}={name}",
                f"--timeout={POD_WAIT_MINUTES}m",
            ]
            for name in self.leader_worker_sets
        ]

    def kubectl_restore(self) -> list[list[str]]:
        return [
            ["kubectl", "-n", self.namespace, "scale", f"leaderworkerset/{name}", f"--replicas={replicas}"]
            for name, replicas in self.leader_worker_sets.items()
        ]

    def lifecycle_environment(self) -> dict[str, str]:
        """Environment of the block lifecycle Lambda: what to scale to 0 and restore, how long to wait."""
        serving = {"namespace": self.namespace, "pod_label": names.LWS_NAME_LABEL, "leader_worker_sets": self.leader_worker_sets}
        return {"SERVING": json.dumps(serving, sort_keys=True), "DRAIN_WAIT_SECONDS": str(POD_WAIT_MINUTES * 60)}


def drain_plan(plan: Plan) -> DrainPlan:
    return DrainPlan(
        namespace=names.namespace(plan),
        leader_worker_sets={names.lws_name(plan, r.name): r.replicas for r in plan.roles.values()},
        node_groups=tuple(r.node_group_name for r in plan.roles.values()),
    )


def lifecycle_rbac_name(plan: Plan) -> str:
    """Name of the Role and RoleBinding that let the lifecycle function scale serving."""
    return f"{plan.name}-block-lifecycle"
