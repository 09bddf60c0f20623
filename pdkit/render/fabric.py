"""The validation Jobs, rendered from the plan as plain dicts (like the serving manifests).

Four phases, run one after the other because each takes the nodes' GPUs (and EFA devices):
- `node-image`: one pod per GPU node with all its GPUs (so the NVIDIA runtime mounts nvidia-smi),
  printing the node image's record (/etc/pdkit/node-image.env, custom AMI only), the loaded driver
  version and GPUs, the NVSwitch fabric state, and whether efa and efa_nv_peermem are loaded
  (/proc/modules): what the GPU-less Image Builder instance cannot check (ami/README.md).
- `efa`: per role, an Indexed Job with one pod per node. Each pod reports the EFA devices it was
  given (`/dev/infiniband/uverbs*`), the efa provider's domains (`fi_info`), the node's devices and
  its locked-memory limit; then pods 2k and 2k+1 run `fi_pingpong` on the efa provider.
- `nccl`: one pod per GPU node (both roles), all GPUs and EFA devices each; pod 0 runs
  `all_reduce_perf` and `alltoall_perf` across every GPU through mpirun, which starts its daemons in
  the other pods with `kubectl exec` as its rsh agent (containers/kit/bin/kubectl-rsh.sh), as MPI
  Operator v1 did (kubexec.sh); the run's ServiceAccount may only exec into pods of this namespace.
- `uccl`: per decode replica, UCCL-EP's low-latency dispatch/combine benchmark across the group's
  nodes (torchrun rendezvous on pod 0), with the model's hidden size, top-k and experts.
- `mooncake` (KV transfer over Mooncake only): a decode node as Mooncake's target and a prefill node as
  its initiator, each in its role's serving pod spec. Each first initializes `mooncake.engine.TransferEngine`
  as SGLang does (P2PHANDSHAKE, the role's MOONCAKE_PROTOCOL), which logs which transport it installed;
  then the prefill pod writes into the decode pod's GPU memory with Mooncake's `transfer_engine_bench`
  (shipped in the mooncake wheel), as SGLang's prefill writes KV into decode.

Pods get devices from the device plugins and mount /dev/shm as a memory emptyDir. A check that stands
for a role runs as that role's serving pods run (pdkit/render/serving/role_pod.py): the `uccl` check in the
role's serving image with its resources, environment and security context, the `efa` probes with its
security context; by default that is the image's non-root user with no capability, no privilege and
the node's default seccomp profile, so a pass proves the role needs nothing more. The `mooncake` pods
run in their role's serving image with its resources, environment and security context. A role's `security`
setting applies here too, and sets this namespace's Pod Security level (role_pod.validation_pod_security).
The other checks (node-image, nccl) keep the RuntimeDefault profile. Every pod prints what it measured and exits 0:
the verdict is `pdkit validate`'s, from the logs (pdkit/ops/fabric/checks.py).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from pdkit.model.plan import ROLE_LABEL, Plan, RolePlan
from pdkit.model.thresholds import NCCL_MAX_BYTES, NCCL_MIN_BYTES, Thresholds
from pdkit.render import pod
from pdkit.render.pod import EFA, GPU, INSTANCE_TYPE_LABEL, JOB_NAME_LABEL, SHM_PATH, Obj
from pdkit.render.serving import names, role_pod
from pdkit.render.serving.environment import POD_INTERFACE, fabric_env

PHASES = ("node-image", "efa", "nccl", "uccl", "mooncake")
# mpirun's rsh agent in the validation image: `kubectl-rsh.sh HOST COMMAND...` = kubectl exec into HOST's pod.
RSH_AGENT = "kubectl-rsh.sh"
# torchrun's default rendezvous port, which uccl-ep-bench.sh also defaults to.
TORCHRUN_PORT = 29500
# Mooncake's P2P handshake binds a free port in [MC_MIN_RPC_PORT, MC_MAX_RPC_PORT] (default 15000-17000,
# mooncake-common environ.cpp); the target pins both ends to the default's first port so the initiator
# knows its segment name `<ip>:15000`. The next port carries the initiator's "done" to the target.
MOONCAKE_RPC_PORT = 15000
MOONCAKE_DONE_PORT = 15001
MOONCAKE_WAIT_SECONDS = 600
RUN_LABEL = "pdkit/validation-run"
CHECK_LABEL = "pdkit/validation-check"
# How long each phase may run before Kubernetes stops it (and pdkit reports a timeout).
PHASE_DEADLINE_SECONDS = {"node-image": 15 * 60, "efa": 15 * 60, "nccl": 40 * 60, "uccl": 20 * 60, "mooncake": 15 * 60}
# Finished Jobs disappear on their own an hour later, should pdkit be interrupted before its cleanup.
TTL_AFTER_FINISHED_SECONDS = 3600
# fi_pingpong's control-socket port (libfabric util/pingpong.c default), which efa-pingpong.sh keeps.
PINGPONG_PORT = 47592
PINGPONG_ITERATIONS = 10000
PINGPONG_TIMEOUT_SECONDS = 300
PINGPONG_CLIENT_ATTEMPTS = 60
WORKER_WAIT_SECONDS = 600
# A worker pod idles until the launcher's last kubectl exec drops this file (its own memory emptyDir).
WORKER_DONE_FILE = f"{SHM_PATH}/pdkit-nccl-done"
EFA_PROBE_CPU = "4"
EFA_PROBE_MEMORY = "8Gi"
NCCL_TESTS = ("all_reduce_perf", "alltoall_perf")
# The node image's record (pdkit.render.ami.MANIFEST), seen read-only under this path in the node-image pod.
NODE_IMAGE_DIR = "/etc/pdkit"
NODE_IMAGE_FILE = "node-image.env"
NODE_IMAGE_MOUNT = "/host/etc/pdkit"
NODE_IMAGE_MODULES = ("efa", "efa_nv_peermem")
NODE_IMAGE_CPU = "1"
NODE_IMAGE_MEMORY = "1Gi"


@dataclass(frozen=True)
class JobSpec:
    key: str
    phase: str
    job: Obj
    service: Obj
    pods: int

    @property
    def name(self) -> str:
        name: str = self.job["metadata"]["name"]
        return name


@dataclass(frozen=True)
class Bundle:
    namespace: Obj
    shared: list[Obj]
    jobs: list[JobSpec] = field(default_factory=list)
    # Namespaces a phase needs besides `namespace` (the node-image phase's, with a custom AMI).
    extra_namespaces: list[Obj] = field(default_factory=list)

    @property
    def namespace_name(self) -> str:
        name: str = self.namespace["metadata"]["name"]
        return name

    def phase(self, name: str) -> list[JobSpec]:
        return [j for j in self.jobs if j.phase == name]

    def objects(self) -> list[Obj]:
        out = [self.namespace, *self.extra_namespaces, *self.shared]
        for spec in self.jobs:
            out += [spec.service, spec.job]
        return out


def namespace_name(plan: Plan) -> str:
    return f"{plan.name}-validation"


def render(
    plan: Plan,
    th: Thresholds,
    *,
    image: str,
    run_id: str,
    role_images: dict[str, str] | None = None,
) -> Bundle:
    """`image` is the validation image (fabtests, nccl-tests); `role_images` the serving image of each
    role, for the checks that stand for a role (the validation image where not given)."""
    role_images = role_images or {}
    ns = namespace_name(plan)
    node_image = node_image_job(plan, th, image=image, run_id=run_id, namespace=ns)
    extra = [node_image_namespace(plan)] if reads_host_record(plan) else []
    jobs = [node_image]
    jobs += [efa_job(plan, role, th, image=image, run_id=run_id, namespace=ns) for role in plan.roles.values()]
    jobs.append(nccl_job(plan, th, image=image, run_id=run_id, namespace=ns))
    if plan.decode.ep_spans_nodes:
        decode_image = role_images.get("decode", image)
        jobs += [uccl_job(plan, th, replica=i, image=decode_image, run_id=run_id, namespace=ns) for i in range(plan.decode.replicas)]
    if plan.runs_mooncake:
        jobs += mooncake_jobs(plan, th, role_images=role_images, image=image, run_id=run_id, namespace=ns)
    return Bundle(
        namespace=namespace(plan),
        shared=launcher_access(plan, run_id, ns),
        jobs=jobs,
        extra_namespaces=extra,
    )


def _labels(plan: Plan, run_id: str, check: str) -> dict[str, str]:
    return {**names.common_labels(plan, "validation"), RUN_LABEL: run_id, CHECK_LABEL: check}


def _meta(plan: Plan, name: str, ns: str, run_id: str, check: str) -> Obj:
    return {"name": name, "namespace": ns, "labels": _labels(plan, run_id, check)}


def namespace(plan: Plan) -> Obj:
    # The validation pods need no privilege: "restricted" is enforced, not only audited; unless a role's
    # security escape hatch needs a lower level (role_pod.validation_pod_security).
    enforce = role_pod.validation_pod_security(plan)
    labels = {**names.common_labels(plan, "validation"), **pod.namespace_labels(plan, enforce=enforce, warn="restricted")}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace_name(plan), "labels": labels}}


def launcher_name(run_id: str) -> str:
    return f"nccl-launcher-{run_id}"


def launcher_access(plan: Plan, run_id: str, ns: str) -> list[Obj]:
    """The nccl pods' ServiceAccount, and a Role that lets it find and exec into pods of this namespace only.

    kubectl exec reads the pod, then opens pods/exec: over WebSocket (kubectl >= 1.31) that is a GET which
    Kubernetes >= 1.35 also authorizes as `create` (AuthorizePodWebsocketUpgradeCreatePermission).
    kubectl-rsh.sh lists pods to find the one behind a Job index (pod names end in a random suffix).
    """
    name = launcher_name(run_id)
    meta = _meta(plan, name, ns, run_id, "nccl")
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]},
    ]
    subject = {"kind": "ServiceAccount", "name": name, "namespace": ns}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta, "automountServiceAccountToken": False},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": rules},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [subject],
        },
    ]


def _service(plan: Plan, name: str, ns: str, run_id: str, check: str, port: int | None) -> Obj:
    """Headless: gives pod `<job>-<index>` the DNS name `<job>-<index>.<service>`, before it is ready. Port-less
    where the pods talk to no one (node-image) or mpirun's daemons pick their own ports (nccl)."""
    spec: Obj = {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {JOB_NAME_LABEL: name}}
    if port is not None:
        spec["ports"] = [{"name": "rendezvous", "port": port, "targetPort": port, "protocol": "TCP"}]
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(plan, name, ns, run_id, check), "spec": spec}


