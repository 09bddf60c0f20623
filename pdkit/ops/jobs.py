"""What `pdkit validate` and `pdkit bench` ask of Kubernetes, behind one small seam.

`Cluster` is the protocol the commands use; `KubeCluster` implements it with the Kubernetes client
that pdkit/ops/kube.py connects (same kubeconfig handling and error messages); tests pass a fake.
`run_jobs` creates Jobs and their companions, waits for them, collects every pod's log by
completion index, and deletes what it created.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pdkit.errors import KitError
from pdkit.ops.kube import Kube, KubeUnreachable, Node, connect
from pdkit.render.serving import names

Obj = dict[str, Any]
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
TIMEOUT_SECONDS = 30


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


class Cluster(Protocol):
    def gpu_nodes(self) -> list[Node]: ...

    def serving_pods(self, namespace: str) -> list[str]: ...

    def create(self, obj: Obj) -> None: ...

    def delete(self, obj: Obj) -> None: ...

    def job(self, namespace: str, name: str) -> JobState: ...

    def pods(self, namespace: str, job: str) -> list[PodState]: ...

    def logs(self, namespace: str, pod: str) -> str: ...


class KubeCluster:
    """`Cluster` on the real API: core and batch clients sharing pdkit.ops.kube's connection."""

    def __init__(self, kube: Kube, batch: Any, rbac: Any = None) -> None:
        self.kube = kube
        self.core = kube.core
        self.batch = batch
        self.rbac = rbac

    def gpu_nodes(self) -> list[Node]:
        return self.kube.gpu_nodes()

    def serving_pods(self, namespace: str) -> list[str]:
        selector = f"{names.COMPONENT_LABEL}=sglang"
        listed = _call(lambda: self.core.list_namespaced_pod(namespace, label_selector=selector, _request_timeout=TIMEOUT_SECONDS))
        return [p.metadata.name for p in listed.items if (p.status.phase if p.status else None) in ("Pending", "Running")]

    def create(self, obj: Obj) -> None:
        from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

        kind, ns = obj["kind"], obj["metadata"].get("namespace")
        creators = {
            "Namespace": lambda: self.core.create_namespace(obj),
            "ConfigMap": lambda: self.core.create_namespaced_config_map(ns, obj),
            "Secret": lambda: self.core.create_namespaced_secret(ns, obj),
            "Service": lambda: self.core.create_namespaced_service(ns, obj),
            "ServiceAccount": lambda: self.core.create_namespaced_service_account(ns, obj),
            "Role": lambda: self.rbac.create_namespaced_role(ns, obj),
            "RoleBinding": lambda: self.rbac.create_namespaced_role_binding(ns, obj),
            "Job": lambda: self.batch.create_namespaced_job(ns, obj),
        }
        try:
            _call(creators[kind], passthrough=(ApiException,))
        except ApiException as err:
            # The validation namespace outlives a run; everything else is new per run.
            if not (err.status == 409 and kind == "Namespace"):
                raise _api_error(err, f"create {kind} {obj['metadata']['name']}") from None

    def delete(self, obj: Obj) -> None:
        from kubernetes.client.exceptions import ApiException

        kind, name, ns = obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace")
        deleters = {
            "Namespace": lambda: self.core.delete_namespace(name),
            "ConfigMap": lambda: self.core.delete_namespaced_config_map(name, ns),
            "Secret": lambda: self.core.delete_namespaced_secret(name, ns),
            "Service": lambda: self.core.delete_namespaced_service(name, ns),
            "ServiceAccount": lambda: self.core.delete_namespaced_service_account(name, ns),
            "Role": lambda: self.rbac.delete_namespaced_role(name, ns),
            "RoleBinding": lambda: self.rbac.delete_namespaced_role_binding(name, ns),
            # Background propagation: the Job's pods go with it.
            "Job": lambda: self.batch.delete_namespaced_job(name, ns, propagation_policy="Background"),
        }
        try:
            _call(deleters[kind], passthrough=(ApiException,))
        except ApiException as err:
            if err.status != 404:
                raise _api_error(err, f"delete {kind} {name}") from None

    def job(self, namespace: str, name: str) -> JobState:
        job = _call(lambda: self.batch.read_namespaced_job_status(name, namespace, _request_timeout=TIMEOUT_SECONDS))
        return job_state(job)

    def pods(self, namespace: str, job: str) -> list[PodState]:
        listed = _call(
            lambda: self.core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={job}", _request_timeout=TIMEOUT_SECONDS)
        )
        return [_pod_state(p) for p in listed.items]

    def logs(self, namespace: str, pod: str) -> str:
        from kubernetes.client.exceptions import ApiException

        try:
            text = _call(
                lambda: self.core.read_namespaced_pod_log(pod, namespace, _request_timeout=TIMEOUT_SECONDS * 4), passthrough=(ApiException,)
            )
        except ApiException as err:
            if err.status in (400, 404):  # not started yet, or already gone
                return ""
            raise _api_error(err, f"read the log of {pod}") from None
        return str(text)


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


def _call(fn: Callable[[], Any], *, passthrough: tuple[type[BaseException], ...] = ()) -> Any:
    try:
        return fn()
    except passthrough:
        raise
    except Exception as err:
        status = getattr(err, "status", None)
        if status in (401, 403):
            raise KubeUnreachable(
                f"the Kubernetes API refused your identity (HTTP {status}). Fix: add your IAM role to cluster.admin_principal_arns and deploy"
            ) from None
        reason = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        raise KubeUnreachable(
            f"cannot reach the Kubernetes API ({reason}). Fix: open the SSM access path (runbooks/01-cluster.md) and retry"
        ) from None


def _api_error(err: Any, what: str) -> KitError:
    reason = getattr(err, "reason", "") or type(err).__name__
    status = getattr(err, "status", "?")
    if status in (401, 403):
        return KitError(
            f"the Kubernetes API refused to {what} (HTTP {status}). Fix: use a principal in cluster.admin_principal_arns (runbooks/01-cluster.md)"
        )
    return KitError(f"the Kubernetes API could not {what} (HTTP {status} {reason}). Fix: check `kubectl get events -A` and retry")


def connect_cluster(context: str | None) -> KubeCluster:
    from kubernetes import client  # type: ignore[import-untyped]

    kube = connect(context)
    return KubeCluster(kube, client.BatchV1Api(kube.core.api_client), client.RbacAuthorizationV1Api(kube.core.api_client))


# --- running Jobs ------------------------------------------------------------------------------------


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

    A Job stops being waited for when it finishes, when a pod cannot be scheduled or pulled for
    `schedule_timeout_s`, or at `timeout_s`. Returns one JobRun per Job name.
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
                state = cluster.job(ns, name)
                pods = cluster.pods(ns, name)
                if on_poll:
                    on_poll(name, state, pods)
                run = runs[name]
                stuck = _stuck(pods)
                if state.finished:
                    run.finished, run.problem = True, state.failure
                elif stuck and elapsed > waiting.schedule_timeout_s:
                    run.problem = stuck
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


def _stuck(pods: list[PodState]) -> str | None:
    """Why the Job cannot make progress: a pod the scheduler cannot place, or an image that cannot be pulled."""
    for pod in pods:
        if pod.unschedulable:
            return f"pod {pod.name} cannot be scheduled: {pod.unschedulable}"
        if pod.waiting and any(word in pod.waiting for word in ("ImagePull", "ErrImage", "CreateContainerConfigError")):
            return f"pod {pod.name} cannot start: {pod.waiting}"
    return None
