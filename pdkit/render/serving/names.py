"""Names and labels of the serving objects, shared by the renderers so that the router's selectors,
the PodDisruptionBudgets and the DisaggregatedSet's pods can never disagree."""

from __future__ import annotations

from pdkit.model.plan import Plan

COMPONENT_LABEL = "app.kubernetes.io/component"
NAME_LABEL = "app.kubernetes.io/name"
PART_OF_LABEL = "app.kubernetes.io/part-of"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
# The DisaggregatedSet controller stamps these on the LeaderWorkerSets it creates and on their pods
# (kubernetes-sigs/lws v0.10.0 api/disaggregatedset/v1/disaggregatedset_types.go, lws_manager.go).
DS_NAME_LABEL = "disaggregatedset.x-k8s.io/name"
DS_ROLE_LABEL = "disaggregatedset.x-k8s.io/role"
# smg reads a prefill pod's PD bootstrap port from this annotation when it discovers workers by label
# (smg 1.13.0 router_args.py: bootstrap_port_annotation = "sglang.ai/bootstrap-port").
BOOTSTRAP_PORT_ANNOTATION = "sglang.ai/bootstrap-port"


def namespace(plan: Plan) -> str:
    return plan.namespace


def disaggregated_set(plan: Plan) -> str:
    """The one workload object. Its LeaderWorkerSets are `<name>-<slice>-<revision hash>-<role>`
    (DNS-1035: LWS names its headless Service after them), so nothing may depend on their names."""
    return f"{plan.name}-pd"


def role_object(plan: Plan, role: str) -> str:
    """Name of the per-role objects the kit renders itself (PodDisruptionBudgets)."""
    return f"{plan.name}-{role}"


def role_selector(plan: Plan, role: str) -> dict[str, str]:
    """Every pod of one role of this deployment, whatever LeaderWorkerSet revision made it."""
    return {DS_NAME_LABEL: disaggregated_set(plan), DS_ROLE_LABEL: role}


def leader_selector(plan: Plan, role: str) -> dict[str, str]:
    """The leader pod of each group: the only one that serves SGLang's HTTP API."""
    return {**role_selector(plan, role), LWS_WORKER_INDEX_LABEL: "0"}


def router_name(plan: Plan) -> str:
    return f"{plan.name}-router"


def service_account(plan: Plan, purpose: str) -> str:
    return f"{plan.name}-{purpose}"


def config_map(plan: Plan) -> str:
    return f"{plan.name}-fabric-env"


def weights_claim(plan: Plan) -> str:
    return f"{plan.name}-weights"


def common_labels(plan: Plan, component: str) -> dict[str, str]:
    return {
        NAME_LABEL: "pdkit",
        PART_OF_LABEL: plan.name,
        COMPONENT_LABEL: component,
        MANAGED_BY_LABEL: "pdkit",
    }