def _env(values: Mapping[str, str], **extra: str) -> list[Obj]:
    """`values`, then `extra`, then the node's name, which every check prints."""
    return [*pod.env(values), *pod.env(extra), {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]


def _container(
    plan: Plan,
    *,
    image: str,
    script: str,
    env: list[Obj],
    requests: dict[str, str],
    devices: dict[str, str],
    role: RolePlan | None = None,
) -> Obj:
    """With `role`, the container runs with that role's security context (pdkit/render/serving/role_pod.py)."""
    return {
        "name": "check",
        "image": image,
        "command": ["/bin/bash", "-c", script],
        "env": env,
        "resources": pod.device_resources(requests, devices),
        "securityContext": role_pod.container_security(role) if role is not None else pod.container_security(),
        "volumeMounts": [pod.shm_mount()],
    }


def _role_container(plan: Plan, role: RolePlan, *, image: str, script: str, **extra_env: str) -> Obj:
    """A check that stands for `role` runs as its serving pods do (role_pod): environment, resources, security."""
    env = _env({**role_pod.environment(plan, role, host_network=False), **extra_env})
    container = _container(plan, image=image, script=script, env=env, requests={}, devices={}, role=role)
    container["resources"] = role_pod.resources(plan, role)
    return container


def _check(
    plan: Plan,
    *,
    key: str,
    phase: str,
    ns: str,
    run_id: str,
    pods: int,
    roles: list[RolePlan],
    container: Obj,
    port: int | None = None,
) -> JobSpec:
    """One check: its Indexed Job `<key>-<run id>`, one pod per node, and the headless Service that names the pods."""
    name = f"{key}-{run_id}"
    job = _job(plan, name=name, ns=ns, run_id=run_id, check=key, phase=phase, pods=pods, roles=roles, container=container)
    return JobSpec(key=key, phase=phase, job=job, service=_service(plan, name, ns, run_id, key, port), pods=pods)


def _job(plan: Plan, *, name: str, ns: str, run_id: str, check: str, phase: str, pods: int, roles: list[RolePlan], container: Obj) -> Obj:
    # A check for one role runs with that role's pod security context (seccomp profile).
    pod_security = role_pod.pod_security(roles[0]) if len(roles) == 1 else pod.pod_security()
    placement: Obj
    if len(roles) == 1:
        placement = {"nodeSelector": pod.gpu_node_selector(plan, roles[0].labels)}
        node_affinity: Obj = {}
    else:
        placement = {}
        node_affinity = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": ROLE_LABEL, "operator": "In", "values": [r.name for r in roles]},
                                {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [plan.instance.name]},
                            ]
                        }
                    ]
                }
            }
        }
    pod_spec: Obj = {
        "restartPolicy": "Never",
        "subdomain": name,
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 10,
        "securityContext": pod_security,
        **placement,
        "tolerations": pod.tolerations(roles),
        "affinity": {**node_affinity, **pod.one_per_node({JOB_NAME_LABEL: name})},
        "containers": [container],
        "volumes": [pod.shm_volume(plan)],
    }
    labels = _labels(plan, run_id, check)
    spec = {
        "completionMode": "Indexed",
        "completions": pods,
        "parallelism": pods,
        "backoffLimit": 0,
        "activeDeadlineSeconds": PHASE_DEADLINE_SECONDS[phase],
        "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_SECONDS,
        "template": {"metadata": {"labels": labels}, "spec": pod_spec},
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta(plan, name, ns, run_id, check), "spec": spec}


