"""The in-region weights import Job (Hugging Face Hub -> the weights bucket), rendered from the plan,
and what `pdkit weights import` asks of Kubernetes to run and watch it.

The Job runs `python3 -m pdkit.pods.weights_import` (pdkit/pods/weights_import.py) in the
serving image, on the on-demand system nodes (never the GPU nodes of the block), as the
`<name>-weights-writer` service account, whose EKS Pod Identity role may write the model's prefix.
It reaches the Hub through the VPC's NAT gateway and S3 through the gateway endpoint; nothing at
serve time needs the internet.

- Streaming: each file flows from the Hub (huggingface_hub's HfFileSystem) into boto3's managed
  transfer (64 MiB parts, two in flight per file), so the pod needs memory for files x 3 parts and no disk: the system nodes' 50 GiB root
  volume could not hold the checkpoint. The only volume is a small emptyDir for /tmp (HOME) under
  a read-only root filesystem.
- Retries: `backoffLimit` pods, each resuming where the last stopped (objects already in the bucket
  with the Hub's sha256 are skipped); exit code 3 (gated model without access, unknown revision,
  S3 access denied) fails the Job at once through `podFailurePolicy`, and a node drain does not
  count as a failure.
- `activeDeadlineSeconds` from the plan's checkpoint size at a pessimistic Hub rate, plus a margin.
- Gated models: the pod reads the Hub token from AWS Secrets Manager itself
  (`model.hf_token_secret_arn`), with its own Pod Identity role. The token never passes through the
  operator's machine, a Kubernetes Secret or etcd, and needs no clean-up; IAM scopes it to one secret.
- Pod Security "restricted": non-root, no privilege escalation, every capability dropped,
  RuntimeDefault seccomp, no service-account token mounted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pdkit.errors import KitError
from pdkit.model.plan import Plan
from pdkit.ops.jobs import JobState, KubeCluster, PodState, _api_error, _call, job_state
from pdkit.pods.weights_import import EXIT_NOT_RETRYABLE, PART_BYTES, PARTS_IN_FLIGHT
from pdkit.render.serving import names

Obj = dict[str, Any]

COMPONENT = "weights-import"
WRITER = "weights-writer"
CONTAINER = "import"
MODULE = "pdkit.pods.weights_import"
WORKERS = 8
PART_MIB = PART_BYTES // (1024 * 1024)
# Sustained Hub -> S3 rate the deadline assumes: pessimistic (8 parallel streams through a NAT
# gateway usually do several times better), so a slow Hub day does not kill a healthy import.
MIN_IMPORT_GBPS = 0.1
DEADLINE_MARGIN_SECONDS = 3600
BACKOFF_LIMIT = 4
TTL_AFTER_FINISHED_SECONDS = 7 * 24 * 3600  # long enough to read the log of last week's import
SCRATCH = "/tmp"  # noqa: S108 - an emptyDir, not the host's /tmp
SCRATCH_LIMIT = "1Gi"
MODEL_ANNOTATION = "pdkit/model"
POLL_SECONDS = 15.0


def job_name(plan: Plan) -> str:
    return f"{plan.name}-{COMPONENT}"


def service_account_name(plan: Plan) -> str:
    return names.service_account(plan, WRITER)


def deadline_seconds(plan: Plan) -> int:
    return math.ceil(plan.model.checkpoint_gb / MIN_IMPORT_GBPS) + DEADLINE_MARGIN_SECONDS


def memory_mib(workers: int, part_mib: int) -> int:
    """Parts uploading, the one being read and its copy while the stream assembles it, per file; plus the interpreter."""
    return workers * (PARTS_IN_FLIGHT + 2) * part_mib + 1024


def import_argv(
    plan: Plan, *, bucket: str, prefix: str, token_secret_arn: str | None, workers: int = WORKERS, part_mib: int = PART_MIB
) -> list[str]:
    model = plan.profile.model
    argv = [
        "python3",
        "-m",
        MODULE,
        "--model",
        model.id,
        "--revision",
        model.revision,
        "--bucket",
        bucket,
        "--prefix",
        prefix,
        "--region",
        plan.region,
        "--workers",
        str(workers),
        "--part-mib",
        str(part_mib),
    ]
    if token_secret_arn:
        argv += ["--hf-token-secret-arn", token_secret_arn]
    return argv


def render(
    plan: Plan,
    *,
    image: str,
    bucket: str,
    prefix: str,
    token_secret_arn: str | None = None,
    workers: int = WORKERS,
    part_mib: int = PART_MIB,
    deadline_s: int | None = None,
) -> Obj:
    memory = memory_mib(workers, part_mib)
    container: Obj = {
        "name": CONTAINER,
        "image": image,
        "command": import_argv(plan, bucket=bucket, prefix=prefix, token_secret_arn=token_secret_arn, workers=workers, part_mib=part_mib),
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "HOME", "value": SCRATCH},
        ],
        "resources": {"requests": {"cpu": "2", "memory": f"{memory}Mi"}, "limits": {"memory": f"{memory * 2}Mi"}},
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "scratch", "mountPath": SCRATCH}],
    }
    pod_spec: Obj = {
        "serviceAccountName": service_account_name(plan),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        # The on-demand system nodes: the GPU nodes are the block's and are tainted for their role.
        "nodeSelector": dict(plan.system_node_labels),
        "containers": [container],
        "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": SCRATCH_LIMIT}}],
    }
    spec: Obj = {
        "backoffLimit": BACKOFF_LIMIT,
        "activeDeadlineSeconds": deadline_s or deadline_seconds(plan),
        "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_SECONDS,
        "podFailurePolicy": {
            "rules": [
                {"action": "FailJob", "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": [EXIT_NOT_RETRYABLE]}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            ]
        },
        "template": {"metadata": {"labels": names.common_labels(plan, COMPONENT)}, "spec": pod_spec},
    }
    model = plan.profile.model
    meta: Obj = {
        "name": job_name(plan),
        "namespace": names.namespace(plan),
        "labels": names.common_labels(plan, COMPONENT),
        "annotations": {MODEL_ANNOTATION: f"{model.id}@{model.revision} -> s3://{bucket}/{prefix}"},
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


# --- Kubernetes: run and watch the Job --------------------------------------------------------------


class ImportCluster(KubeCluster):
    """pdkit.ops.jobs's Kubernetes seam plus what the import needs: the service account, a Job
    that may not exist, replacing it, and the tail of a log."""

    def service_account_exists(self, namespace: str, name: str) -> bool:
        from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

        try:
            _call(lambda: self.core.read_namespaced_service_account(name, namespace, _request_timeout=30), passthrough=(ApiException,))
        except ApiException as err:
            if err.status == 404:
                return False
            raise _api_error(err, f"read service account {namespace}/{name}") from None
        return True

    def current(self, namespace: str, name: str) -> JobState | None:
        """The Job's state, or None when there is no such Job."""
        from kubernetes.client.exceptions import ApiException

        try:
            job = _call(lambda: self.batch.read_namespaced_job_status(name, namespace, _request_timeout=30), passthrough=(ApiException,))
        except ApiException as err:
            if err.status == 404:
                return None
            raise _api_error(err, f"read Job {namespace}/{name}") from None
        return job_state(job)

    def replace(self, job: Obj, *, sleep: Callable[[float], None] = time.sleep, attempts: int = 30) -> None:
        """Delete a previous Job of that name (its pods with it) and create this one."""
        from kubernetes.client.exceptions import ApiException

        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        self.delete(job)
        for _ in range(attempts):
            try:
                _call(lambda: self.batch.create_namespaced_job(ns, job), passthrough=(ApiException,))
                return
            except ApiException as err:
                if err.status != 409:
                    raise _api_error(err, f"create Job {ns}/{name}") from None
            sleep(2)  # the previous Job is still being deleted
        raise KitError(f"the previous Job {ns}/{name} is still being deleted. Fix: wait a minute and run the command again")

    def tail(self, namespace: str, pod: str, lines: int) -> str:
        from kubernetes.client.exceptions import ApiException

        try:
            text = _call(
                lambda: self.core.read_namespaced_pod_log(pod, namespace, container=CONTAINER, tail_lines=lines, _request_timeout=60),
                passthrough=(ApiException,),
            )
        except ApiException as err:
            if err.status in (400, 404):  # not started yet, or already gone
                return ""
            raise _api_error(err, f"read the log of {pod}") from None
        return str(text)


