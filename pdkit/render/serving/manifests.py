"""The Kubernetes objects of one deployment, rendered from the plan as plain dicts.

The CDK cluster stack applies them (`render`) and `pdkit render` writes them as YAML for kubectl and
GitOps users. Security posture, each choice explained in runbooks/02-serve.md ("Pod security"):
- GPUs and EFA devices come from the device plugins (`nvidia.com/gpu`, `vpc.amazonaws.com/efa`):
  no privileged container, no hostPath to /dev, no added capability. The SGLang process runs as the
  image's non-root user, for which Kubernetes cannot make an added capability effective anyway (no
  ambient capabilities), so EFA's locked-memory need is met by containerd's own limit, which a systemd
  drop-in from the GPU launch template's user data raises (pdkit/render/node_config.py); the container checks
  that limit before SGLang starts. A role that needs more has an escape hatch (role_pod).
- The namespace enforces Pod Security "baseline" (audited against "restricted"). The weights volume
  is a PersistentVolume the kit creates on the node's NVMe, so pods mount a claim, not a hostPath.
- hostNetwork is off; turning it on (plan.host_network) also lowers the namespace to
  "privileged", which hostNetwork requires.
"""

from __future__ import annotations

import math
from typing import Any

from pdkit.model.placement import PLACED_ROLE_LABEL
from pdkit.model.plan import ROLE_LABEL, Plan, RolePlan
from pdkit.pods.compile_cache import CACHE_ROOT
from pdkit.render import pod
from pdkit.render.node_config import CONTAINERD_MEMLOCK_DROPIN, NVME_MOUNT
from pdkit.render.pod import Obj
from pdkit.render.serving import compile_cache_objects, drain, names, role_pod
from pdkit.render.serving.environment import fabric_env
from pdkit.render.serving.inputs import ServingInputs
from pdkit.render.serving.ports import ROUTER_METRICS_PORT, ROUTER_PORT
from pdkit.render.serving.router_args import router_argv
from pdkit.render.serving.sglang_args import BOOTSTRAP_PORT, DIST_INIT_PORT, SGLANG_PORT, WEIGHTS_ROOT, launch_argv, model_dir, role_env

DS_API = "disaggregatedset.x-k8s.io/v1"
# nodeadm `localStorage.strategy: RAID0` mounts the instance NVMe array at <NVME_MOUNT>0 (EKS AL2023 AMI).
NODE_WEIGHTS_DIR = f"{NVME_MOUNT}0/pdkit-weights"
# SGLang answers /health with a one-token generation that may take SGLANG_HEALTH_CHECK_TIMEOUT (20 s).
HEALTH_TIMEOUT_SECONDS = 25
STARTUP_PERIOD_SECONDS = 30
# A failed liveness check restarts the whole group (RecreateGroupOnPodRestart) and reloads ~760 GB:
# only after five minutes of consecutive failures.
LIVENESS_PERIOD_SECONDS = 60
LIVENESS_FAILURES = 5
LB_CONTROLLER_CLASS = "service.k8s.aws/nlb"

# EFA registers host buffers with the NIC, which counts against RLIMIT_MEMLOCK for a non-root
# process; a small limit fails deep inside libfabric/NCCL. Say so before SGLang starts.
MEMLOCK_CHECK = (
    'limit="$(ulimit -l)"; if [ "$limit" != unlimited ]; then '
    'echo "pdkit: the locked-memory limit is ${limit} KiB; EFA needs it unlimited. '
    f"Fix: the GPU nodes need containerd's systemd drop-in {CONTAINERD_MEMLOCK_DROPIN} (LimitMEMLOCK=infinity), "
    "which the launch template's user data writes (pdkit/render/node_config.py); on the node: systemctl show containerd -p LimitMEMLOCK "
    '(runbooks/02-serve.md, Prerequisites 2)" >&2; '
    'exit 78; fi; exec "$@"'
)