def _host(job: str, index: int) -> str:
    return f"{job}-{index}.{job}"


# --- phase 1: EFA devices and fi_pingpong ---------------------------------------------------------


def efa_script(*, job: str, pods: int) -> str:
    return f"""set -u
idx="${{JOB_COMPLETION_INDEX}}"
uverbs=$(ls /dev/infiniband 2>/dev/null | grep -c '^uverbs')
domains=$(fi_info -p efa -t FI_EP_RDM 2>/dev/null | awk '/domain:/ {{print $2}}' | sort -u | wc -l)
sysfs=$(ls /sys/class/infiniband 2>/dev/null | wc -l)
echo "pdkit-probe index=$idx node=${{NODE_NAME}} uverbs=$uverbs efa_domains=$domains sysfs_devices=$sysfs memlock=$(ulimit -l)"
role=none
status=0
if [ $((idx % 2)) -eq 0 ]; then
  if [ $((idx + 1)) -lt {pods} ]; then
    role=server
    efa-pingpong.sh server
    status=$?
  fi
else
  role=client
  peer="{job}-$((idx - 1)).{job}"
  for attempt in $(seq 1 {PINGPONG_CLIENT_ATTEMPTS}); do
    efa-pingpong.sh client "$peer"
    status=$?
    [ "$status" -eq 0 ] && break
    sleep 2
  done
fi
echo "pdkit-exit index=$idx role=$role status=$status"
exit 0
"""