def connect(context: str | None) -> ImportCluster:
    """The seam tests replace: the kubeconfig handling and error messages of pdkit.ops.kube."""
    from kubernetes import client  # type: ignore[import-untyped]

    from pdkit.ops import kube

    k = kube.connect(context)
    return ImportCluster(k, client.BatchV1Api(k.core.api_client))


@dataclass(frozen=True)
class Outcome:
    succeeded: bool
    failure: str | None
    log_tail: str


_PHASE_ORDER = {"Running": 0, "Succeeded": 1, "Failed": 2, "Pending": 3}


def _latest_pod(pods: list[PodState]) -> PodState | None:
    return min(pods, key=lambda p: (_PHASE_ORDER.get(p.phase, 4), p.name), default=None)


def _stuck(pod: PodState | None) -> str | None:
    if pod is None:
        return None
    if pod.unschedulable:
        return f"pod {pod.name} cannot be scheduled on a system node: {pod.unschedulable}"
    if pod.waiting:
        return f"pod {pod.name} is waiting: {pod.waiting}"
    return None


def watch(
    cluster: ImportCluster,
    namespace: str,
    name: str,
    *,
    say: Callable[[str], None],
    timeout_s: float,
    poll_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    """Follow the Job until it finishes: the import's latest log line whenever it changes, failed attempts, stuck pods."""
    started = clock()
    last_line = last_stuck = None
    failed_seen = 0
    while True:
        state = cluster.current(namespace, name)
        if state is None:
            raise KitError(
                f"Job {namespace}/{name} is gone (deleted, or removed {TTL_AFTER_FINISHED_SECONDS // 86400} days after it finished)"
            )
        pod = _latest_pod(cluster.pods(namespace, name))
        if state.failed > failed_seen:
            failed_seen = state.failed
            if not state.finished:
                say(f"attempt {failed_seen} failed; the Job retries (up to {BACKOFF_LIMIT} times) and keeps the files already imported")
        stuck = _stuck(pod)
        if stuck and stuck != last_stuck:
            say(stuck)
        last_stuck = stuck
        if state.finished:
            tail = cluster.tail(namespace, pod.name, 20) if pod else ""
            return Outcome(succeeded=state.failure is None, failure=state.failure, log_tail=tail)
        if pod is not None and pod.phase == "Running":
            lines = [line for line in cluster.tail(namespace, pod.name, 1).splitlines() if line.strip()]
            if lines and lines[-1] != last_line:
                last_line = lines[-1]
                say(last_line)
        if clock() - started > timeout_s:
            return Outcome(succeeded=False, failure=f"still running after {timeout_s / 3600:.1f} h of watching", log_tail="")
        sleep(POLL_SECONDS if poll_s is None else poll_s)