# SGLang 0.5.23: "--admin-api-key: Set admin API key for sensitive management endpoints ... When set,
# admin endpoints require this key and do NOT accept --api-key" (conformance/help). The key comes from
# a Kubernetes Secret the operator creates once per namespace and deployment (runbooks/02-serve.md,
# Prerequisites): generated on the operator's machine, it is never in a CloudFormation template, a
# CDK asset or git, as a Secret in these manifests would be (the serving stack applies them).
ADMIN_KEY_FLAG = "--admin-api-key"
ADMIN_KEY_ENV = "PDKIT_SGLANG_ADMIN_API_KEY"
ADMIN_KEY_SECRET_KEY = "admin-api-key"  # noqa: S105 - the name of the Secret's data field, not a key


def admin_key_secret(plan: Plan) -> str:
    return f"{plan.name}-sglang-admin"


def admin_key_command(plan: Plan) -> list[str]:
    """The one command that creates the Secret (32 random bytes, hex)."""
    return [
        "kubectl",
        "-n",
        names.namespace(plan),
        "create",
        "secret",
        "generic",
        admin_key_secret(plan),
        f'--from-literal={ADMIN_KEY_SECRET_KEY}="$(openssl rand -hex 32)"',
    ]


def admin_key_env(plan: Plan) -> Obj:
    # Not optional: without the Secret the container waits (CreateContainerConfigError, retried by the
    # kubelet) instead of starting with an unexpanded, guessable "$(...)" as its key.
    ref = {"name": admin_key_secret(plan), "key": ADMIN_KEY_SECRET_KEY, "optional": False}
    return {"name": ADMIN_KEY_ENV, "valueFrom": {"secretKeyRef": ref}}


def render(plan: Plan, inputs: ServingInputs) -> list[Obj]:
    """Every object, in apply order (namespace and cluster-scoped objects first)."""
    cache = compile_cache_objects
    objs: list[Obj] = [
        namespace(plan, inputs),
        service_account(plan, "weights-reader", "weights read-only: EKS Pod Identity association made by the serving stack"),
        service_account(plan, "weights-writer", "weights write (import Job): Pod Identity association made by the serving stack"),
        service_account(plan, "router", "none: the router calls no AWS API", kube_api=True),
        fabric_config_map(plan, inputs),
        *node_storage(plan, "weights", names.weights_claim(plan), NODE_WEIGHTS_DIR, _weights_capacity(plan)),
        *node_storage(plan, cache.CACHE_VOLUME, cache.claim_name(plan), cache.NODE_CACHE_DIR, cache.CACHE_CAPACITY),
    ]
    objs.append(disaggregated_set(plan, inputs))
    for role in plan.roles.values():
        objs.append(role_disruption_budget(plan, role))
    objs += [router_discovery_role(plan), router_discovery_binding(plan)]
    objs += [router_deployment(plan, inputs), router_disruption_budget(plan), router_service(plan)]
    objs += [sglang_network_policy(plan), router_network_policy(plan)]
    objs += [block_lifecycle_role(plan), block_lifecycle_binding(plan)]
    objs += [block_lifecycle_node_role(plan), block_lifecycle_node_binding(plan)]
    objs += [block_lifecycle_node_policy(plan), block_lifecycle_node_policy_binding(plan)]
    return objs


def _meta(plan: Plan, name: str, component: str, *, namespaced: bool = True, **extra: Any) -> Obj:
    meta: Obj = {"name": name}
    if namespaced:
        meta["namespace"] = names.namespace(plan)
    meta["labels"] = names.common_labels(plan, component)
    meta.update(extra)
    return meta


def namespace(plan: Plan, inputs: ServingInputs) -> Obj:
    # hostNetwork and a role's security escape hatch are forbidden by "baseline": the plan lowers
    # enforcement with them (plan.pod_security); `pdkit render --host-network` lowers it too.
    enforce = "privileged" if inputs.host_network else plan.pod_security
    labels = pod.namespace_labels(plan, enforce=enforce, warn=enforce, audit="restricted")
    # Several deployments may share the namespace: no deployment-specific label on it.
    meta = {"name": names.namespace(plan), "labels": {names.MANAGED_BY_LABEL: "pdkit", **labels}}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def service_account(plan: Plan, purpose: str, aws_access: str, *, kube_api: bool = False) -> Obj:
    # EKS Pod Identity binds the role through an association on (namespace, service account), not an
    # annotation; this annotation only tells a reader which association to expect. Only a pod that
    # calls the Kubernetes API (the router's worker discovery) gets a token.
    meta = _meta(plan, names.service_account(plan, purpose), purpose, annotations={"pdkit/pod-identity": aws_access})
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta, "automountServiceAccountToken": kube_api}


