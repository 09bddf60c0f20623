"""Names of the serving objects, shared by the renderers so that a router URL and the
LeaderWorkerSet it points at can never disagree."""

from __future__ import annotations

from pdkit.plan import Plan

COMPONENT_LABEL = "app.kubernetes.io/component"
NAME_LABEL = "app.kubernetes.io/name"
PART_OF_LABEL = "app.kubernetes.io/part-of"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


def namespace(plan: Plan) -> str:
    return plan.profile.serving.namespace


def lws_name(plan: Plan, role: str) -> str:
    """DNS-1035 label: LWS names its headless Service (the pods' subdomain) after it."""
    return f"{plan.name}-{role}"


def router_name(plan: Plan) -> str:
    return f"{plan.name}-router"


def leader_host(plan: Plan, role: str, replica: int) -> str:
    """The leader pod of one replica, through the LWS headless Service (which publishes not-ready
    addresses, so the name resolves while the model is still loading)."""
    name = lws_name(plan, role)
    return f"{name}-{replica}.{name}.{namespace(plan)}.svc"


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
