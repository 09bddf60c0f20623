"""The rendered Kubernetes objects: valid for the cluster's version, secure, and sized from the plan."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import pytest
import yaml
from kubernetes_validate import utils as kv

from pdkit.cli.main import main
from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.render.serving import drain, inputs, manifests, names
from pdkit.render.serving.sglang_args import SGLANG_PORT, launch_argv
from tests.conftest import plan_of
from tests.fixtures.serving import of_kind, one, pod_templates, rendered, role_pods

ROOT = Path(__file__).resolve().parent.parent
LWS_SCHEMA = json.loads((ROOT / "tests" / "schemas" / "lws-v1.json").read_text())
# The pinned chart's CRD schema, copied (tests/schemas/README.md).
DS_CRD_SCHEMA = json.loads((ROOT / "tests" / "schemas" / "disaggregatedset-v1.json").read_text())


def strict(schema):
    """The CRD's structural schema as the API server applies it under strict field validation (kubectl
    apply's default): an object that lists its properties refuses any other field, unless it preserves
    unknown fields (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#field-pruning)."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


DS_SCHEMA = strict(DS_CRD_SCHEMA)
PROFILES = profile_files.available_profiles()


@pytest.fixture(scope="module")
def objs(plan):
    return rendered(plan)


def lws(objs, role, plan):
    """The role's LeaderWorkerSet template inside the one DisaggregatedSet ({name, metadata, spec})."""
    (ds,) = of_kind(objs, "DisaggregatedSet")
    assert ds["metadata"]["name"] == names.disaggregated_set(plan)
    (found,) = [r for r in ds["spec"]["roles"] if r["name"] == role]
    return found


def sglang_container(objs, role):
    (c,) = role_pods(objs)[role]["containers"]
    return c


# --- schemas -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROFILES)
def test_built_in_kinds_validate_for_the_cluster_version(name):
    """kubernetes-validate (strict: unknown fields fail) against the plan's Kubernetes minor."""
    the_plan = plan_of(name)
    for obj in rendered(the_plan):
        if obj["kind"] != "DisaggregatedSet":
            kv.validate(obj, the_plan.kubernetes_version, strict=True)


def as_leader_worker_set(the_plan, role):
    """A role of the DisaggregatedSet as the LeaderWorkerSet its controller creates from it (lws_manager.go)."""
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": f"{the_plan.name}-0-58f79fdb78-{role['name']}"},
        "spec": role["spec"],
    }


def ds_replicas_rule_holds(ds):
    """The CRD's CEL rule (x-kubernetes-validations on spec), which JSON Schema cannot express: replicas
    all zero or all non-zero across the (non-External) roles."""
    (rule,) = DS_CRD_SCHEMA["properties"]["spec"]["x-kubernetes-validations"]
    assert "replicas must be zero for all" in rule["message"]
    counts = [r["spec"].get("replicas", 0) for r in ds["spec"]["roles"] if r.get("scaling", {}).get("mode") != "External"]
    return all(c == 0 for c in counts) or all(c > 0 for c in counts)


@pytest.mark.parametrize("name", PROFILES)
def test_the_disaggregated_set_validates_against_the_pinned_crd(name):
    """kubernetes-sigs/lws v0.10.0 charts/lws/crds/disaggregatedset.x-k8s.io_disaggregatedsets.yaml, the chart
    pdkit/model/data/addons.yaml pins; each role's template also passes the hand-written LWS schema and its pod
    template kubernetes-validate."""
    the_plan = plan_of(name)
    (obj,) = of_kind(rendered(the_plan), "DisaggregatedSet")
    jsonschema.Draft202012Validator(DS_SCHEMA).validate(obj)
    assert ds_replicas_rule_holds(obj)
    for role in obj["spec"]["roles"]:
        jsonschema.Draft202012Validator(LWS_SCHEMA).validate(as_leader_worker_set(the_plan, role))
        template = role["spec"]["leaderWorkerTemplate"]["workerTemplate"]
        wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": role["name"]}, "template": template}
        kv.validate(wrapped, the_plan.kubernetes_version, strict=True)


