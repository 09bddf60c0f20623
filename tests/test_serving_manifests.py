"""The rendered Kubernetes objects: valid for the cluster's version, secure, and sized from the plan."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import jsonschema
import pytest
import yaml
from kubernetes_validate import utils as kv

from pdkit.cli.commands import render as render_cmd
from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.render.serving import drain, inputs, manifests, names
from pdkit.render.serving.sglang_args import SGLANG_PORT, launch_argv

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
# Capabilities Pod Security "baseline" allows a container to add; anything else needs a reason in the docs.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}


def load(name=None):
    prof, path = profile_files.load(name)
    return plan_mod.build(prof, profile_path=path)


def rendered(the_plan):
    return manifests.render(the_plan, inputs.from_plan(the_plan))


def of_kind(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def one(objs, kind, name):
    (found,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def pod_templates(objs):
    """(owner, pod template) for every pod the objects create."""
    for o in objs:
        if o["kind"] == "DisaggregatedSet":
            for role in o["spec"]["roles"]:
                yield f"{o['metadata']['name']}/{role['name']}", role["spec"]["leaderWorkerTemplate"]["workerTemplate"]
        elif o["kind"] == "Deployment":
            yield o["metadata"]["name"], o["spec"]["template"]


def containers(template):
    spec = template["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


@pytest.fixture(scope="module")
def seed():
    return load()


@pytest.fixture(scope="module")
def objs(seed):
    return rendered(seed)


def lws(objs, role, seed):
    """The role's LeaderWorkerSet template inside the one DisaggregatedSet ({name, metadata, spec})."""
    (ds,) = of_kind(objs, "DisaggregatedSet")
    assert ds["metadata"]["name"] == names.disaggregated_set(seed)
    (found,) = [r for r in ds["spec"]["roles"] if r["name"] == role]
    return found


def sglang_container(objs, role, seed):
    (c,) = lws(objs, role, seed)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]
    return c


# --- schemas -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROFILES)
def test_built_in_kinds_validate_for_the_cluster_version(name):
    """kubernetes-validate (strict: unknown fields fail) against the plan's Kubernetes minor."""
    the_plan = load(name)
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
    the_plan = load(name)
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


def test_lws_schema_is_itself_valid_and_rejects_what_the_api_rejects(objs, seed):
    jsonschema.Draft202012Validator.check_schema(LWS_SCHEMA)
    validator = jsonschema.Draft202012Validator(LWS_SCHEMA)
    good = as_leader_worker_set(seed, lws(objs, "decode", seed))
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


def test_plain_yaml_round_trips(objs):
    assert list(yaml.safe_load_all(manifests.to_yaml(objs))) == objs


# --- what gets deployed ---------------------------------------------------------------------------