def efa_job(plan: Plan, role: RolePlan, th: Thresholds, *, image: str, run_id: str, namespace: str) -> JobSpec:
    key = f"efa-{role.name}"
    env = _env(
        fabric_env(plan, host_network=False), PINGPONG_ITERATIONS=str(PINGPONG_ITERATIONS), PINGPONG_TIMEOUT=str(PINGPONG_TIMEOUT_SECONDS)
    )
    container = _container(
        plan,
        image=image,
        script=efa_script(job=f"{key}-{run_id}", pods=role.nodes),
        env=env,
        requests={"cpu": EFA_PROBE_CPU, "memory": EFA_PROBE_MEMORY},
        devices={EFA: str(th.efa_devices_per_node)},
        role=role,
    )
    return _check(
        plan, key=key, phase="efa", ns=namespace, run_id=run_id, pods=role.nodes, roles=[role], container=container, port=PINGPONG_PORT
    )


# --- phase 2: nccl-tests across every GPU node -----------------------------------------------------


def mpirun_argv(*, job: str, pods: int, gpus_per_node: int, test: str) -> list[str]:
    hosts = ",".join([f"{job}-0:{gpus_per_node}"] + [f"{_host(job, i)}:{gpus_per_node}" for i in range(1, pods)])
    return [
        "mpirun",
        "-np",
        str(pods * gpus_per_node),
        "-N",
        str(gpus_per_node),
        "--host",
        hosts,
        "--bind-to",
        "none",
        # mpirun starts its daemons through kubectl exec, as it would through ssh; one level, no tree spawn.
        "--mca",
        "plm_rsh_agent",
        RSH_AGENT,
        "--mca",
        "plm_rsh_no_tree_spawn",
        "1",
        # MPI itself only bootstraps nccl-tests: keep it on TCP over the pod interface, EFA is NCCL's.
        "--mca",
        "pml",
        "ob1",
        "--mca",
        "btl",
        "tcp,self",
        "--mca",
        "btl_tcp_if_include",
        POD_INTERFACE,
        "--mca",
        "oob_tcp_if_include",
        POD_INTERFACE,
        test,
        "-b",
        NCCL_MIN_BYTES,
        "-e",
        NCCL_MAX_BYTES,
        "-f",
        "2",
        "-g",
        "1",
        # nccl-tests' JSON output (-J FILE.json, src/common.cu since v2.17.3; the pin is v2.19.6): rank 0 writes it, the checks prefer it.
        "-J",
        nccl_json_path(test),
    ]