def fabric_config_map(plan: Plan, inputs: ServingInputs) -> Obj:
    env = fabric_env(plan, host_network=inputs.host_network)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(plan, names.config_map(plan), "sglang"), "data": env}


def _weights_capacity(plan: Plan) -> str:
    return f"{math.ceil(plan.model.checkpoint_gb * 1.25)}G"


def node_storage(plan: Plan, component: str, claim: str, path: str, capacity: str) -> list[Obj]:
    """A directory on the node's NVMe as a PersistentVolume and the one claim it is pre-bound to: it
    outlives pods (a restarted group finds its weights staged, its kernels compiled) and keeps hostPath
    out of the pod spec."""
    volume = f"{names.namespace(plan)}-{claim}"
    pv_spec = {
        "capacity": {"storage": capacity},
        "accessModes": ["ReadWriteMany"],
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "",
        "volumeMode": "Filesystem",
        "claimRef": {"namespace": names.namespace(plan), "name": claim},
        "hostPath": {"path": path, "type": "DirectoryOrCreate"},
    }
    claim_spec = {
        "accessModes": ["ReadWriteMany"],
        "storageClassName": "",
        "volumeName": volume,
        "resources": {"requests": {"storage": capacity}},
    }
    return [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": _meta(plan, volume, component, namespaced=False), "spec": pv_spec},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": _meta(plan, claim, component), "spec": claim_spec},
    ]


def startup_failure_threshold(plan: Plan) -> int:
    """Probes start after staging and the compile-cache step; the budget covers loading the shard, CUDA
    graphs, warm-up and, on a first boot whose precompile did not finish, SGLang's own kernel compile."""
    return math.ceil(plan.estimates.first_boot_budget_minutes * 60 / STARTUP_PERIOD_SECONDS)


def _health_probe(period: int, failures: int) -> Obj:
    return {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": HEALTH_TIMEOUT_SECONDS,
        "failureThreshold": failures,
    }


def _pod_labels(plan: Plan, role: RolePlan) -> dict[str, str]:
    return {**names.common_labels(plan, "sglang"), ROLE_LABEL: role.name}


def _sglang_container(plan: Plan, role: RolePlan, inputs: ServingInputs) -> Obj:
    ports = [{"name": "http", "containerPort": SGLANG_PORT}, {"name": "dist-init", "containerPort": DIST_INIT_PORT}]
    if role.name == "prefill":
        ports.append({"name": "bootstrap", "containerPort": BOOTSTRAP_PORT})
    env = pod.env(role_env(plan, role.name))
    container: Obj = {
        "name": "sglang",
        "image": inputs.role_image(role.name),
        "command": ["/bin/sh", "-c", MEMLOCK_CHECK, "pdkit-memlock-check"],
        # Kubernetes expands $(VAR) in args from the container's env: the key never enters the pod spec.
        "args": [*launch_argv(plan, role.name), ADMIN_KEY_FLAG, f"$({ADMIN_KEY_ENV})"],
        "ports": ports,
        "envFrom": [{"configMapRef": {"name": names.config_map(plan)}}],
        # Image, resources, security and environment shared with `pdkit validate` (role_pod).
        "resources": role_pod.resources(plan, role),
        "startupProbe": _health_probe(STARTUP_PERIOD_SECONDS, startup_failure_threshold(plan)),
        "readinessProbe": _health_probe(30, 2),
        "livenessProbe": _health_probe(LIVENESS_PERIOD_SECONDS, LIVENESS_FAILURES),
        "securityContext": role_pod.container_security(role),
        "volumeMounts": [
            {"name": "weights", "mountPath": WEIGHTS_ROOT, "readOnly": True},
            pod.shm_mount(),
            compile_cache_objects.mount(),
        ],
    }
    container["lifecycle"] = compile_cache_objects.pre_stop(plan, role, inputs, str(container["image"]))
    env.append(admin_key_env(plan))
    container["env"] = env
    return container


