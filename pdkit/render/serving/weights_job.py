"""The in-region weights import Job (Hugging Face Hub -> the weights bucket), rendered from the plan;
`pdkit weights import` starts it and pdkit/ops/weights.py follows it.

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

from pdkit.model.plan import Plan
from pdkit.pods.weights_import import EXIT_NOT_RETRYABLE, PART_BYTES, PARTS_IN_FLIGHT
from pdkit.render import pod
from pdkit.render.pod import Obj
from pdkit.render.serving import names

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
    argv = [
        "python3",
        "-m",
        MODULE,
        "--model",
        plan.model.id,
        "--revision",
        plan.weights.revision,
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
        "securityContext": pod.container_security(read_only_root=True),
        "volumeMounts": [{"name": "scratch", "mountPath": SCRATCH}],
    }
    pod_spec: Obj = {
        "serviceAccountName": service_account_name(plan),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Never",
        "securityContext": pod.pod_security(),
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
    meta: Obj = {
        "name": job_name(plan),
        "namespace": names.namespace(plan),
        "labels": names.common_labels(plan, COMPONENT),
        "annotations": {MODEL_ANNOTATION: f"{plan.model.id}@{plan.weights.revision} -> s3://{bucket}/{prefix}"},
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}