def nccl_json_path(test: str) -> str:
    return f"{SHM_PATH}/{test}.json"


def nccl_script(*, job: str, pods: int, gpus_per_node: int) -> str:
    workers = " ".join(_host(job, i) for i in range(1, pods))
    runs = "\n".join(
        f'echo "pdkit-begin test={test}"\n{shlex.join(mpirun_argv(job=job, pods=pods, gpus_per_node=gpus_per_node, test=test))} 2>&1\n'
        f'echo "pdkit-end test={test} status=$?"\n'
        f'echo "pdkit-begin json={test}"\ncat {nccl_json_path(test)} 2>&1\necho "pdkit-end json={test} status=$?"'
        for test in NCCL_TESTS
    )
    # Workers idle until the launcher (pod 0) drops WORKER_DONE_FILE in them; the Job's deadline bounds both.
    return f"""set -u
idx="${{JOB_COMPLETION_INDEX}}"
if [ "$idx" -ne 0 ]; then
  echo "pdkit-worker index=$idx node=${{NODE_NAME}}"
  while [ ! -e {WORKER_DONE_FILE} ]; do sleep 2; done
  exit 0
fi
release() {{
  for host in {workers}; do {RSH_AGENT} "$host" touch {WORKER_DONE_FILE}; done
}}
deadline=$((SECONDS + {WORKER_WAIT_SECONDS}))
for host in {workers}; do
  until {RSH_AGENT} "$host" true; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "pdkit-end test=setup status=1"
      release
      exit 0
    fi
    sleep 5
  done
done
{runs}
release
exit 0
"""


