"""The serving pods' node placement: the role the topology gave a node is preferred, never required.

The GPU node groups are fixed per role and EC2 chooses which of the block's instances each group
gets, so a required rule on the role or on a network-node label could match no node of the block
and leave pods Pending in the paid block (pdkit/model/placement.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.model.placement import PLACED_ROLE_LABEL
from pdkit.model.plan import ROLE_LABEL
from pdkit.render.serving import inputs, manifests

PROFILES = profile_files.available_profiles()


def load(name: str) -> plan_mod.Plan:
    prof, path = profile_files.load(name)
    return plan_mod.build(prof, profile_path=path)


def pod_specs(obj: Any) -> list[dict[str, Any]]:
    """Every pod spec (a mapping with `containers`) anywhere in a rendered object, whatever wraps it."""
    found: list[dict[str, Any]] = []
    if isinstance(obj, dict):
        if "containers" in obj:
            found.append(obj)
        for value in obj.values():
            found.extend(pod_specs(value))
    elif isinstance(obj, list):
        for value in obj:
            found.extend(pod_specs(value))
    return found


@pytest.mark.parametrize("name", PROFILES)
@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_serving_pods_prefer_their_placed_role_and_require_nothing_a_gpu_node_lacks(name, role):
    """Kubernetes API, NodeAffinity: with preferredDuringSchedulingIgnoredDuringExecution "the scheduler will prefer
    ... but it may choose a node that violates one or more of the expressions", while a required term or a
    nodeSelector key leaves the pod unschedulable on every node without it. The only hard keys left are ones every
    GPU node group carries (stacks/capacity_stack.py: plan.gpu_node_labels, and the instance type)."""
    plan = load(name)
    spec = manifests.sglang_pod_template(plan, plan.roles[role], inputs.from_plan(plan))["spec"]
    assert set(spec["nodeSelector"]) == {*plan.gpu_node_labels, "node.kubernetes.io/instance-type"}
    node_affinity = spec["affinity"]["nodeAffinity"]
    assert set(node_affinity) == {"preferredDuringSchedulingIgnoredDuringExecution"}
    weights = {
        term["preference"]["matchExpressions"][0]["key"]: (term["weight"], term["preference"]["matchExpressions"][0]["values"])
        for term in node_affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    }
    assert weights[PLACED_ROLE_LABEL] == (100, [role])
    # The topology's choice outranks the node group EC2 happened to launch the instance in.
    assert weights[ROLE_LABEL][0] < weights[PLACED_ROLE_LABEL][0]
    assert weights[ROLE_LABEL][1] == [role]


@pytest.mark.parametrize("name", PROFILES)
def test_serving_pods_tolerate_every_gpu_roles_taint(name):
    """Kubernetes taints: a NoSchedule taint repels every pod without a matching toleration, so a pod that tolerated
    only its node group's taint could never follow the topology onto a node of the other group."""
    plan = load(name)
    taints = [
        {"key": r.taint["key"], "operator": "Equal", "value": r.taint["value"], "effect": r.taint["effect"]} for r in plan.roles.values()
    ]
    for role in plan.roles.values():
        spec = manifests.sglang_pod_template(plan, role, inputs.from_plan(plan))["spec"]
        assert all(t in spec["tolerations"] for t in taints)


@pytest.mark.parametrize("name", PROFILES)
def test_no_rendered_pod_requires_a_role_or_network_node(name):
    """Whatever object wraps the serving pods (LeaderWorkerSet, DisaggregatedSet), none may require a role label or an
    EKS network-node label (https://docs.aws.amazon.com/eks/latest/userguide/ml-workload-topology.html): the block's
    actual instances might not satisfy it."""
    plan = load(name)
    specs = [s for obj in manifests.render(plan, inputs.from_plan(plan)) for s in pod_specs(obj)]
    gpu = [s for s in specs if any(t.get("key") == ROLE_LABEL for t in s.get("tolerations", []))]
    assert gpu, "no serving pod found in the rendered objects"
    for spec in gpu:
        assert ROLE_LABEL not in spec.get("nodeSelector", {})
        assert PLACED_ROLE_LABEL not in spec.get("nodeSelector", {})
        required = spec.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        assert required is None
