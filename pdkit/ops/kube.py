"""The kit's Kubernetes client on the operator's machine: status, nodes, topology, timeline, validate, bench, weights.

The endpoint is private by default: the operator reaches it through the kit's SSM-managed access host
(a port-forward; no inbound port). `connect` loads the kubeconfig as kubectl would (KUBECONFIG,
--kube-context); `Kube` takes the client APIs it calls, so tests pass fakes; every failed call becomes
one KubeUnreachable line that says what to do. `run_jobs` creates Jobs and their companions, waits for
them, collects each pod's log by completion index and deletes what it created. The block lifecycle
Lambda has its own small client (pdkit/functions/kube_api.py): it ships without the kubernetes package.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pdkit.errors import KitError
from pdkit.model.placement import PLACED_ROLE_LABEL, bottom_network_node
from pdkit.model.plan import ROLE_LABEL, ROLES, Plan
from pdkit.render.pod import EFA, GPU, JOB_NAME_LABEL
from pdkit.render.serving import names

Obj = dict[str, Any]
LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
DS_GROUP, DS_VERSION, DS_PLURAL = "disaggregatedset.x-k8s.io", "v1", "disaggregatedsets"
# The serving manifests label the DisaggregatedSet's roles (whose labels its controller copies onto the
# LeaderWorkerSets it creates, whatever their names) and the router Deployment with the role label the
# GPU nodes carry (pdkit/role: prefill | decode | router).
ROUTER_ROLE = "router"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
TIMEOUT_SECONDS = 30
# kind -> (client API, method noun): create_<noun> and delete_<noun> of kubernetes.client.
KINDS = {
    "Namespace": ("core", "namespace"),
    "ConfigMap": ("core", "namespaced_config_map"),
    "Secret": ("core", "namespaced_secret"),
    "Service": ("core", "namespaced_service"),
    "ServiceAccount": ("core", "namespaced_service_account"),
    "Role": ("rbac", "namespaced_role"),
    "RoleBinding": ("rbac", "namespaced_role_binding"),
    "Job": ("batch", "namespaced_job"),
}


class KubeUnreachable(KitError):
    """The Kubernetes API could not be reached, refused us or failed a call; the message says what to do."""


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


@dataclass(frozen=True)
class PodState:
    name: str
    index: int | None
    node: str | None
    phase: str
    unschedulable: str | None = None
    waiting: str | None = None  # e.g. ImagePullBackOff: <message>


@dataclass(frozen=True)
class JobState:
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    finished: bool = False
    failure: str | None = None


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


class Kube:
    """The kubernetes.client APIs the kit calls (CoreV1, AppsV1, CustomObjects, BatchV1, RbacAuthorizationV1), or fakes."""

    def __init__(self, *, core: Any, apps: Any = None, custom: Any = None, batch: Any = None, rbac: Any = None) -> None:
        self.core, self.apps, self.custom, self.batch, self.rbac = core, apps, custom, batch, rbac

    def gpu_nodes(self) -> list[Node]:
        selector = f"{ROLE_LABEL} in ({','.join(ROLES)})"
        listed = call("list the GPU nodes", lambda: self.core.list_node(label_selector=selector, _request_timeout=TIMEOUT_SECONDS))
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
        body = {"metadata": {"labels": labels}}
        call(f"label node {name}", lambda: self.core.patch_node(name, body, _request_timeout=TIMEOUT_SECONDS))

    def leader_worker_sets(self, namespace: str) -> list[Workload] | None:
        """LeaderWorkerSets with a role label; None when the LWS CRD is not installed."""
        listed = call(
            "list LeaderWorkerSets",
            lambda: self.custom.list_namespaced_custom_object(
                LWS_GROUP, LWS_VERSION, namespace, LWS_PLURAL, label_selector=ROLE_LABEL, _request_timeout=TIMEOUT_SECONDS
            ),
            tolerate={404: None},
        )
        if listed is None:
            return None
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
        from pdkit.render.serving.scale import roles_patch

        args = (DS_GROUP, DS_VERSION, namespace, DS_PLURAL, name, roles_patch(replicas))
        patch = self.custom.patch_namespaced_custom_object
        scaled = call(
            f"scale DisaggregatedSet {namespace}/{name}",
            lambda: patch(*args, _content_type="application/json-patch+json", _request_timeout=TIMEOUT_SECONDS),
            tolerate={404: False},
        )
        return scaled is not False

    def routers(self, namespace: str) -> list[Workload]:
        selector = f"{ROLE_LABEL}={ROUTER_ROLE}"
        listed = call(
            "list the router",
            lambda: self.apps.list_namespaced_deployment(namespace, label_selector=selector, _request_timeout=TIMEOUT_SECONDS),
        )
        return [
            Workload(
                name=d.metadata.name,
                role=ROUTER_ROLE,
                desired=d.spec.replicas if d.spec and d.spec.replicas is not None else 1,
                ready=(d.status.ready_replicas if d.status else None) or 0,
            )
            for d in listed.items
        ]

    def serving_pods(self, namespace: str) -> list[str]:
        return [p.name for p in self._pods(namespace, f"{names.COMPONENT_LABEL}=sglang") if p.phase in ("Pending", "Running")]

    def service_account_exists(self, namespace: str, name: str) -> bool:
        read = self.core.read_namespaced_service_account
        found = call(
            f"read service account {namespace}/{name}",
            lambda: read(name, namespace, _request_timeout=TIMEOUT_SECONDS),
            tolerate={404: False},
        )
        return found is not False

    def create(self, obj: Obj) -> None:
        kind, name, ns = obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace")
        api, noun = KINDS[kind]
        method = getattr(getattr(self, api), f"create_{noun}")
        # The validation namespace outlives a run; everything else is new per run.
        tolerate = {409: None} if kind == "Namespace" else None
        call(f"create {kind} {name}", lambda: method(obj) if kind == "Namespace" else method(ns, obj), tolerate=tolerate)

    def delete(self, obj: Obj) -> None:
        kind, name, ns = obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace")
        api, noun = KINDS[kind]
        method = getattr(getattr(self, api), f"delete_{noun}")
        args = (name,) if kind == "Namespace" else (name, ns)
        # Background propagation: a Job's pods go with it.
        options = {"propagation_policy": "Background"} if kind == "Job" else {}
        call(f"delete {kind} {name}", lambda: method(*args, **options), tolerate={404: None})

    def replace(self, job: Obj, *, sleep: Callable[[float], None] = time.sleep, attempts: int = 30) -> None:
        """Delete a previous Job of that name (its pods with it) and create this one."""
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        self.delete(job)
        for _ in range(attempts):
            created = call(f"create Job {ns}/{name}", lambda: self.batch.create_namespaced_job(ns, job), tolerate={409: False})
            if created is not False:
                return
            sleep(2)  # the previous Job is still being deleted
        raise KitError(f"the previous Job {ns}/{name} is still being deleted. Fix: wait a minute and run the command again")

    def job(self, namespace: str, name: str) -> JobState | None:
        """The Job's state; None when there is no such Job."""
        read = self.batch.read_namespaced_job_status
        job = call(f"read Job {namespace}/{name}", lambda: read(name, namespace, _request_timeout=TIMEOUT_SECONDS), tolerate={404: None})
        return None if job is None else job_state(job)

    def pods(self, namespace: str, job: str) -> list[PodState]:
        return self._pods(namespace, f"{JOB_NAME_LABEL}={job}")

    def _pods(self, namespace: str, selector: str) -> list[PodState]:
        list_pods = self.core.list_namespaced_pod
        listed = call(f"list pods {selector}", lambda: list_pods(namespace, label_selector=selector, _request_timeout=TIMEOUT_SECONDS))
        return [_pod_state(p) for p in listed.items]

    def logs(self, namespace: str, pod: str, *, container: str | None = None, tail_lines: int | None = None) -> str:
        """A pod's log (its last `tail_lines`); empty when it has not started yet or is already gone."""
        options = {k: v for k, v in (("container", container), ("tail_lines", tail_lines)) if v is not None}
        read = self.core.read_namespaced_pod_log
        text = call(
            f"read the log of {pod}",
            lambda: read(pod, namespace, **options, _request_timeout=TIMEOUT_SECONDS * 4),
            tolerate={400: "", 404: ""},
        )
        return str(text)