def nccl_job(plan: Plan, th: Thresholds, *, image: str, run_id: str, namespace: str) -> JobSpec:
    roles = list(plan.roles.values())
    pods = sum(r.nodes for r in roles)
    name = f"nccl-{run_id}"
    container = _container(
        plan,
        image=image,
        script=nccl_script(job=name, pods=pods, gpus_per_node=th.gpus_per_node),
        env=_env(fabric_env(plan, host_network=False)),
        requests=role_pod.node_share(plan),
        devices={GPU: str(th.gpus_per_node), EFA: str(th.efa_devices_per_node)},
    )
    spec = _check(plan, key="nccl", phase="nccl", ns=namespace, run_id=run_id, pods=pods, roles=roles, container=container)
    pod_spec = spec.job["spec"]["template"]["spec"]
    # The one pod token of the run: kubectl in pod 0 uses it, and the Role lets it exec into this namespace's pods only.
    pod_spec["serviceAccountName"] = launcher_name(run_id)
    pod_spec["automountServiceAccountToken"] = True
    return spec


# --- phase 3: UCCL-EP low-latency dispatch/combine on a decode group -------------------------------


def uccl_script(*, job: str, pods: int, th: Thresholds) -> str:
    bench = [
        "uccl-ep-bench.sh",
        "low-latency",
        f"--num-tokens={th.uccl_num_tokens}",
        f"--hidden={th.uccl_hidden}",
        f"--num-topk={th.uccl_topk}",
        f"--num-experts={th.uccl_experts}",
    ]
    return f"""set -u
export NODE_RANK="${{JOB_COMPLETION_INDEX}}" NNODES={pods} MASTER_ADDR={_host(job, 0)} MASTER_PORT={TORCHRUN_PORT} GPUS_PER_NODE={th.gpus_per_node}
{shlex.join(bench)} 2>&1
echo "pdkit-exit index=$NODE_RANK status=$?"
exit 0
"""


def uccl_job(plan: Plan, th: Thresholds, *, replica: int, image: str, run_id: str, namespace: str) -> JobSpec:
    decode, key, pods = plan.decode, f"uccl-decode-{replica}", plan.decode.nodes_per_replica
    # Decode's own pod, so a pass predicts decode; UCCL-EP picks its bootstrap interface from UCCL_SOCKET_IFNAME,
    # which its README asks for explicitly.
    script = uccl_script(job=f"{key}-{run_id}", pods=pods, th=th)
    container = _role_container(plan, decode, image=image, script=script, UCCL_SOCKET_IFNAME=POD_INTERFACE)
    return _check(
        plan, key=key, phase="uccl", ns=namespace, run_id=run_id, pods=pods, roles=[decode], container=container, port=TORCHRUN_PORT
    )


# --- phase 4: Mooncake KV write from a prefill node into a decode node -------------------------------


def mooncake_job_name(role: str, run_id: str) -> str:
    return f"mooncake-{role}-{run_id}"


# SGLang's own call (sglang/srt/disaggregation/mooncake/transfer_engine.py): P2PHANDSHAKE metadata, the
# protocol from MOONCAKE_PROTOCOL (default "rdma"), no device filter. Mooncake's EFA build then logs
# "EFA transport installed successfully" or, for any other protocol, "TCP transport installed successfully"
# (mooncake-integration/transfer_engine/transfer_engine_py.cpp, initializeExt).
MOONCAKE_PROBE = (
    "import os, socket\n"
    "from mooncake.engine import TransferEngine\n"
    "protocol = os.environ.get('MOONCAKE_PROTOCOL', 'rdma')\n"
    "rc = TransferEngine().initialize(socket.gethostbyname(socket.gethostname()), 'P2PHANDSHAKE', protocol, '')\n"
    "print(f'pdkit-mooncake-init protocol={protocol} rc={rc}', flush=True)\n"
)