def _staging_container(plan: Plan, inputs: ServingInputs, image: str) -> Obj:
    """Runs from the role's own serving image (both serving images carry the staging modules): one pull per node."""
    return {
        "name": "stage-weights",
        "image": image,
        "command": [
            "python3",
            "-m",
            "pdkit.pods.staging",
            "--bucket",
            inputs.weights_bucket,
            "--prefix",
            inputs.weights_prefix,
            "--dest",
            model_dir(plan),
            "--region",
            plan.region,
            "--shared-dir",
            CACHE_ROOT,
        ],
        "resources": {"requests": {"cpu": "32", "memory": "32Gi"}},
        # Root only to write into the root-owned node directory; no capability, no escalation.
        "securityContext": {
            "runAsUser": 0,
            **pod.container_security(),
            "runAsNonRoot": False,
            "seccompProfile": {"type": pod.RUNTIME_DEFAULT},
        },
        "volumeMounts": [{"name": "weights", "mountPath": WEIGHTS_ROOT}, compile_cache_objects.mount()],
    }


def sglang_pod_template(plan: Plan, role: RolePlan, inputs: ServingInputs) -> Obj:
    labels = _pod_labels(plan, role)
    # Any GPU node may serve any role: the role follows the network topology (pdkit/model/placement.py), so the
    # pod tolerates every GPU role's taint and only prefers its placed role, then its node group's role.
    prefer = [
        {"weight": weight, "preference": {"matchExpressions": [{"key": key, "operator": "In", "values": [role.name]}]}}
        for key, weight in ((PLACED_ROLE_LABEL, 100), (ROLE_LABEL, 10))
    ]
    serving = _sglang_container(plan, role, inputs)
    spec: Obj = {
        "serviceAccountName": names.service_account(plan, "weights-reader"),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        # The preStop hook saves the compile cache at the end-of-block drain (compile_cache_objects).
        "terminationGracePeriodSeconds": compile_cache_objects.SAVE_GRACE_SECONDS,
        "securityContext": role_pod.pod_security(role),
        "nodeSelector": pod.gpu_node_selector(plan, plan.gpu_node_labels),
        "tolerations": pod.tolerations(plan.roles.values()),
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": prefer}, **pod.one_per_node(_sglang_labels(plan))},
        "initContainers": [
            _staging_container(plan, inputs, str(serving["image"])),
            compile_cache_objects.warm_container(plan, role, inputs, serving),
        ],
        "containers": [serving],
        "volumes": [
            {"name": "weights", "persistentVolumeClaim": {"claimName": names.weights_claim(plan)}},
            pod.shm_volume(plan),
            compile_cache_objects.pod_volume(plan),
        ],
    }
    if inputs.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    metadata: Obj = {"labels": labels}
    if role.name == "prefill":
        # The router discovers prefill pods by label and reads their PD bootstrap port from here.
        metadata["annotations"] = {names.BOOTSTRAP_PORT_ANNOTATION: str(BOOTSTRAP_PORT)}
    return {"metadata": metadata, "spec": spec}