def test_one_leader_worker_set_per_role_sized_from_the_plan(objs, seed):
    for role in seed.roles.values():
        spec = lws(objs, role.name, seed)["spec"]
        assert spec["replicas"] == role.replicas
        assert spec["leaderWorkerTemplate"]["size"] == role.nodes_per_replica
        assert spec["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
        assert spec["startupPolicy"] == "LeaderCreated", "LeaderReady would deadlock: the leader is never Ready alone"


def test_scaling_is_a_profile_change():
    four = rendered(load("glm51-fp8-4p4d"))
    (ds,) = of_kind(four, "DisaggregatedSet")
    assert {r["name"]: r["spec"]["replicas"] for r in ds["spec"]["roles"]} == {"prefill": 2, "decode": 2}


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_gpus_and_efa_devices_requested_from_the_instance_table(objs, seed, role):
    """Device plugins hand out the GPUs and EFA devices: p5en has 8 and 16."""
    resources = sglang_container(objs, role, seed)["resources"]
    for part in ("requests", "limits"):
        assert resources[part]["nvidia.com/gpu"] == str(seed.instance.gpus) == "8"
        assert resources[part]["vpc.amazonaws.com/efa"] == str(seed.efa_devices_per_node) == "16"


def test_efa_request_follows_a_profile_override(raw_with):
    p = plan_mod.build(profile_files.parse(raw_with("capacity.efa_devices", 8)))
    c = sglang_container(rendered(p), "decode", p)
    assert c["resources"]["limits"]["vpc.amazonaws.com/efa"] == "8"


def test_the_sglang_container_runs_the_rendered_command_line(objs, seed):
    from pdkit.render.serving.sglang_args import launch_argv

    c = sglang_container(objs, "prefill", seed)
    assert c["args"] == [*launch_argv(seed, "prefill"), manifests.ADMIN_KEY_FLAG, f"$({manifests.ADMIN_KEY_ENV})"]
    assert c["command"][:2] == ["/bin/sh", "-c"]
    assert c["command"][2] == manifests.MEMLOCK_CHECK
    assert 'exec "$@"' in manifests.MEMLOCK_CHECK


def test_environment_comes_from_one_config_map(objs, seed):
    (cm,) = of_kind(objs, "ConfigMap")
    env = cm["data"]
    assert env["FI_PROVIDER"] == "efa"
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert env["FI_EFA_FORK_SAFE"] == "1"
    assert env["NCCL_NET_PLUGIN"] == "ofi"
    assert env["MOONCAKE_PROTOCOL"] == "efa"
    assert env["HF_HUB_OFFLINE"] == "1"
    assert "PYTORCH_CUDA_ALLOC_CONF" not in env, "Mooncake over EFA refuses expandable segments"
    for role in seed.roles:
        assert sglang_container(objs, role, seed)["envFrom"] == [{"configMapRef": {"name": cm["metadata"]["name"]}}]


def test_nixl_switch_changes_the_environment(raw_with):
    env = of_kind(rendered(plan_mod.build(profile_files.parse(raw_with("serving.kv_transfer", "nixl")))), "ConfigMap")[0]["data"]
    assert env["SGLANG_DISAGGREGATION_NIXL_BACKEND"] == "LIBFABRIC"
    assert "MOONCAKE_PROTOCOL" not in env


def test_tuned_profile_sets_spec_v2_on_the_roles_running_mtp():
    tuned = load("glm51-fp8-2p2d-tuned")
    c = sglang_container(rendered(tuned), "decode", tuned)
    assert {"name": "SGLANG_ENABLE_SPEC_V2", "value": "1"} in c["env"]


# --- security -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROFILES)
def test_nothing_is_privileged_or_escalates(name):
    for owner, template in pod_templates(rendered(load(name))):
        spec = template["spec"]
        assert not spec.get("hostPID"), owner
        assert not spec.get("hostIPC"), owner
        for c in containers(template):
            ctx = c["securityContext"]
            assert ctx["privileged"] is False, (owner, c["name"])
            assert ctx["allowPrivilegeEscalation"] is False, (owner, c["name"])
            assert ctx["capabilities"]["drop"] == ["ALL"], (owner, c["name"])
            added = set(ctx["capabilities"].get("add", []))
            assert added <= BASELINE_CAPABILITIES, f"{owner}/{c['name']} adds {added} beyond Pod Security baseline"
            assert not added, f"{owner}/{c['name']} adds {added}: the kit adds none; document any in runbooks/02-serve.md"


@pytest.mark.parametrize("name", PROFILES)
def test_no_host_path_in_any_pod(name):
    """Devices come from the device plugins; the node's NVMe comes as a PersistentVolume claim."""
    for owner, template in pod_templates(rendered(load(name))):
        for volume in template["spec"].get("volumes", []):
            assert "hostPath" not in volume, owner
        for c in containers(template):
            for mount in c.get("volumeMounts", []):
                assert not mount["mountPath"].startswith("/dev/") or mount["mountPath"] == "/dev/shm", (owner, mount)


def test_dev_shm_is_an_in_memory_empty_dir(objs, seed):
    for role in seed.roles:
        volumes = {v["name"]: v for v in lws(objs, role, seed)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in sglang_container(objs, role, seed)["volumeMounts"]}
        assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"


def test_sglang_runs_as_non_root_and_only_staging_writes_the_weights(objs, seed):
    spec = lws(objs, "decode", seed)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    stage, _warm = spec["initContainers"]
    (sglang,) = spec["containers"]
    assert sglang["securityContext"]["runAsNonRoot"] is True
    assert next(m for m in sglang["volumeMounts"] if m["name"] == "weights")["readOnly"] is True
    assert stage["command"][:3] == ["python3", "-m", "pdkit.pods.staging"]
    assert not next(m for m in stage["volumeMounts"] if m["name"] == "weights").get("readOnly")


def test_namespace_enforces_pod_security_baseline_and_audits_restricted(objs, seed):
    (ns,) = of_kind(objs, "Namespace")
    labels = ns["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == f"v{seed.kubernetes_version}"


def test_host_network_is_off_by_default(objs):
    for owner, template in pod_templates(objs):
        assert not template["spec"].get("hostNetwork"), owner


def test_host_network_switch_lowers_pod_security_with_it(seed):
    on = manifests.render(seed, inputs.ServingInputs(**{**inputs.from_plan(seed).__dict__, "host_network": True}))
    (ns,) = of_kind(on, "Namespace")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for role in seed.roles:
        spec = lws(on, role, seed)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
        assert spec["hostNetwork"] is True
        assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "GLOO_SOCKET_IFNAME" not in of_kind(on, "ConfigMap")[0]["data"]


def test_only_the_router_mounts_a_kubernetes_token_and_may_only_read_pods(objs, seed):
    """smg's Kubernetes discovery lists and watches pods (smg 1.13.0 --service-discovery-namespace: without
    it, all namespaces and cluster-wide rights); nothing else in serving calls the Kubernetes API."""
    accounts = {a["metadata"]["name"]: a for a in of_kind(objs, "ServiceAccount")}
    router = f"{seed.name}-router"
    assert set(accounts) == {f"{seed.name}-weights-reader", f"{seed.name}-weights-writer", router}
    assert {n for n, a in accounts.items() if a["automountServiceAccountToken"]} == {router}
    for owner, template in pod_templates(objs):
        mounts = template["spec"]["automountServiceAccountToken"]
        assert mounts is (template["spec"]["serviceAccountName"] == router), owner
    binding = one(objs, "RoleBinding", f"{router}-discovery")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": router, "namespace": names.namespace(seed)}]
    role = one(objs, "Role", binding["roleRef"]["name"])
    assert role["metadata"]["namespace"] == names.namespace(seed)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    # The one ClusterRole lets the block lifecycle label Nodes (tests/test_block_drain.py); nothing binds the router to it.
    for cluster_binding in of_kind(objs, "ClusterRoleBinding"):
        assert cluster_binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "pdkit:block-lifecycle"}]