def mooncake_bench_argv(th: Thresholds, *, mode: str, segment: str | None = None) -> list[str]:
    argv = [
        "transfer_engine_bench",
        f"--mode={mode}",
        '--protocol="${MOONCAKE_PROTOCOL:-rdma}"',
        "--metadata_server=P2PHANDSHAKE",
        f"--buffer_size={th.mooncake_buffer_bytes_per_gpu}",
        "--gpu_id=-1",  # every GPU, so every NIC: Mooncake's EFA guide measures p5en this way
    ]
    if mode == "initiator":
        argv += [
            f"--segment_id={segment}",
            "--operation=write",
            f"--duration={th.mooncake_duration_s}",
            f"--threads={th.mooncake_threads}",
            f"--block_size={th.mooncake_block_bytes}",
            f"--batch_size={th.mooncake_batch}",
            "--report_unit=GB",
        ]
    return argv


def mooncake_target_script(th: Thresholds) -> str:
    bench = " ".join(mooncake_bench_argv(th, mode="target"))
    return f"""set -u
echo "pdkit-mooncake role=target node=${{NODE_NAME}}"
python3 -c "{MOONCAKE_PROBE}" 2>&1
MC_MIN_RPC_PORT={MOONCAKE_RPC_PORT} MC_MAX_RPC_PORT={MOONCAKE_RPC_PORT} {bench} 2>&1 &
bench=$!
python3 -c "import socket; s = socket.create_server(('', {MOONCAKE_DONE_PORT})); s.settimeout({MOONCAKE_WAIT_SECONDS + PHASE_DEADLINE_SECONDS["mooncake"] // 2}); s.accept()" 2>&1
kill -TERM "$bench" 2>/dev/null
wait "$bench"
echo "pdkit-exit role=target status=$?"
exit 0
"""


def mooncake_initiator_script(th: Thresholds, *, target_job: str) -> str:
    host = _host(target_job, 0)
    bench = " ".join(mooncake_bench_argv(th, mode="initiator", segment=f"$ip:{MOONCAKE_RPC_PORT}"))
    return f"""set -u
echo "pdkit-mooncake role=initiator node=${{NODE_NAME}}"
python3 -c "{MOONCAKE_PROBE}" 2>&1
ip=""
for attempt in $(seq 1 {MOONCAKE_WAIT_SECONDS // 2}); do
  ip=$(getent hosts {host} | awk '{{print $1; exit}}')
  [ -n "$ip" ] && timeout 2 bash -c "</dev/tcp/$ip/{MOONCAKE_RPC_PORT}" 2>/dev/null && break
  ip=""
  sleep 2
done
status=1
if [ -z "$ip" ]; then
  echo "pdkit-mooncake-error target {host}:{MOONCAKE_RPC_PORT} never listened"
else
  {bench} 2>&1
  status=$?
fi
echo "pdkit-exit role=initiator status=$status"
[ -n "$ip" ] && timeout 10 bash -c "</dev/tcp/$ip/{MOONCAKE_DONE_PORT}" 2>/dev/null
exit 0
"""


def mooncake_jobs(plan: Plan, th: Thresholds, *, role_images: dict[str, str], image: str, run_id: str, namespace: str) -> list[JobSpec]:
    """Decode's first node as the target, prefill's first as the initiator, each exactly as its role serves."""
    target = mooncake_job_name("decode", run_id)
    scripts = {"decode": mooncake_target_script(th), "prefill": mooncake_initiator_script(th, target_job=target)}
    ports = {"decode": MOONCAKE_RPC_PORT, "prefill": MOONCAKE_DONE_PORT}
    specs = []
    for name in ("decode", "prefill"):  # the target first: it must listen before the initiator connects
        role = plan.roles[name]
        container = _role_container(plan, role, image=role_images.get(name, image), script=scripts[name])
        key = f"mooncake-{name}"
        specs.append(
            _check(
                plan, key=key, phase="mooncake", ns=namespace, run_id=run_id, pods=1, roles=[role], container=container, port=ports[name]
            )
        )
    return specs


# --- phase 0: what the node image put on the node, seen with the GPUs ------------------------------


