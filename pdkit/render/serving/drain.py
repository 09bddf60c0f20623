"""The end-of-block drain as plain data, for the lifecycle automation and runbooks/02-serve.md.

The PodDisruptionBudgets protect serving from voluntary evictions (a `kubectl drain`, a node
upgrade), and with one group per role they allow none. The drain therefore never evicts serving
pods: it first scales every role of the DisaggregatedSet to zero, which deletes their pods (deletion
is not subject to a PodDisruptionBudget), waits for them to be gone, and only then scales the GPU
node groups to zero, whose nodes then hold no pod a budget covers. At the next block the roles go
back to the plan's replicas (pods wait as Pending until the nodes join).

The scale is a JSON patch of `spec.roles[i].spec.replicas` on the DisaggregatedSet, never of its
LeaderWorkerSets: the controller owns those and puts their replicas back (kubernetes-sigs/lws v0.10.0
site/content/en/docs/examples/disaggregatedset.md, "Scaling replicas within a role"). The patch
changes every role at once, as the CRD requires (replicas all zero or all non-zero), and each
replace is guarded by a `test` of the role's name at that index, so a reordered object is refused
rather than scaled wrongly. A custom resource takes no strategic merge patch, and a merge patch
would replace the whole roles list.

Deleting the pods is also what saves SGLang's warm compile cache for the next block: kubelet runs the
serving container's preStop hook (`python -m pdkit.pods.compile_cache save`, leader only, skipped
when nothing changed) before it stops the container, within the pod's terminationGracePeriodSeconds
(pdkit/render/serving/compile_cache_objects.py SAVE_GRACE_SECONDS), which is shorter than POD_WAIT_MINUTES.
A Job started after the scale-down could not do it: the cache is on the nodes' instance store, and
the node groups go to zero right after.

This module is the one source of what the block lifecycle Lambda (pdkit/functions/block_lifecycle.py)
scales: `lifecycle_environment` hands it the namespace, the pod label, the DisaggregatedSet and its
roles with their plan replicas, and the Kubernetes group its access entry maps to (bound by the Role
that pdkit/render/serving/manifests.py renders).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pdkit.model.plan import Plan
from pdkit.render.serving import names
from pdkit.render.serving.scale import roles_patch

# The access entry of the lifecycle function maps its IAM role to this Kubernetes group; the serving
# objects bind it to a Role that may only patch this deployment's DisaggregatedSet and list pods.
LIFECYCLE_GROUP = "pdkit:block-lifecycle"
# How long the lifecycle waits for serving pods to go before it scales the node groups anyway.
POD_WAIT_MINUTES = 10


@dataclass(frozen=True)
class DrainPlan:
    namespace: str
    disaggregated_set: str
    # Role -> replicas to restore when the next block is delivered, in the DisaggregatedSet's spec.roles order.
    roles: dict[str, int]
    node_groups: tuple[str, ...]

    def _kubectl_patch(self, replicas: dict[str, int]) -> list[str]:
        patch = json.dumps(roles_patch(replicas), separators=(",", ":"))
        return ["kubectl", "-n", self.namespace, "patch", "disaggregatedset", self.disaggregated_set, "--type=json", "-p", patch]

    def kubectl_scale_down(self) -> list[list[str]]:
        return [self._kubectl_patch(dict.fromkeys(self.roles, 0))]

    def kubectl_wait_gone(self) -> list[list[str]]:
        selector = f"{names.DS_NAME_LABEL}={self.disaggregated_set}"
        return [["kubectl", "-n", self.namespace, "wait", "--for=delete", "pod", "-l", selector, f"--timeout={POD_WAIT_MINUTES}m"]]

    def kubectl_restore(self) -> list[list[str]]:
        return [self._kubectl_patch(self.roles)]

    def lifecycle_environment(self) -> dict[str, str]:
        """Environment of the block lifecycle Lambda: what to scale to 0 and restore, how long to wait."""
        serving = {
            "namespace": self.namespace,
            "pod_label": names.DS_NAME_LABEL,
            "disaggregated_set": self.disaggregated_set,
            # A list: the order is the patch's index into spec.roles, which sort_keys would lose in a mapping.
            "roles": [{"name": role, "replicas": count} for role, count in self.roles.items()],
        }
        return {"SERVING": json.dumps(serving, sort_keys=True), "DRAIN_WAIT_SECONDS": str(POD_WAIT_MINUTES * 60)}


def drain_plan(plan: Plan) -> DrainPlan:
    return DrainPlan(
        namespace=names.namespace(plan),
        disaggregated_set=names.disaggregated_set(plan),
        roles={r.name: r.replicas for r in plan.roles.values()},
        node_groups=tuple(r.node_group_name for r in plan.roles.values()),
    )


def lifecycle_node_rbac_name(plan: Plan) -> str:
    """Name of the ClusterRole, its binding and the admission policy that let the lifecycle function label Nodes."""
    return f"{plan.name}-block-lifecycle-nodes"


def lifecycle_rbac_name(plan: Plan) -> str:
    """Name of the Role and RoleBinding that let the lifecycle function scale serving."""
    return f"{plan.name}-block-lifecycle"