def test_the_copied_crd_rejects_what_the_api_rejects(objs):
    """The copied schema has teeth: the CRD's role name pattern, its minimum of two roles, its closed fields."""
    jsonschema.Draft202012Validator.check_schema(DS_SCHEMA)
    validator = jsonschema.Draft202012Validator(DS_SCHEMA)
    (good,) = of_kind(objs, "DisaggregatedSet")
    assert validator.is_valid(good)
    one_role = json.loads(json.dumps(good))
    one_role["spec"]["roles"] = one_role["spec"]["roles"][:1]
    assert not validator.is_valid(one_role), "minItems 2"
    underscored = json.loads(json.dumps(good))
    underscored["spec"]["roles"][0]["name"] = "pre_fill"
    assert not validator.is_valid(underscored), "role names are DNS labels"
    misspelled = json.loads(json.dumps(good))
    misspelled["spec"]["roles"][0]["spec"]["replica"] = 1
    assert not validator.is_valid(misspelled), "unknown field"
    half = json.loads(json.dumps(good))
    half["spec"]["roles"][0]["spec"]["replicas"] = 0
    assert not ds_replicas_rule_holds(half), "the CEL rule: all zero or all non-zero"


def test_lws_schema_is_itself_valid_and_rejects_what_the_api_rejects(objs, plan):
    jsonschema.Draft202012Validator.check_schema(LWS_SCHEMA)
    validator = jsonschema.Draft202012Validator(LWS_SCHEMA)
    good = as_leader_worker_set(plan, lws(objs, "decode", plan))
    bad_variants = {
        "unknown restart policy": ("leaderWorkerTemplate", "restartPolicy", "RecreateOnFailure"),
        "group of zero pods": ("leaderWorkerTemplate", "size", 0),
        "misspelled field": ("leaderWorkerTemplate", "restartpolicy", "None"),
    }
    for reason, (parent, key, value) in bad_variants.items():
        bad = json.loads(json.dumps(good))
        bad["spec"][parent][key] = value
        assert not validator.is_valid(bad), reason
    frozen = json.loads(json.dumps(good))
    frozen["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"] = {"maxUnavailable": 0, "maxSurge": 0}
    assert not validator.is_valid(frozen), "maxUnavailable and maxSurge both 0 is refused by the LWS webhook"
    underscored = json.loads(json.dumps(good))
    underscored["metadata"]["name"] = "glm51_decode"
    assert not validator.is_valid(underscored), "the name becomes a Service name: DNS-1035 only"


def test_kubernetes_validate_rejects_a_broken_object(objs):
    svc = json.loads(json.dumps(one(objs, "Service", "glm51-2p2d-router")))
    svc["spec"]["ports"][0]["port"] = "eighty"
    with pytest.raises(kv.ValidationError):
        kv.validate(svc, "1.36", strict=True)


# --- what gets deployed ---------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_gpus_and_efa_devices_requested_from_the_instance_table(objs, plan, role):
    """Device plugins hand out the GPUs and EFA devices: p5en has 8 and 16."""
    resources = sglang_container(objs, role)["resources"]
    for part in ("requests", "limits"):
        assert resources[part]["nvidia.com/gpu"] == str(plan.instance.gpus) == "8"
        assert resources[part]["vpc.amazonaws.com/efa"] == str(plan.efa_devices_per_node) == "16"


def test_efa_request_follows_a_profile_override(raw_with):
    p = plan_mod.build(profile_files.parse(raw_with("capacity.efa_devices", 8)))
    c = sglang_container(rendered(p), "decode")
    assert c["resources"]["limits"]["vpc.amazonaws.com/efa"] == "8"


def test_the_sglang_container_runs_the_rendered_command_line(objs, plan):
    from pdkit.render.serving.sglang_args import launch_argv

    c = sglang_container(objs, "prefill")
    assert c["args"] == [*launch_argv(plan, "prefill"), manifests.ADMIN_KEY_FLAG, f"$({manifests.ADMIN_KEY_ENV})"]
    assert c["command"][:2] == ["/bin/sh", "-c"]
    assert c["command"][2] == manifests.MEMLOCK_CHECK
    assert 'exec "$@"' in manifests.MEMLOCK_CHECK