def connect(context: str | None) -> Kube:
    """A Kube for the current (or named) kubeconfig context."""
    from kubernetes import client, config  # type: ignore[import-untyped]

    try:
        api = config.new_client_from_config(context=context)
    except Exception as err:
        raise KubeUnreachable(
            f"no usable kubeconfig ({str(err).splitlines()[0][:160]}). Fix: `aws eks update-kubeconfig` through the SSM access path (see below)"
        ) from None
    return Kube(
        core=client.CoreV1Api(api),
        apps=client.AppsV1Api(api),
        custom=client.CustomObjectsApi(api),
        batch=client.BatchV1Api(api),
        rbac=client.RbacAuthorizationV1Api(api),
    )


def call(what: str, fn: Callable[[], Any], *, tolerate: dict[int, Any] | None = None) -> Any:
    """fn(), any failure as a KubeUnreachable that says what to do; an HTTP status in `tolerate` returns its value."""
    try:
        return fn()
    except Exception as err:
        status = getattr(err, "status", None)
        if tolerate and status in tolerate:
            return tolerate[status]
        if status in (401, 403):
            raise KubeUnreachable(
                f"the Kubernetes API refused your identity (HTTP {status}) to {what}. Fix: add your IAM role to "
                "cluster.admin_principal_arns and deploy, or use credentials that have an access entry"
            ) from None
        if isinstance(status, int):
            raise KubeUnreachable(
                f"the Kubernetes API could not {what} (HTTP {status} {getattr(err, 'reason', '') or ''}). "
                "Fix: check `kubectl get events -A` and retry"
            ) from None
        reason = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        raise KubeUnreachable(
            f"cannot reach the Kubernetes API ({reason}). Fix: open the SSM access path (runbooks/01-cluster.md) and retry"
        ) from None