def reads_host_record(plan: Plan) -> bool:
    """Only the kit's custom AMI writes /etc/pdkit/node-image.env; the EKS-optimized AMI has no such directory."""
    return plan.custom_ami


def node_image_namespace_name(plan: Plan) -> str:
    return f"{namespace_name(plan)}-node-image"


def node_image_namespace(plan: Plan) -> Obj:
    """The node-image pod's own namespace, used only with a custom AMI.

    Pod Security has no level between "restricted" and "privileged" that admits a hostPath volume
    (baseline forbids every hostPath), so this namespace enforces "privileged" and keeps only the
    node-image Job; the pod itself still meets "restricted" except for that one read-only volume
    (tests/test_fabric_manifests.py). Warnings and audit stay at "baseline", which flags anything
    more than the hostPath.
    """
    pss = pod.namespace_labels(plan, enforce="privileged", warn="baseline", audit="baseline")
    labels = {**names.common_labels(plan, "validation"), **pss}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": node_image_namespace_name(plan), "labels": labels}}


def node_image_script() -> str:
    """Four sections between `pdkit-begin section=NAME` and `pdkit-end section=NAME status=N` (parsers.parse_node_image)."""
    record = f"{NODE_IMAGE_MOUNT}/{NODE_IMAGE_FILE}"
    modules = "|".join(NODE_IMAGE_MODULES)
    return f"""set -u
echo "pdkit-node-image node=${{NODE_NAME}}"
echo "pdkit-begin section=env"
if [ -e {record} ]; then
  cat {record}
else
  echo absent
fi
echo "pdkit-end section=env status=$?"
echo "pdkit-begin section=gpus"
nvidia-smi --query-gpu=driver_version,name --format=csv,noheader 2>&1
echo "pdkit-end section=gpus status=$?"
echo "pdkit-begin section=fabric"
nvidia-smi -q 2>&1 | awk '/^GPU [0-9A-Fa-f]/ {{f=0; print; next}} f {{ match($0, /^ */); if (RLENGTH > fi) {{print; next}}; f=0 }} /^ *Fabric *$/ {{f=1; match($0, /^ */); fi=RLENGTH; print}}'
echo "pdkit-end section=fabric status=${{PIPESTATUS[0]}}"
echo "pdkit-begin section=modules"
grep -E '^({modules}) ' /proc/modules
echo "pdkit-end section=modules status=$?"
exit 0
"""


def node_image_job(plan: Plan, th: Thresholds, *, image: str, run_id: str, namespace: str) -> JobSpec:
    roles = list(plan.roles.values())
    pods = sum(r.nodes for r in roles)
    ns = node_image_namespace_name(plan) if reads_host_record(plan) else namespace
    container = _container(
        plan,
        image=image,
        script=node_image_script(),
        env=_env(fabric_env(plan, host_network=False)),
        requests={"cpu": NODE_IMAGE_CPU, "memory": NODE_IMAGE_MEMORY},
        devices={GPU: str(th.gpus_per_node)},  # all of the instance table's, like every phase
    )
    # This pod needs no shared memory.
    container["volumeMounts"] = []
    spec = _check(plan, key="node-image", phase="node-image", ns=ns, run_id=run_id, pods=pods, roles=roles, container=container)
    pod_spec = spec.job["spec"]["template"]["spec"]
    pod_spec["volumes"] = []
    if reads_host_record(plan):
        # The one hostPath in the kit, and only here: a validation Job that runs for seconds with no
        # serving traffic, mounting read-only the single directory the AMI components write
        # (pdkit.render.ami.MANIFEST) to compare it with the driver actually loaded. Type Directory: a node
        # without it fails to mount instead of the runtime creating the directory on the host.
        pod_spec["volumes"].append({"name": "node-image", "hostPath": {"path": NODE_IMAGE_DIR, "type": "Directory"}})
        container["volumeMounts"].append({"name": "node-image", "mountPath": NODE_IMAGE_MOUNT, "readOnly": True})
    return spec