def role_rollout(role: RolePlan) -> Obj:
    """A Capacity Block has no spare GPU node to surge onto, and the DisaggregatedSet's default (maxSurge 1)
    would leave the new revision Pending forever. Every group of the role goes at once (maxUnavailable =
    replicas, maxSurge 0): a rollout is a full stop-and-start of serving, planned as such (runbooks/02-serve.md)."""
    return {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxUnavailable": role.replicas, "maxSurge": 0}}


def disaggregated_set(plan: Plan, inputs: ServingInputs) -> Obj:
    """Prefill and decode as the roles of one object: the LWS controller rolls them out together, so a new
    prefill is never paired with an old decode (kubernetes-sigs/lws v0.10.0, KEP-766). It creates one
    LeaderWorkerSet per role, named per slice and revision: everything else finds them by label."""
    roles = []
    for role in plan.roles.values():
        lws_spec = {
            "replicas": role.replicas,
            # Workers must start with the leader: SGLang's ranks rendezvous before the leader can ever be
            # Ready, so LeaderReady would wait forever.
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": role_rollout(role),
            "networkConfig": {"subdomainPolicy": "Shared"},
            "leaderWorkerTemplate": {
                "size": role.nodes_per_replica,
                # A restarted rank cannot rejoin the NCCL/EP groups of the others: restart the group together.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "workerTemplate": sglang_pod_template(plan, role, inputs),
            },
        }
        # The controller copies these labels onto the role's LeaderWorkerSets: `pdkit status` finds them by role.
        lws_meta = {"labels": {**names.common_labels(plan, "sglang"), ROLE_LABEL: role.name}}
        roles.append({"name": role.name, "metadata": lws_meta, "spec": lws_spec})
    meta = _meta(plan, names.disaggregated_set(plan), "sglang")
    return {"apiVersion": DS_API, "kind": "DisaggregatedSet", "metadata": meta, "spec": {"roles": roles}}


def role_disruption_budget(plan: Plan, role: RolePlan) -> Obj:
    """At most one pod, hence one group, at a time (none with a single group): evicting any pod of a
    group takes the whole group down (RecreateGroupOnPodRestart), so a budget of N pods would let N
    groups go at once. The end-of-block drain never meets this budget: it scales the DisaggregatedSet's
    roles to zero first (pdkit/render/serving/drain.py), which deletes the pods rather than evicting them.
    Not-ready pods (the rest of a group already going down) can always be evicted. The selector is the
    DisaggregatedSet's role labels, so it covers the pods of every revision."""
    spec = {
        "maxUnavailable": 1 if role.replicas > 1 else 0,
        "selector": {"matchLabels": names.role_selector(plan, role.name)},
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }
    meta = _meta(plan, names.role_object(plan, role.name), "sglang")
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta, "spec": spec}


def block_lifecycle_role(plan: Plan) -> Obj:
    """What the block lifecycle Lambda does through the API (pdkit/render/serving/drain.py): scale the roles of
    this deployment's DisaggregatedSet (a JSON patch of spec.roles[i].spec.replicas; the controller
    reverts a patch of its LeaderWorkerSets) and list pods to see them go."""
    group, _ = DS_API.split("/")
    rules = [
        {
            "apiGroups": [group],
            "resources": ["disaggregatedsets"],
            "resourceNames": [drain.drain_plan(plan).disaggregated_set],
            "verbs": ["get", "patch"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]
    meta = _meta(plan, drain.lifecycle_rbac_name(plan), "block-lifecycle")
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": rules}


def block_lifecycle_binding(plan: Plan) -> Obj:
    """Binds the Role to the Kubernetes group the lifecycle function's EKS access entry carries."""
    name = drain.lifecycle_rbac_name(plan)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(plan, name, "block-lifecycle"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": drain.LIFECYCLE_GROUP}],
    }


def block_lifecycle_node_role(plan: Plan) -> Obj:
    """Nodes are cluster-scoped, so labelling them with their placed role (pdkit/model/placement.py) needs a
    ClusterRole: read and patch Nodes, nothing else. The admission policy below narrows `patch` to that label."""
    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}]
    meta = _meta(plan, drain.lifecycle_node_rbac_name(plan), "block-lifecycle", namespaced=False)
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta, "rules": rules}


def block_lifecycle_node_binding(plan: Plan) -> Obj:
    name = drain.lifecycle_node_rbac_name(plan)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _meta(plan, name, "block-lifecycle", namespaced=False),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": drain.LIFECYCLE_GROUP}],
    }