def _count(quantity: Any) -> int:
    try:
        return int(str(quantity))
    except (TypeError, ValueError):
        return 0


def _pod_state(p: Any) -> PodState:
    annotations = p.metadata.annotations or {}
    index = annotations.get(INDEX_ANNOTATION)
    status = p.status
    conditions = (status.conditions if status else None) or []
    unschedulable = next(
        (c.message for c in conditions if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"), None
    )
    waiting = None
    for cs in (status.container_statuses if status else None) or []:
        state = cs.state.waiting if cs.state else None
        if state and state.reason not in (None, "ContainerCreating", "PodInitializing"):
            waiting = f"{state.reason}: {state.message or ''}".strip()
    return PodState(
        name=p.metadata.name,
        index=int(index) if index is not None and str(index).isdigit() else None,
        node=p.spec.node_name if p.spec else None,
        phase=(status.phase if status else None) or "Unknown",
        unschedulable=unschedulable,
        waiting=waiting,
    )


def job_state(job: Any) -> JobState:
    """A Kubernetes V1Job's status as counts, whether it finished, and why it failed."""
    status = job.status
    conditions = (status.conditions if status else None) or []
    failure = next((f"{c.reason}: {c.message}" for c in conditions if c.type == "Failed" and c.status == "True"), None)
    complete = any(c.type == "Complete" and c.status == "True" for c in conditions)
    return JobState(
        active=(status.active if status else None) or 0,
        succeeded=(status.succeeded if status else None) or 0,
        failed=(status.failed if status else None) or 0,
        finished=complete or failure is not None,
        failure=failure,
    )


# --- running Jobs (pdkit validate, pdkit bench) ----------------------------------------------------


class Cluster(Protocol):
    """What run_jobs and the validate and bench commands ask of Kubernetes: Kube, or a test's fake."""

    def gpu_nodes(self) -> list[Node]: ...
    def serving_pods(self, namespace: str) -> list[str]: ...
    def create(self, obj: Obj) -> None: ...
    def delete(self, obj: Obj) -> None: ...
    def job(self, namespace: str, name: str) -> JobState | None: ...
    def pods(self, namespace: str, job: str) -> list[PodState]: ...
    def logs(self, namespace: str, pod: str) -> str: ...


@dataclass
class JobRun:
    """What a Job left behind: each pod's log by completion index, and why it stopped if not cleanly."""

    logs: dict[int, str] = field(default_factory=dict)
    nodes: dict[int, str] = field(default_factory=dict)
    problem: str | None = None
    finished: bool = False


@dataclass(frozen=True)
class Waiting:
    """How long to wait, and how: injectable so tests need no clock."""

    timeout_s: float
    schedule_timeout_s: float = 600
    poll_s: float = 10
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic


def run_jobs(
    cluster: Cluster,
    jobs: list[tuple[Obj, list[Obj]]],
    *,
    waiting: Waiting,
    keep: bool = False,
    on_poll: Callable[[str, JobState, list[PodState]], None] | None = None,
) -> dict[str, JobRun]:
    """Create the Jobs (each after its companions), wait for all of them, collect logs, clean up.

    A Job stops being waited for when it finishes (or is deleted), when a pod cannot be scheduled or
    pulled for `schedule_timeout_s`, or at `timeout_s`. Returns one JobRun per Job name.
    """
    created: list[Obj] = []
    runs = {job["metadata"]["name"]: JobRun() for job, _ in jobs}
    try:
        for job, companions in jobs:
            for obj in [*companions, job]:
                cluster.create(obj)
                created.append(obj)
        started = waiting.clock()
        pending = {job["metadata"]["name"]: job["metadata"]["namespace"] for job, _ in jobs}
        while pending:
            elapsed = waiting.clock() - started
            for name, ns in list(pending.items()):
                state = cluster.job(ns, name) or JobState(finished=True, failure="the Job was deleted before it finished")
                pods = cluster.pods(ns, name)
                if on_poll:
                    on_poll(name, state, pods)
                run = runs[name]
                why_stuck = stuck(pods)
                if state.finished:
                    run.finished, run.problem = True, state.failure
                elif why_stuck and elapsed > waiting.schedule_timeout_s:
                    run.problem = why_stuck
                elif elapsed > waiting.timeout_s:
                    run.problem = f"still running after {waiting.timeout_s / 60:.0f} min"
                else:
                    continue
                _collect(cluster, ns, name, run)
                del pending[name]
            if pending:
                waiting.sleep(waiting.poll_s)
    finally:
        if not keep:
            for obj in reversed(created):
                cluster.delete(obj)
    return runs


def _collect(cluster: Cluster, ns: str, name: str, run: JobRun) -> None:
    for pod in cluster.pods(ns, name):
        if pod.index is None:
            continue
        if pod.node:
            run.nodes[pod.index] = pod.node
        text = cluster.logs(ns, pod.name)
        if text or pod.index not in run.logs:
            run.logs[pod.index] = text


def stuck(pods: list[PodState]) -> str | None:
    """Why a Job cannot make progress: a pod the scheduler cannot place, or an image that cannot be pulled."""
    for pod in pods:
        if pod.unschedulable:
            return f"pod {pod.name} cannot be scheduled: {pod.unschedulable}"
        if pod.waiting and any(word in pod.waiting for word in ("ImagePull", "ErrImage", "CreateContainerConfigError")):
            return f"pod {pod.name} cannot start: {pod.waiting}"
    return None