# --- placement and probes -------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_role_pods_land_on_their_tainted_nodes_one_per_node(objs, seed, role):
    r = seed.roles[role]
    spec = lws(objs, role, seed)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    # The role is only preferred (pdkit/model/placement.py, tests/test_placement_manifests.py): any GPU node fits.
    assert r.labels.keys().isdisjoint(spec["nodeSelector"])
    assert {"key": r.taint["key"], "operator": "Equal", "value": r.taint["value"], "effect": r.taint["effect"]} in spec["tolerations"]
    (term,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"


def test_startup_probe_covers_the_plans_start_up_budget(objs, seed):
    probe = sglang_container(objs, "decode", seed)["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= seed.estimates.startup_budget_minutes * 60
    assert probe["httpGet"] == {"path": "/health", "port": "http"}


def test_startup_probe_grows_with_the_model_load(seed):
    bigger = plan_mod.Estimates(**{**seed.estimates.__dict__, "first_boot_budget_minutes": 95})
    slow = plan_mod.Plan(**{**{f: getattr(seed, f) for f in seed.__dataclass_fields__}, "estimates": bigger})
    assert manifests.startup_failure_threshold(slow) == math.ceil(95 * 60 / manifests.STARTUP_PERIOD_SECONDS)


def test_liveness_and_readiness_use_sglangs_health_endpoint(objs, seed):
    c = sglang_container(objs, "prefill", seed)
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["path"] == "/health"
        assert c[probe]["timeoutSeconds"] > 20, "SGLang's /health generates one token within SGLANG_HEALTH_CHECK_TIMEOUT (20 s)"
    assert c["livenessProbe"]["periodSeconds"] * c["livenessProbe"]["failureThreshold"] >= 300
    assert {"name": "http", "containerPort": SGLANG_PORT} in c["ports"]


# --- router ---------------------------------------------------------------------------------------


def test_router_runs_two_replicas_on_system_nodes(objs, seed):
    deploy = one(objs, "Deployment", names.router_name(seed))
    assert deploy["spec"]["replicas"] == seed.profile.serving.router.replicas == 2
    spec = deploy["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == seed.system_node_labels
    assert "tolerations" not in spec
    assert spec["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/readiness"


def test_router_is_reachable_only_through_an_internal_nlb(objs, seed):
    svc = one(objs, "Service", names.router_name(seed))
    annotations = svc["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"] == "ip"
    assert svc["spec"]["loadBalancerClass"] == "service.k8s.aws/nlb"
    assert svc["spec"]["loadBalancerSourceRanges"] == [str(seed.profile.network.vpc_cidr)]
    assert svc["spec"]["allocateLoadBalancerNodePorts"] is False


# --- disruption budgets and the end-of-block drain ------------------------------------------------


def test_budgets_protect_the_last_group_of_each_role(objs, seed):
    """Never two groups down at once: with restartPolicy RecreateGroupOnPodRestart, LWS recreates the
    whole group when any of its pods goes (https://lws.sigs.k8s.io/docs/reference/leaderworkerset.v1/#leaderworkerset-x-k8s-io-v1-RestartPolicyType),
    so evicting one pod each from two groups of two nodes takes both down: the budget counts pods, at most one."""
    for role in seed.roles.values():
        pdb = one(objs, "PodDisruptionBudget", names.role_object(seed, role.name))
        assert pdb["spec"]["maxUnavailable"] == 0, "a single group: no voluntary eviction"
        assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    four = load("glm51-fp8-4p4d")
    pdb = one(rendered(four), "PodDisruptionBudget", names.role_object(four, "decode"))
    assert four.decode.nodes_per_replica == 2
    assert four.decode.replicas == 2
    assert pdb["spec"]["maxUnavailable"] == 1, "one pod, so one group of two nodes may go, the other stays"


@pytest.mark.parametrize("name", PROFILES)
def test_the_drain_removes_every_pod_a_budget_covers_before_the_nodes_go(name):
    """The end-of-block drain scales the DisaggregatedSet's roles to zero (deleting, not evicting, their pods):
    after that no budget on a GPU node covers any pod, so scaling the node groups to zero cannot block. The
    budgets select the labels the DisaggregatedSet controller stamps on every pod of a role, whatever the
    revision (kubernetes-sigs/lws v0.10.0 lws_manager.go: system labels merged into the pod templates)."""
    the_plan = load(name)
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


def test_router_budget_never_blocks_a_system_node_drain(objs, seed):
    pdb = one(objs, "PodDisruptionBudget", names.router_name(seed))
    assert pdb["spec"]["maxUnavailable"] == 1


# --- weights volume and inputs --------------------------------------------------------------------


def test_weights_volume_is_the_nodes_nvme_bound_to_the_kits_claim_only(objs, seed):
    pvc = one(objs, "PersistentVolumeClaim", names.weights_claim(seed))
    pv = one(objs, "PersistentVolume", pvc["spec"]["volumeName"])
    assert pv["spec"]["hostPath"]["path"].startswith("/mnt/k8s-disks/0/")
    assert pv["spec"]["claimRef"] == {"namespace": names.namespace(seed), "name": pvc["metadata"]["name"]}
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]


def test_staging_reads_the_bucket_the_plan_names(objs, seed):
    serving = inputs.from_plan(seed)
    stage = lws(objs, "prefill", seed)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["initContainers"][0]
    cmd = stage["command"]
    assert cmd[cmd.index("--bucket") + 1] == serving.weights_bucket
    assert cmd[cmd.index("--prefix") + 1] == serving.weights_prefix == f"models/{seed.model.id}/main/"
    assert cmd[cmd.index("--region") + 1] == seed.region


def test_images_come_from_the_plans_repositories(objs, seed):
    image = seed.images[inputs.SERVING_IMAGE]
    c = sglang_container(objs, "decode", seed)
    assert c["image"] == f"{inputs.default_registry(seed)}/{image.repository}:{image.tag}"
    custom = inputs.from_plan(seed, registry="123456789012.dkr.ecr.eu-south-2.amazonaws.com")
    assert custom.image.startswith("123456789012.dkr.ecr.eu-south-2.amazonaws.com/glm51-2p2d/sglang-efa:")


def test_render_command_writes_one_file_per_object_in_apply_order(tmp_path, seed, capsys):
    parser = argparse.ArgumentParser()
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--profile")
    render_cmd.register(parser.add_subparsers(), common)
    args = parser.parse_args(
        [
            "render",
            "--out",
            str(tmp_path),
            "--image",
            "registry.example/sglang:1",
            "--router-image",  # its own slim image now (containers/router), also named by the account
            "registry.example/router:1",
            "--weights-bucket",
            "weights-bucket",
        ]
    )
    assert args.handler(args) == 0
    files = sorted(tmp_path.glob("*.yaml"))
    assert files[0].name == "00-namespace-pd-serving.yaml"
    loaded = [yaml.safe_load(f.read_text()) for f in files]
    assert [o["kind"] for o in loaded] == [o["kind"] for o in rendered(seed)]
    (serving,) = tmp_path.glob("*-disaggregatedset-glm51-2p2d-pd.yaml")
    assert "registry.example/sglang:1" in serving.read_text()
    assert "kubectl apply --server-side" in capsys.readouterr().out


# --- compile cache and first boot (issue 14, item 4) ----------------------------------------------


def _pod_spec(objs, role, seed):
    return lws(objs, role, seed)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]


def _env(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_sglang_cache_dir_is_on_the_nodes_nvme_through_a_persistent_volume(objs, seed, role):
    """SGLang 0.5.23 keeps DeepGEMM, Triton, inductor and FlashInfer JIT output under SGLANG_CACHE_DIR
    (sglang/srt/environ.py: SGLANG_DG_CACHE_DIR and third_party_cache_defaults() derive from it; default
    ~/.cache/sglang, the container's writable layer, lost with every restart). nodeadm's RAID0 mounts the
    instance NVMe at /mnt/k8s-disks/0, where the volume lives; the pod mounts a claim, not a hostPath."""
    spec = _pod_spec(objs, role, seed)
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


def test_the_stager_opens_the_cache_directory_to_the_serving_user(objs, seed):
    """kubelet creates a hostPath directory as root 0755; the serving container runs as the image's user and
    has no capability, so the root stager (which owns the directory, no CAP_CHOWN needed for chmod) opens it."""
    spec = _pod_spec(objs, "decode", seed)
    stager = spec["initContainers"][0]
    cache_mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "compile-cache")
    assert stager["command"][stager["command"].index("--shared-dir") + 1] == cache_mount["mountPath"]
    assert {"name": "compile-cache", "mountPath": cache_mount["mountPath"]} in stager["volumeMounts"]


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_precompile_runs_the_roles_own_command_line_on_every_node_before_serving(objs, seed, role):
    """`python -m sglang.compile_deep_gemm` takes the server's arguments (sglang/compile_deep_gemm.py:
    ServerArgs.add_cli_args + --timeout) and must run at the full EP size on all nodes (AWS serve-pd.sh:
    "a single-node run never compiles the num_groups=16 grouped-GEMM kernels that DP+EP uses"). As an init
    container of every pod in the group it gets the same ranks, devices, image and security as serving."""
    spec = _pod_spec(objs, role, seed)
    names_in_order = [c["name"] for c in spec["initContainers"]]
    assert names_in_order == ["stage-weights", "warm-compile-cache"]
    warm, serving = spec["initContainers"][1], spec["containers"][0]
    for field in ("image", "command", "resources", "securityContext", "envFrom", "volumeMounts"):
        assert warm[field] == serving[field], field
    compile_argv = warm["args"][warm["args"].index("--") + 1 :]
    served = launch_argv(seed, role)
    assert serving["args"][: len(served)] == served
    assert compile_argv[:3] == ["python3", "-m", "sglang.compile_deep_gemm"]
    assert compile_argv[3 : len(served)] == served[3:]
    assert compile_argv[len(served) :][0] == "--timeout"
    # --node-rank $(LWS_WORKER_INDEX) must expand in the init container too.
    (index,) = [e for e in warm["env"] if e["name"] == "LWS_WORKER_INDEX"]
    assert index["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.labels['{names.LWS_WORKER_INDEX_LABEL}']"
    assert _env(warm)["SGLANG_CACHE_DIR"] == _env(serving)["SGLANG_CACHE_DIR"]


def test_the_cache_key_changes_with_anything_that_changes_the_kernels(seed):
    """A restored cache is only trusted by the server that built it: SGLang version, image, command line."""
    from pdkit.render.serving import compile_cache_objects as cc

    base = cc.key(seed, seed.decode, "111.dkr.ecr.eu-south-2.amazonaws.com/x/sglang-efa:a")
    assert cc.key(seed, seed.decode, "111.dkr.ecr.eu-south-2.amazonaws.com/x/sglang-efa:b") != base
    assert cc.key(seed, seed.prefill, "111.dkr.ecr.eu-south-2.amazonaws.com/x/sglang-efa:a") != base
    # Not the registry: in the serving stack it is a CloudFormation token, different on every synth.
    assert cc.key(seed, seed.decode, "${Token[AWS.AccountId.8]}.dkr.ecr.eu-south-2.amazonaws.com/x/sglang-efa:a") == base
    assert cc.object_key(seed, seed.decode, "r/x/sglang-efa:a").startswith(f"{seed.weights.compile_cache_prefix}{seed.name}/decode/")


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_the_leader_saves_the_warm_cache_when_the_drain_deletes_the_pods(objs, seed, role):
    """The drain scales the LeaderWorkerSets to zero, which deletes the pods (pdkit/render/serving/drain.py); kubelet
    runs a container's preStop hook before stopping it on deletion, within terminationGracePeriodSeconds
    (kubernetes.io Pod Lifecycle, "Termination of Pods"). The drain waits longer than the grace period."""
    spec = _pod_spec(objs, role, seed)
    hook = spec["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert hook[:4] == ["python3", "-m", "pdkit.pods.compile_cache", "save"]
    warm = spec["initContainers"][1]["args"]
    for flag in ("--bucket", "--key", "--object-key", "--dir"):
        assert hook[hook.index(flag) + 1] == warm[warm.index(flag) + 1], flag
    assert spec["terminationGracePeriodSeconds"] >= 120
    assert spec["terminationGracePeriodSeconds"] < drain.POD_WAIT_MINUTES * 60


def test_startup_probe_covers_the_first_boot_budget(objs, seed):
    """A first boot whose precompile timed out compiles inside the server before /health answers; a probe
    sized for a warm boot would kill the group mid-compile (RecreateGroupOnPodRestart) and loop."""
    probe = sglang_container(objs, "decode", seed)["startupProbe"]
    assert seed.estimates.first_boot_budget_minutes > seed.estimates.startup_budget_minutes
    assert probe["periodSeconds"] * probe["failureThreshold"] >= seed.estimates.first_boot_budget_minutes * 60


# --- one DisaggregatedSet -------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROFILES)
def test_prefill_and_decode_are_roles_of_one_disaggregated_set(name):
    """One object, so the LWS controller rolls prefill and decode out together and never pairs a new
    prefill with an old decode (kubernetes-sigs/lws v0.10.0 KEP-766, docs/examples/disaggregatedset.md)."""
    the_plan = load(name)
    objs = rendered(the_plan)
    assert not of_kind(objs, "LeaderWorkerSet")
    (ds,) = of_kind(objs, "DisaggregatedSet")
    assert ds["apiVersion"] == "disaggregatedset.x-k8s.io/v1"
    assert [r["name"] for r in ds["spec"]["roles"]] == list(the_plan.roles)
    for role in ds["spec"]["roles"]:
        assert role["spec"]["replicas"] == the_plan.roles[role["name"]].replicas


@pytest.mark.parametrize("name", PROFILES)
def test_a_rollout_is_a_full_stop_and_start(name):
    """A block has no spare GPU node: the DisaggregatedSet's default (maxSurge 1, maxUnavailable 0; lws
    v0.10.0 pkg/controllers/disaggregatedset/planner.go) would wait forever for a node to surge onto. Every
    group of every role goes at once instead, and the webhook refuses both 0 (disaggregatedset_webhook.go)."""
    the_plan = load(name)
    (ds,) = of_kind(rendered(the_plan), "DisaggregatedSet")
    for role in ds["spec"]["roles"]:
        strategy = role["spec"]["rolloutStrategy"]
        assert strategy["type"] == "RollingUpdate", "the webhook refuses any other type"
        assert strategy["rollingUpdateConfiguration"] == {"maxUnavailable": the_plan.roles[role["name"]].replicas, "maxSurge": 0}
        assert "partition" not in strategy["rollingUpdateConfiguration"], "the webhook refuses a partition"


def test_status_finds_the_revisioned_leader_worker_sets_by_role_label(objs, seed):
    """The controller names its LeaderWorkerSets <set>-<slice>-<revision>-<role> and copies the role's
    metadata labels onto them (lws v0.10.0 lws_manager.go Create: mergeLabels(config.ObjectMeta.Labels, ...)):
    `pdkit status` lists LeaderWorkerSets by the role label, so the role metadata must carry it."""
    from pdkit.ops.kube import ROLE_LABEL

    for role in seed.roles:
        assert lws(objs, role, seed)["metadata"]["labels"][ROLE_LABEL] == role


def test_prefill_pods_announce_their_bootstrap_port_to_the_router(objs, seed):
    """smg's label discovery takes a prefill worker's PD bootstrap port from the pod annotation
    sglang.ai/bootstrap-port (smg 1.13.0 router_args.py bootstrap_port_annotation); the controller copies
    template annotations onto the pods (lws_manager.go copyAnnotations)."""
    from pdkit.render.serving.sglang_args import BOOTSTRAP_PORT

    prefill = lws(objs, "prefill", seed)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]
    assert prefill["annotations"] == {"sglang.ai/bootstrap-port": str(BOOTSTRAP_PORT)}
    decode = lws(objs, "decode", seed)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]
    assert "annotations" not in decode


def test_the_lifecycle_may_patch_only_this_disaggregated_set(objs, seed):
    """The controller reverts a scaled LeaderWorkerSet, so the lifecycle's Role patches the DisaggregatedSet
    (get/patch on this one name) and lists pods; nothing on leaderworkersets."""
    role = one(objs, "Role", drain.lifecycle_rbac_name(seed))
    assert role["rules"][0] == {
        "apiGroups": ["disaggregatedset.x-k8s.io"],
        "resources": ["disaggregatedsets"],
        "resourceNames": [names.disaggregated_set(seed)],
        "verbs": ["get", "patch"],
    }
    assert all("leaderworkersets" not in r["resources"] for r in role["rules"])
