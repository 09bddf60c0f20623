"""The Kubernetes side of SGLang's warm compile cache (pdkit/pods/compile_cache.py does the work).

- A PersistentVolume on the node's NVMe (next to the staged weights; manifests.node_storage), mounted at CACHE_ROOT, so a
  restarted or recreated group finds its kernels compiled. Like the weights volume it keeps hostPath
  out of the pod spec. The directory kubelet creates is root's; the weights stager (root, no
  capability) opens it to the serving user with mode 1777, the one thing that needs root.
- An init container on every node of the group, after staging: restore the archive a previous block
  saved, else run SGLang's DeepGEMM precompile with the role's own command line (all ranks, full EP
  size), skipped when the node's cache already holds this role's marker.
- A preStop hook on the serving container that saves the leader's cache to the weights bucket when the
  end-of-block drain deletes the pods (the drain waits POD_WAIT_MINUTES for them to go; the grace
  period below bounds the upload).
"""

from __future__ import annotations

import copy
import math

from pdkit.model.plan import Plan, RolePlan
from pdkit.pods.compile_cache import CACHE_ROOT, WORKER_INDEX_ENV, cache_key, role_cache_dir
from pdkit.render.node_config import NVME_MOUNT
from pdkit.render.pod import Obj
from pdkit.render.serving import names
from pdkit.render.serving.inputs import ServingInputs
from pdkit.render.serving.sglang_args import SGLANG_VERSION, launch_argv

NODE_CACHE_DIR = f"{NVME_MOUNT}0/pdkit-compile-cache"
CACHE_VOLUME = "compile-cache"
CACHE_CAPACITY = "200G"
# The preStop upload of a few GB to S3 from inside the VPC (gateway endpoint) takes well under this;
# kubelet kills the container when it runs out.
SAVE_GRACE_SECONDS = 300
PRECOMPILE_MODULE = "sglang.compile_deep_gemm"


def key(plan: Plan, role: RolePlan, image: str) -> str:
    """Changes whenever the compiled kernels could: another SGLang, another image, another command line.
    The image counts by repository and tag (its content hash), not registry: at synth time the registry is
    a CloudFormation token whose text says nothing about the image."""
    return cache_key(SGLANG_VERSION, image.split("/", 1)[-1], *launch_argv(plan, role.name))


def cache_prefix(plan: Plan) -> str:
    """This deployment's archives in the weights bucket (the serving pods' role may read and write them)."""
    return f"{plan.weights.compile_cache_prefix}{plan.name}/"


def object_key(plan: Plan, role: RolePlan, image: str) -> str:
    return f"{cache_prefix(plan)}{role.name}/{key(plan, role, image)}.tar"


def claim_name(plan: Plan) -> str:
    return f"{plan.name}-{CACHE_VOLUME}"


def pod_volume(plan: Plan) -> Obj:
    return {"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": claim_name(plan)}}


def mount() -> Obj:
    return {"name": CACHE_VOLUME, "mountPath": CACHE_ROOT}


def _cli(action: str, plan: Plan, role: RolePlan, inputs: ServingInputs, image: str) -> list[str]:
    return [
        "python3",
        "-m",
        "pdkit.pods.compile_cache",
        action,
        "--bucket",
        inputs.weights_bucket,
        "--key",
        key(plan, role, image),
        "--object-key",
        object_key(plan, role, image),
        "--dir",
        role_cache_dir(role.name),
        "--region",
        plan.region,
    ]


def precompile_argv(plan: Plan, role: RolePlan) -> list[str]:
    """The role's server command line through SGLang's DeepGEMM precompile (it accepts the server's flags)."""
    argv = launch_argv(plan, role.name)
    return [PRECOMPILE_MODULE if a == "sglang.launch_server" else a for a in argv] + ["--timeout", str(precompile_timeout_seconds(plan))]


def precompile_timeout_seconds(plan: Plan) -> int:
    return math.ceil(2 * plan.estimates.precompile_minutes * 60)


def warm_container(plan: Plan, role: RolePlan, inputs: ServingInputs, serving: Obj) -> Obj:
    """The serving container's image, devices, environment and security, running the warm step instead."""
    image = str(serving["image"])
    command = [
        *_cli("warm", plan, role, inputs, image),
        "--timeout",
        str(precompile_timeout_seconds(plan) + 60),
        "--",
        *precompile_argv(plan, role),
    ]
    dropped = {"name", "args", "ports", "startupProbe", "readinessProbe", "livenessProbe", "lifecycle"}
    # Copies, so that YAML output carries no anchors shared with the serving container.
    container: Obj = {"name": "warm-compile-cache", **copy.deepcopy({k: v for k, v in serving.items() if k not in dropped})}
    # The locked-memory check stays in front (`command`): the precompile brings up the same EP and NCCL groups.
    container["args"] = command
    # The leader address and group size are injected into init containers by LeaderWorkerSet; the
    # worker index comes from the pod's label, so --node-rank expands here too.
    index = {"name": WORKER_INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{names.LWS_WORKER_INDEX_LABEL}']"}}}
    container["env"] = [index, *copy.deepcopy(serving.get("env", []))]
    return container


def pre_stop(plan: Plan, role: RolePlan, inputs: ServingInputs, image: str) -> Obj:
    return {"preStop": {"exec": {"command": _cli("save", plan, role, inputs, image)}}}
