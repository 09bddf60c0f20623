"""Read-only Kubernetes access for `pdkit status`: GPU nodes, LeaderWorkerSets and the router.

The cluster endpoint is private by default, so the operator reaches it through the kit's
SSM-managed access host (a port-forward to the endpoint; no inbound port). `connect` loads the
kubeconfig as kubectl would (KUBECONFIG, --kube-context); `Kube` takes the three client APIs it
uses, so tests pass fakes. Every failure to reach the API becomes KubeUnreachable, whose message
says how to open the access path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pdkit.errors import KitError
from pdkit.model.placement import PLACED_ROLE_LABEL, bottom_network_node
from pdkit.model.plan import ROLE_LABEL, ROLES, Plan

GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
DS_GROUP, DS_VERSION, DS_PLURAL = "disaggregatedset.x-k8s.io", "v1", "disaggregatedsets"
# The serving manifests label the DisaggregatedSet's roles (whose labels its controller copies onto the
# LeaderWorkerSets it creates, whatever their names) and the router Deployment with the role label the
# GPU nodes carry (pdkit/role: prefill | decode | router).
ROUTER_ROLE = "router"
TIMEOUT_SECONDS = 10


class KubeUnreachable(KitError):
    """The Kubernetes API could not be reached or refused us; the message says why."""


@dataclass(frozen=True)
class Node:
    name: str
    role: str
    ready: bool
    gpus: int
    efa: int
    instance_id: str | None
    # The role pdkit topology --assign gave the node from the network topology, and its bottom network node (EKS labels).
    placed_role: str | None = None
    bottom_network_node: str | None = None


@dataclass(frozen=True)
class Workload:
    name: str
    role: str
    desired: int
    ready: int


def access_path(plan: Plan, region: str) -> list[str]:
    """The commands that open the SSM access path to the private endpoint and point kubectl at it."""
    stack = plan.stack_names.get("cluster", f"{plan.name}-cluster")
    return [
        f"aws cloudformation describe-stacks --region {region} --stack-name {stack} "
        "--query \"Stacks[0].Outputs[?OutputKey=='AccessHostId'].OutputValue\" --output text   # <instance>",
        f"aws eks describe-cluster --region {region} --name {plan.cluster_name} --query cluster.endpoint --output text "
        "| sed 's#https://##'   # <endpoint host>",
        f"aws ssm start-session --region {region} --target <instance> --document-name AWS-StartPortForwardingSessionToRemoteHost "
        "--parameters host=<endpoint host>,portNumber=443,localPortNumber=8443   # keep it open",
        f"aws eks update-kubeconfig --region {region} --name {plan.cluster_name}",
        "kubectl config set-cluster <cluster arn> --server https://127.0.0.1:8443 --tls-server-name <endpoint host>",
    ]


def _count(quantity: Any) -> int:
    try:
        return int(str(quantity))
    except (TypeError, ValueError):
        return 0


class Kube:
    def __init__(self, *, core: Any, apps: Any, custom: Any) -> None:
        self.core = core
        self.apps = apps
        self.custom = custom

    def gpu_nodes(self) -> list[Node]:
        selector = f"{ROLE_LABEL} in ({','.join(ROLES)})"
        listed = _call(lambda: self.core.list_node(label_selector=selector, _request_timeout=TIMEOUT_SECONDS))
        found = []
        for item in listed.items:
            labels = item.metadata.labels or {}
            allocatable = (item.status.allocatable if item.status else None) or {}
            conditions = (item.status.conditions if item.status else None) or []
            provider = (item.spec.provider_id if item.spec else None) or ""
            found.append(
                Node(
                    name=item.metadata.name,
                    role=labels.get(ROLE_LABEL, "?"),
                    ready=any(c.type == "Ready" and c.status == "True" for c in conditions),
                    gpus=_count(allocatable.get(GPU)),
                    efa=_count(allocatable.get(EFA)),
                    instance_id=provider.rsplit("/", 1)[-1] or None,
                    placed_role=labels.get(PLACED_ROLE_LABEL),
                    bottom_network_node=bottom_network_node(labels),
                )
            )
        return sorted(found, key=lambda n: (n.role, n.name))

    def label_node(self, name: str, labels: dict[str, str]) -> None:
        """Merge-patch labels onto a Node (pdkit topology --assign)."""
        _call(lambda: self.core.patch_node(name, {"metadata": {"labels": labels}}, _request_timeout=TIMEOUT_SECONDS))

    def leader_worker_sets(self, namespace: str) -> list[Workload] | None:
        """LeaderWorkerSets with a role label; None when the LWS CRD is not installed."""
        from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

        try:
            listed = _call(
                lambda: self.custom.list_namespaced_custom_object(
                    LWS_GROUP, LWS_VERSION, namespace, LWS_PLURAL, label_selector=ROLE_LABEL, _request_timeout=TIMEOUT_SECONDS
                ),
                passthrough=(ApiException,),
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise _unreachable(err) from None
        return [
            Workload(
                name=item["metadata"]["name"],
                role=item["metadata"].get("labels", {}).get(ROLE_LABEL, "?"),
                desired=int(item.get("spec", {}).get("replicas", 1)),
                ready=int(item.get("status", {}).get("readyReplicas", 0)),
            )
            for item in listed.get("items", [])
        ]

    def scale_roles(self, namespace: str, name: str, replicas: dict[str, int]) -> bool:
        """Set the DisaggregatedSet's role replicas with one JSON patch (pdkit/functions/kube_api.py
        roles_patch; its controller reverts a scaled LeaderWorkerSet); False when it does not exist."""
        from kubernetes.client.exceptions import ApiException

        from pdkit.render.serving.scale import roles_patch

        try:
            _call(
                lambda: self.custom.patch_namespaced_custom_object(
                    DS_GROUP,
                    DS_VERSION,
                    namespace,
                    DS_PLURAL,
                    name,
                    roles_patch(replicas),
                    _content_type="application/json-patch+json",
                    _request_timeout=TIMEOUT_SECONDS,
                ),
                passthrough=(ApiException,),
            )
        except ApiException as err:
            if err.status == 404:
                return False
            raise _unreachable(err) from None
        return True

    def routers(self, namespace: str) -> list[Workload]:
        selector = f"{ROLE_LABEL}={ROUTER_ROLE}"
        listed = _call(lambda: self.apps.list_namespaced_deployment(namespace, label_selector=selector, _request_timeout=TIMEOUT_SECONDS))
        return [
            Workload(
                name=d.metadata.name,
                role=ROUTER_ROLE,
                desired=d.spec.replicas if d.spec and d.spec.replicas is not None else 1,
                ready=(d.status.ready_replicas if d.status else None) or 0,
            )
            for d in listed.items
        ]


def _call(fn: Any, *, passthrough: tuple[type[BaseException], ...] = ()) -> Any:
    try:
        return fn()
    except passthrough:
        raise
    except Exception as err:
        raise _unreachable(err) from None


def _unreachable(err: Exception) -> KubeUnreachable:
    status = getattr(err, "status", None)
    if status in (401, 403):
        return KubeUnreachable(
            f"the Kubernetes API refused your identity (HTTP {status}). Fix: add your IAM role to cluster.admin_principal_arns and deploy, "
            "or use credentials that have an access entry"
        )
    reason = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
    return KubeUnreachable(f"cannot reach the Kubernetes API ({reason}). Fix: open the SSM access path (see below) and retry")


def connect(context: str | None) -> Kube:
    """A Kube for the current (or named) kubeconfig context."""
    from kubernetes import client, config  # type: ignore[import-untyped]

    try:
        api = config.new_client_from_config(context=context)
    except Exception as err:
        raise KubeUnreachable(
            f"no usable kubeconfig ({str(err).splitlines()[0][:160]}). Fix: `aws eks update-kubeconfig` through the SSM access path (see below)"
        ) from None
    return Kube(core=client.CoreV1Api(api), apps=client.AppsV1Api(api), custom=client.CustomObjectsApi(api))