def block_lifecycle_node_policy(plan: Plan) -> Obj:
    """RBAC cannot scope `patch` to one label, so a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1,
    GA in Kubernetes 1.30: https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/)
    refuses any Node update by the lifecycle group that changes more than the `pdkit/placed-role` label, or
    sets it to anything but a role. Its matchCondition limits it to that group's requests (request.userInfo.groups)."""
    label = PLACED_ROLE_LABEL
    roles = ", ".join(f"'{r}'" for r in plan.roles)
    validations = [
        {"expression": "object.spec == oldObject.spec", "message": "the block lifecycle may not change a Node's spec"},
        {
            "expression": "has(object.metadata.annotations) == has(oldObject.metadata.annotations) && "
            "(!has(object.metadata.annotations) || object.metadata.annotations == oldObject.metadata.annotations)",
            "message": "the block lifecycle may not change a Node's annotations",
        },
        {
            "expression": "has(object.metadata.labels) && has(oldObject.metadata.labels) && "
            f"object.metadata.labels.all(k, k == '{label}' || (k in oldObject.metadata.labels && "
            "oldObject.metadata.labels[k] == object.metadata.labels[k])) && "
            f"oldObject.metadata.labels.all(k, k == '{label}' || k in object.metadata.labels)",
            "message": f"the block lifecycle may change no Node label but {label}",
        },
        {
            "expression": f"!('{label}' in object.metadata.labels) || object.metadata.labels['{label}'] in [{roles}]",
            "message": f"{label} must be one of {', '.join(plan.roles)}",
        },
    ]
    spec = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}]
        },
        "matchConditions": [{"name": "block-lifecycle", "expression": f"'{drain.LIFECYCLE_GROUP}' in request.userInfo.groups"}],
        "validations": validations,
    }
    meta = _meta(plan, drain.lifecycle_node_rbac_name(plan), "block-lifecycle", namespaced=False)
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": meta, "spec": spec}


def block_lifecycle_node_policy_binding(plan: Plan) -> Obj:
    """A policy without a binding does nothing: Deny puts it in force."""
    name = drain.lifecycle_node_rbac_name(plan)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": _meta(plan, name, "block-lifecycle", namespaced=False),
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }


def router_discovery_role(plan: Plan) -> Obj:
    """smg's Kubernetes discovery watches pods in this namespace (smg 1.13.0 --service-discovery-namespace):
    read-only, pods only."""
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    meta = _meta(plan, f"{names.router_name(plan)}-discovery", "router")
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": rules}


def router_discovery_binding(plan: Plan) -> Obj:
    name = f"{names.router_name(plan)}-discovery"
    subject = {"kind": "ServiceAccount", "name": names.service_account(plan, "router"), "namespace": names.namespace(plan)}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(plan, name, "router"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [subject],
    }


def _router_labels(plan: Plan) -> dict[str, str]:
    return {names.PART_OF_LABEL: plan.name, names.COMPONENT_LABEL: "router"}


def router_deployment(plan: Plan, inputs: ServingInputs) -> Obj:
    router = plan.router
    labels = names.common_labels(plan, "router")
    container = {
        "name": "router",
        "image": inputs.router_image,
        "command": router_argv(plan),
        "ports": [{"name": "http", "containerPort": ROUTER_PORT}, {"name": "metrics", "containerPort": ROUTER_METRICS_PORT}],
        "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
        "startupProbe": {"httpGet": {"path": "/liveness", "port": "http"}, "periodSeconds": 5, "failureThreshold": 24},
        "livenessProbe": {"httpGet": {"path": "/liveness", "port": "http"}, "periodSeconds": 20, "failureThreshold": 3},
        # Ready once at least one worker pair answers /health: the load balancer waits for the model.
        "readinessProbe": {"httpGet": {"path": "/readiness", "port": "http"}, "periodSeconds": 10, "failureThreshold": 3},
        "securityContext": pod.container_security(read_only_root=True),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],  # noqa: S108 - an emptyDir, not the host's /tmp
    }
    pod_spec = {
        "serviceAccountName": names.service_account(plan, "router"),
        # The router discovers the workers through the Kubernetes API (router_discovery_role).
        "automountServiceAccountToken": True,
        "enableServiceLinks": False,
        "securityContext": pod.pod_security(),
        # The on-demand system nodes, never the GPU nodes of the block.
        "nodeSelector": dict(plan.system_node_labels),
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": pod.HOSTNAME_TOPOLOGY,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": _router_labels(plan)},
            }
        ],
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
    }
    spec = {
        "replicas": router.replicas,
        "selector": {"matchLabels": _router_labels(plan)},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
        "template": {"metadata": {"labels": labels}, "spec": pod_spec},
    }
    # `pdkit status` finds the router by the same role label the DisaggregatedSet's LeaderWorkerSets carry.
    meta = _meta(plan, names.router_name(plan), "router", labels={**names.common_labels(plan, "router"), ROLE_LABEL: "router"})
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}