def test_environment_comes_from_one_config_map(objs, plan):
    """Every role reads the one ConfigMap; what it holds, variable by variable, is in tests/test_serving_environment.py."""
    (cm,) = of_kind(objs, "ConfigMap")
    for role in plan.roles:
        assert sglang_container(objs, role)["envFrom"] == [{"configMapRef": {"name": cm["metadata"]["name"]}}]


def test_tuned_profile_sets_no_unread_spec_v2_variable():
    tuned = plan_of("glm51-fp8-2p2d-tuned")
    c = sglang_container(rendered(tuned), "decode")
    assert not [e for e in c["env"] if e["name"] == "SGLANG_ENABLE_SPEC_V2"]


# --- security (no privilege, no host access for every profile: tests/test_pod.py) ---------------------


def test_every_role_mounts_shm(objs, plan):
    """NCCL and torch IPC need /dev/shm: each role's SGLang mounts the pod's in-memory one (tests/test_pod.py)."""
    for role in plan.roles:
        assert {"name": "dshm", "mountPath": "/dev/shm"} in sglang_container(objs, role)["volumeMounts"]


def test_sglang_runs_as_non_root_and_only_staging_writes_the_weights(objs, plan):
    spec = role_pods(objs)["decode"]
    stage, _warm = spec["initContainers"]
    (sglang,) = spec["containers"]
    assert sglang["securityContext"]["runAsNonRoot"] is True
    assert next(m for m in sglang["volumeMounts"] if m["name"] == "weights")["readOnly"] is True
    assert stage["command"][:3] == ["python3", "-m", "pdkit.pods.staging"]
    assert not next(m for m in stage["volumeMounts"] if m["name"] == "weights").get("readOnly")


def test_namespace_enforces_pod_security_baseline_and_audits_restricted(objs, plan):
    (ns,) = of_kind(objs, "Namespace")
    labels = ns["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == f"v{plan.kubernetes_version}"


def test_host_network_switch_lowers_pod_security_with_it(plan):
    on = rendered(plan, host_network=True)
    (ns,) = of_kind(on, "Namespace")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for role in plan.roles:
        spec = role_pods(on)[role]
        assert spec["hostNetwork"] is True
        assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "GLOO_SOCKET_IFNAME" not in of_kind(on, "ConfigMap")[0]["data"]


def test_only_the_router_mounts_a_kubernetes_token_and_may_only_read_pods(objs, plan):
    """smg's Kubernetes discovery lists and watches pods (smg 1.13.0 --service-discovery-namespace: without
    it, all namespaces and cluster-wide rights); nothing else in serving calls the Kubernetes API."""
    accounts = {a["metadata"]["name"]: a for a in of_kind(objs, "ServiceAccount")}
    router = f"{plan.name}-router"
    assert set(accounts) == {f"{plan.name}-weights-reader", f"{plan.name}-weights-writer", router}
    assert {n for n, a in accounts.items() if a["automountServiceAccountToken"]} == {router}
    for owner, template in pod_templates(objs):
        mounts = template["spec"]["automountServiceAccountToken"]
        assert mounts is (template["spec"]["serviceAccountName"] == router), owner
    binding = one(objs, "RoleBinding", f"{router}-discovery")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": router, "namespace": names.namespace(plan)}]
    role = one(objs, "Role", binding["roleRef"]["name"])
    assert role["metadata"]["namespace"] == names.namespace(plan)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    # The one ClusterRole lets the block lifecycle label Nodes (tests/test_block_drain.py); nothing binds the router to it.
    for cluster_binding in of_kind(objs, "ClusterRoleBinding"):
        assert cluster_binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "pdkit:block-lifecycle"}]


# --- placement and probes -------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_role_pods_land_on_their_tainted_nodes_one_per_node(objs, plan, role):
    r = plan.roles[role]
    spec = role_pods(objs)[role]
    # The role is only preferred (pdkit/model/placement.py, tests/test_placement_manifests.py): any GPU node fits.
    assert r.labels.keys().isdisjoint(spec["nodeSelector"])
    assert {"key": r.taint["key"], "operator": "Equal", "value": r.taint["value"], "effect": r.taint["effect"]} in spec["tolerations"]
    (term,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"


def test_startup_probe_grows_with_the_model_load(plan):
    bigger = plan_mod.Estimates(**{**plan.estimates.__dict__, "first_boot_budget_minutes": 95})
    slow = plan_mod.Plan(**{**{f: getattr(plan, f) for f in plan.__dataclass_fields__}, "estimates": bigger})
    assert manifests.startup_failure_threshold(slow) == math.ceil(95 * 60 / manifests.STARTUP_PERIOD_SECONDS)


def test_liveness_and_readiness_use_sglangs_health_endpoint(objs, plan):
    c = sglang_container(objs, "prefill")
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["path"] == "/health"
        assert c[probe]["timeoutSeconds"] > 20, "SGLang's /health generates one token within SGLANG_HEALTH_CHECK_TIMEOUT (20 s)"
    assert c["livenessProbe"]["periodSeconds"] * c["livenessProbe"]["failureThreshold"] >= 300
    assert {"name": "http", "containerPort": SGLANG_PORT} in c["ports"]


# --- router ---------------------------------------------------------------------------------------


def test_router_runs_two_replicas_on_system_nodes(objs, plan):
    deploy = one(objs, "Deployment", names.router_name(plan))
    assert deploy["spec"]["replicas"] == plan.router.replicas == 2
    spec = deploy["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == plan.system_node_labels
    assert "tolerations" not in spec
    assert spec["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/readiness"


def test_router_is_reachable_only_through_an_internal_nlb(objs, plan):
    svc = one(objs, "Service", names.router_name(plan))
    annotations = svc["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"] == "ip"
    assert svc["spec"]["loadBalancerClass"] == "service.k8s.aws/nlb"
    assert svc["spec"]["loadBalancerSourceRanges"] == [str(plan.network.vpc_cidr)]
    assert svc["spec"]["allocateLoadBalancerNodePorts"] is False


# --- disruption budgets and the end-of-block drain ------------------------------------------------


@pytest.mark.parametrize("name", PROFILES)
def test_the_drain_removes_every_pod_a_budget_covers_before_the_nodes_go(name):
    """The end-of-block drain scales the DisaggregatedSet's roles to zero (deleting, not evicting, their pods):
    after that no budget on a GPU node covers any pod, so scaling the node groups to zero cannot block. The
    budgets select the labels the DisaggregatedSet controller stamps on every pod of a role, whatever the
    revision (kubernetes-sigs/lws v0.10.0 lws_manager.go: system labels merged into the pod templates)."""
    the_plan = plan_of(name)
    objs = rendered(the_plan)
    plan = drain.drain_plan(the_plan)
    (ds,) = of_kind(objs, "DisaggregatedSet")
    assert plan.disaggregated_set == ds["metadata"]["name"]
    assert list(plan.roles) == [r["name"] for r in ds["spec"]["roles"]], "the drain's JSON patch indexes spec.roles"
    gpu_pdbs = [p for p in of_kind(objs, "PodDisruptionBudget") if names.DS_ROLE_LABEL in p["spec"]["selector"]["matchLabels"]]
    assert [p["spec"]["selector"]["matchLabels"] for p in gpu_pdbs] == [
        {names.DS_NAME_LABEL: ds["metadata"]["name"], names.DS_ROLE_LABEL: role} for role in plan.roles
    ]
    assert set(plan.node_groups) == {r.node_group_name for r in the_plan.roles.values()}
    (wait,) = plan.kubectl_wait_gone()
    assert f"{names.DS_NAME_LABEL}={ds['metadata']['name']}" in wait


def test_router_budget_never_blocks_a_system_node_drain(objs, plan):
    pdb = one(objs, "PodDisruptionBudget", names.router_name(plan))
    assert pdb["spec"]["maxUnavailable"] == 1


# --- weights volume and inputs --------------------------------------------------------------------


def test_weights_volume_is_the_nodes_nvme_bound_to_the_kits_claim_only(objs, plan):
    pvc = one(objs, "PersistentVolumeClaim", names.weights_claim(plan))
    pv = one(objs, "PersistentVolume", pvc["spec"]["volumeName"])
    assert pv["spec"]["hostPath"]["path"].startswith("/mnt/k8s-disks/0/")
    assert pv["spec"]["claimRef"] == {"namespace": names.namespace(plan), "name": pvc["metadata"]["name"]}
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]


def test_staging_reads_the_bucket_the_plan_names(objs, plan):
    serving = inputs.from_plan(plan)
    stage = role_pods(objs)["prefill"]["initContainers"][0]
    cmd = stage["command"]
    assert cmd[cmd.index("--bucket") + 1] == serving.weights_bucket
    assert cmd[cmd.index("--prefix") + 1] == serving.weights_prefix == f"models/{plan.model.id}/main/"
    assert cmd[cmd.index("--region") + 1] == plan.region


def test_images_come_from_the_plans_repositories(objs, plan):
    image = plan.images[inputs.SERVING_IMAGE]
    c = sglang_container(objs, "decode")
    assert c["image"] == f"{inputs.default_registry(plan)}/{image.repository}:{image.tag}"
    custom = inputs.from_plan(plan, registry="123456789012.dkr.ecr.eu-south-2.amazonaws.com")
    assert custom.image.startswith("123456789012.dkr.ecr.eu-south-2.amazonaws.com/glm51-2p2d/sglang-efa:")


def test_render_command_writes_one_file_per_object_in_apply_order(tmp_path, plan, capsys):
    # The router has its own slim image (containers/router), also named by the account.
    router = ["--router-image", "registry.example/router:1"]
    argv = ["render", "--out", str(tmp_path), "--image", "registry.example/sglang:1", *router, "--weights-bucket", "weights-bucket"]
    assert main(argv) == 0
    files = sorted(tmp_path.glob("*.yaml"))
    assert files[0].name == "00-namespace-pd-serving.yaml"
    loaded = [yaml.safe_load(f.read_text()) for f in files]
    assert [o["kind"] for o in loaded] == [o["kind"] for o in rendered(plan)]
    (serving,) = tmp_path.glob("*-disaggregatedset-glm51-2p2d-pd.yaml")
    assert "registry.example/sglang:1" in serving.read_text()
    assert "kubectl apply --server-side" in capsys.readouterr().out


# --- compile cache and first boot (issue 14, item 4) ----------------------------------------------


def _env(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_sglang_cache_dir_is_on_the_nodes_nvme_through_a_persistent_volume(objs, plan, role):
    """SGLang 0.5.23 keeps DeepGEMM, Triton, inductor and FlashInfer JIT output under SGLANG_CACHE_DIR
    (sglang/srt/environ.py: SGLANG_DG_CACHE_DIR and third_party_cache_defaults() derive from it; default
    ~/.cache/sglang, the container's writable layer, lost with every restart). nodeadm's RAID0 mounts the
    instance NVMe at /mnt/k8s-disks/0, where the volume lives; the pod mounts a claim, not a hostPath."""
    spec = role_pods(objs)[role]
    serving = spec["containers"][0]
    cache_dir = _env(serving)["SGLANG_CACHE_DIR"]
    (mount,) = [m for m in serving["volumeMounts"] if cache_dir.startswith(m["mountPath"] + "/")]
    assert not mount.get("readOnly")
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    pvc = one(objs, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    pv = one(objs, "PersistentVolume", pvc["spec"]["volumeName"])
    assert pv["spec"]["hostPath"]["path"].startswith("/mnt/k8s-disks/0/")
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert not any("hostPath" in v for v in spec["volumes"])


def test_the_stager_opens_the_cache_directory_to_the_serving_user(objs, plan):
    """kubelet creates a hostPath directory as root 0755; the serving container runs as the image's user and
    has no capability, so the root stager (which owns the directory, no CAP_CHOWN needed for chmod) opens it."""
    spec = role_pods(objs)["decode"]
    stager = spec["initContainers"][0]
    cache_mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "compile-cache")
    assert stager["command"][stager["command"].index("--shared-dir") + 1] == cache_mount["mountPath"]
    assert {"name": "compile-cache", "mountPath": cache_mount["mountPath"]} in stager["volumeMounts"]


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_precompile_runs_the_roles_own_command_line_on_every_node_before_serving(objs, plan, role):
    """`python -m sglang.compile_deep_gemm` takes the server's arguments (sglang/compile_deep_gemm.py:
    ServerArgs.add_cli_args + --timeout) and must run at the full EP size on all nodes (AWS serve-pd.sh:
    "a single-node run never compiles the num_groups=16 grouped-GEMM kernels that DP+EP uses"). As an init
    container of every pod in the group it gets the same ranks, devices, image and security as serving."""
    spec = role_pods(objs)[role]
    names_in_order = [c["name"] for c in spec["initContainers"]]
    assert names_in_order == ["stage-weights", "warm-compile-cache"]
    warm, serving = spec["initContainers"][1], spec["containers"][0]
    for field in ("image", "command", "resources", "securityContext", "envFrom", "volumeMounts"):
        assert warm[field] == serving[field], field
    compile_argv = warm["args"][warm["args"].index("--") + 1 :]
    served = launch_argv(plan, role)
    assert serving["args"][: len(served)] == served
    assert compile_argv[:3] == ["python3", "-m", "sglang.compile_deep_gemm"]
    assert compile_argv[3 : len(served)] == served[3:]
    assert compile_argv[len(served) :][0] == "--timeout"
    # --node-rank $(LWS_WORKER_INDEX) must expand in the init container too.
    (index,) = [e for e in warm["env"] if e["name"] == "LWS_WORKER_INDEX"]
    assert index["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.labels['{names.LWS_WORKER_INDEX_LABEL}']"
    assert _env(warm)["SGLANG_CACHE_DIR"] == _env(serving)["SGLANG_CACHE_DIR"]


def test_the_cache_key_changes_with_anything_that_changes_the_kernels(plan):
    """A restored cache is only trusted by the server that built it: SGLang version, image, command line."""
    from pdkit.render.serving import compile_cache_objects as cc

    base = cc.key(plan, plan.decode, "111.dkr.ecr.eu-south-2.amazonaws.com/x/sglang-efa:a")
    assert cc.key(plan, plan.decode, "111.dkr.ecr.eu-south-2.amazonaws.com/x/sglang-efa:b") != base
    assert cc.key(plan, plan.prefill, "111.dkr.ecr.eu-south-2.amazonaws.com/x/sglang-efa:a") != base
    # Not the registry: in the serving stack it is a CloudFormation token, different on every synth.
    assert cc.key(plan, plan.decode, "${Token[AWS.AccountId.8]}.dkr.ecr.eu-south-2.amazonaws.com/x/sglang-efa:a") == base
    assert cc.object_key(plan, plan.decode, "r/x/sglang-efa:a").startswith(f"{plan.weights.compile_cache_prefix}{plan.name}/decode/")


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_the_leader_saves_the_warm_cache_when_the_drain_deletes_the_pods(objs, plan, role):
    """The drain scales the LeaderWorkerSets to zero, which deletes the pods (pdkit/render/serving/drain.py); kubelet
    runs a container's preStop hook before stopping it on deletion, within terminationGracePeriodSeconds
    (kubernetes.io Pod Lifecycle, "Termination of Pods"). The drain waits longer than the grace period."""
    spec = role_pods(objs)[role]
    hook = spec["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert hook[:4] == ["python3", "-m", "pdkit.pods.compile_cache", "save"]
    warm = spec["initContainers"][1]["args"]
    for flag in ("--bucket", "--key", "--object-key", "--dir"):
        assert hook[hook.index(flag) + 1] == warm[warm.index(flag) + 1], flag
    assert spec["terminationGracePeriodSeconds"] >= 120
    assert spec["terminationGracePeriodSeconds"] < drain.POD_WAIT_MINUTES * 60


def test_startup_probe_covers_the_first_boot_budget(objs, plan):
    """A first boot whose precompile timed out compiles inside the server before /health answers; a probe
    sized for a warm boot would kill the group mid-compile (RecreateGroupOnPodRestart) and loop. It covers the
    plan's start-up budget with it, on SGLang's /health."""
    probe = sglang_container(objs, "decode")["startupProbe"]
    assert plan.estimates.first_boot_budget_minutes > plan.estimates.startup_budget_minutes
    assert probe["periodSeconds"] * probe["failureThreshold"] >= plan.estimates.first_boot_budget_minutes * 60
    assert probe["httpGet"] == {"path": "/health", "port": "http"}


# --- one DisaggregatedSet -------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROFILES)
def test_prefill_and_decode_are_roles_of_one_disaggregated_set(name):
    """One object, so the LWS controller rolls prefill and decode out together and never pairs a new
    prefill with an old decode (kubernetes-sigs/lws v0.10.0 KEP-766, docs/examples/disaggregatedset.md). Each role is
    sized from the plan (scaling is a profile change: glm51-fp8-4p4d runs two groups of each), restarts as a group and
    starts with its leader created (LeaderReady would deadlock: the leader is never Ready alone)."""
    the_plan = plan_of(name)
    objs = rendered(the_plan)
    assert not of_kind(objs, "LeaderWorkerSet")
    (ds,) = of_kind(objs, "DisaggregatedSet")
    assert ds["apiVersion"] == "disaggregatedset.x-k8s.io/v1"
    assert [r["name"] for r in ds["spec"]["roles"]] == list(the_plan.roles)
    for role in ds["spec"]["roles"]:
        spec, planned = role["spec"], the_plan.roles[role["name"]]
        assert (spec["replicas"], spec["leaderWorkerTemplate"]["size"]) == (planned.replicas, planned.nodes_per_replica)
        assert spec["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
        assert spec["startupPolicy"] == "LeaderCreated"
    if name == "glm51-fp8-4p4d":
        assert {r["name"]: r["spec"]["replicas"] for r in ds["spec"]["roles"]} == {"prefill": 2, "decode": 2}


@pytest.mark.parametrize("name", PROFILES)
def test_a_rollout_is_a_full_stop_and_start(name):
    """A block has no spare GPU node: the DisaggregatedSet's default (maxSurge 1, maxUnavailable 0; lws
    v0.10.0 pkg/controllers/disaggregatedset/planner.go) would wait forever for a node to surge onto. Every
    group of every role goes at once instead, and the webhook refuses both 0 (disaggregatedset_webhook.go)."""
    the_plan = plan_of(name)
    (ds,) = of_kind(rendered(the_plan), "DisaggregatedSet")
    for role in ds["spec"]["roles"]:
        strategy = role["spec"]["rolloutStrategy"]
        assert strategy["type"] == "RollingUpdate", "the webhook refuses any other type"
        assert strategy["rollingUpdateConfiguration"] == {"maxUnavailable": the_plan.roles[role["name"]].replicas, "maxSurge": 0}
        assert "partition" not in strategy["rollingUpdateConfiguration"], "the webhook refuses a partition"


def test_status_finds_the_revisioned_leader_worker_sets_by_role_label(objs, plan):
    """The controller names its LeaderWorkerSets <set>-<slice>-<revision>-<role> and copies the role's
    metadata labels onto them (lws v0.10.0 lws_manager.go Create: mergeLabels(config.ObjectMeta.Labels, ...)):
    `pdkit status` lists LeaderWorkerSets by the role label, so the role metadata must carry it."""
    from pdkit.ops.kube import ROLE_LABEL

    for role in plan.roles:
        assert lws(objs, role, plan)["metadata"]["labels"][ROLE_LABEL] == role


def test_prefill_pods_announce_their_bootstrap_port_to_the_router(objs, plan):
    """smg's label discovery takes a prefill worker's PD bootstrap port from the pod annotation
    sglang.ai/bootstrap-port (smg 1.13.0 router_args.py bootstrap_port_annotation); the controller copies
    template annotations onto the pods (lws_manager.go copyAnnotations)."""
    from pdkit.render.serving.sglang_args import BOOTSTRAP_PORT

    prefill = lws(objs, "prefill", plan)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]
    assert prefill["annotations"] == {"sglang.ai/bootstrap-port": str(BOOTSTRAP_PORT)}
    decode = lws(objs, "decode", plan)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]
    assert "annotations" not in decode


def test_the_lifecycle_may_patch_only_this_disaggregated_set(objs, plan):
    """The controller reverts a scaled LeaderWorkerSet, so the lifecycle's Role patches the DisaggregatedSet
    (get/patch on this one name) and lists pods; nothing on leaderworkersets."""
    role = one(objs, "Role", drain.lifecycle_rbac_name(plan))
    assert role["rules"][0] == {
        "apiGroups": ["disaggregatedset.x-k8s.io"],
        "resources": ["disaggregatedsets"],
        "resourceNames": [names.disaggregated_set(plan)],
        "verbs": ["get", "patch"],
    }
    assert all("leaderworkersets" not in r["resources"] for r in role["rules"])