def router_disruption_budget(plan: Plan) -> Obj:
    spec = {"maxUnavailable": 1, "selector": {"matchLabels": _router_labels(plan)}}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(plan, names.router_name(plan), "router"),
        "spec": spec,
    }


def _sglang_labels(plan: Plan) -> dict[str, str]:
    return {names.PART_OF_LABEL: plan.name, names.COMPONENT_LABEL: "sglang"}


def sglang_network_policy(plan: Plan) -> Obj:
    """A closed serving surface: ingress to this deployment's SGLang pods only from its router (SGLang's
    HTTP port) and from its own SGLang pods (every port: torch/NCCL/UCCL bootstrap, dist-init, the PD
    bootstrap server, Mooncake's handshake). The one exception is the Prometheus collector (its ENIs
    in the private subnets, which a NetworkPolicy can only name by address) on the HTTP port, for
    /metrics; the admin endpoints behind that port need the admin key. EFA traffic is not IP and never
    meets a NetworkPolicy. Enforced only with the VPC CNI's network policy agent on
    (stacks/eks_addons.py VPC_CNI_CONFIGURATION). Egress stays open: staging reads S3 and the Pod
    Identity agent, every pod resolves DNS."""
    router = {"podSelector": {"matchLabels": _router_labels(plan)}}
    spec = {
        "podSelector": {"matchLabels": _sglang_labels(plan)},
        "policyTypes": ["Ingress"],
        "ingress": [
            {"from": [router], "ports": [{"protocol": "TCP", "port": SGLANG_PORT}]},
            {"from": [{"podSelector": {"matchLabels": _sglang_labels(plan)}}]},
            {"from": [{"ipBlock": {"cidr": str(plan.network.vpc_cidr)}}], "ports": [{"protocol": "TCP", "port": SGLANG_PORT}]},
        ],
    }
    meta = _meta(plan, f"{plan.name}-sglang", "sglang")
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta, "spec": spec}


def router_network_policy(plan: Plan) -> Obj:
    """The router answers on its HTTP and metrics ports only, from inside the VPC (the internal NLB's IP
    targets, the collector, `pdkit bench` pods)."""
    ports = [{"protocol": "TCP", "port": ROUTER_PORT}, {"protocol": "TCP", "port": ROUTER_METRICS_PORT}]
    sources = [{"ipBlock": {"cidr": str(plan.network.vpc_cidr)}}, {"namespaceSelector": {}}]
    spec = {
        "podSelector": {"matchLabels": _router_labels(plan)},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": sources, "ports": ports}],
    }
    meta = _meta(plan, names.router_name(plan), "router")
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta, "spec": spec}


def router_service(plan: Plan) -> Obj:
    """Internal-only NLB from the AWS Load Balancer Controller, straight to the router pods' IPs.

    The Service (and so the NLB's listener) answers on the router's container port: with the VPC CNI's network
    policies on, "For any of your Kubernetes services, the service port must be the same as the container port"
    (https://docs.aws.amazon.com/eks/latest/userguide/cni-network-policy.html, Considerations). The access host
    forwards to this port, and `pdkit bench` reaches it by the Service's DNS name (pdkit/render/bench.py router_url)."""
    annotations = {
        "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
        "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
        "service.beta.kubernetes.io/aws-load-balancer-healthcheck-protocol": "http",
        "service.beta.kubernetes.io/aws-load-balancer-healthcheck-path": "/readiness",
        "service.beta.kubernetes.io/aws-load-balancer-healthcheck-port": "traffic-port",
    }
    spec = {
        "type": "LoadBalancer",
        "loadBalancerClass": LB_CONTROLLER_CLASS,
        # IP targets need no node ports: none are opened on the nodes.
        "allocateLoadBalancerNodePorts": False,
        "loadBalancerSourceRanges": [str(plan.network.vpc_cidr)],
        "selector": _router_labels(plan),
        "ports": [{"name": "http", "port": ROUTER_PORT, "targetPort": ROUTER_PORT, "protocol": "TCP"}],
    }
    meta = _meta(plan, names.router_name(plan), "router", annotations=annotations)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}
