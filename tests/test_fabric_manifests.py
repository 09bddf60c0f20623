"""The validation Jobs: valid for the plan's Kubernetes version, devices from the instance table, no
privilege, placed by the plan's labels and taints, and scripted to run what the checks parse."""

from __future__ import annotations

import shlex

import kubernetes_validate
import pytest

from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.model.plan import ROLE_LABEL
from pdkit.model.thresholds import derive
from pdkit.render import fabric as manifests
from pdkit.render import pod as pod_conventions
from pdkit.render.pod import EFA, GPU

IMAGE = "000000000000.dkr.ecr.eu-south-2.amazonaws.com/glm51-2p2d/validation:validation-0123456789ab"


@pytest.fixture(scope="module")
def bundle(plan):
    return manifests.render(plan, derive(plan), image=IMAGE, run_id="abc123")


def _jobs(bundle):
    return {spec.key: spec for spec in bundle.jobs}


def _pod(spec):
    return spec.job["spec"]["template"]["spec"]


def _container(spec):
    return _pod(spec)["containers"][0]


def test_a_typo_fails_validation(plan, bundle):
    """kubernetes-validate's strict schemas for the plan's version catch typos in field names, so the validation of
    every object (tests/test_fabric_node_image.py, both AMI sources; `validate --render` in tests/test_fabric_validate.py)
    is not vacuous."""
    job = dict(_jobs(bundle)["nccl"].job)
    job["spec"] = {**job["spec"], "completionsMode": "Indexed"}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, f"{plan.kubernetes_version}.0", strict=True)


def test_phases_and_jobs_of_the_seed_layout(bundle):
    """2P2D: one EFA job per role (2 pods each), nccl across 4 nodes, UCCL-EP on the decode pair, Mooncake
    from one prefill node into one decode node."""
    jobs = _jobs(bundle)
    assert set(jobs) == {"node-image", "efa-prefill", "efa-decode", "nccl", "uccl-decode-0", "mooncake-decode", "mooncake-prefill"}
    assert [s.phase for s in bundle.jobs] == ["node-image", "efa", "efa", "nccl", "uccl", "mooncake", "mooncake"]
    assert {k: s.pods for k, s in jobs.items()} == {
        "node-image": 4,
        "efa-prefill": 2,
        "efa-decode": 2,
        "nccl": 4,
        "uccl-decode-0": 2,
        "mooncake-decode": 1,
        "mooncake-prefill": 1,
    }
    for spec in bundle.jobs:
        s = spec.job["spec"]
        assert s["completionMode"] == "Indexed"
        assert s["completions"] == s["parallelism"] == spec.pods
        assert s["backoffLimit"] == 0


def test_gpu_jobs_request_every_gpu_and_efa_device_of_the_instance(plan, bundle):
    it = plan.instance
    for key in ("nccl", "uccl-decode-0"):
        res = _container(_jobs(bundle)[key])["resources"]
        assert res["limits"] == {GPU: str(it.gpus), EFA: str(it.efa_devices)}
        assert res["requests"][GPU] == "8"
        assert res["requests"][EFA] == "16"


def test_efa_probe_requests_every_efa_device_and_no_gpu(bundle):
    for key in ("efa-prefill", "efa-decode"):
        res = _container(_jobs(bundle)[key])["resources"]
        assert res["limits"] == {EFA: "16"}
        assert GPU not in res["requests"]


def test_devices_follow_capacity_efa_devices(raw_with):
    """A profile that uses 8 of 16 EFA devices asks the device plugin for 8: the count comes from the plan."""
    p = plan_mod.build(profile_files.parse(raw_with("capacity.efa_devices", 8)))
    b = manifests.render(p, derive(p), image=IMAGE, run_id="x")
    for spec in b.jobs:
        if spec.key != "node-image":  # GPUs only: it reads the node, it moves no traffic
            assert _container(spec)["resources"]["limits"][EFA] == "8"


def test_every_check_runs_as_non_root_with_its_roles_seccomp_profile(bundle):
    """No privilege and no host access: tests/test_pod.py, for every renderer."""
    for spec in bundle.jobs:
        pod = _pod(spec)
        assert _container(spec)["securityContext"]["runAsNonRoot"] is True
        # A role's checks run with its serving pods' seccomp profile (the node's default unless the
        # profile says RuntimeDefault, tests/test_role_pod.py); the cross-role ones with RuntimeDefault.
        assert pod["securityContext"].get("seccompProfile", {"type": "RuntimeDefault"}) == {"type": "RuntimeDefault"}


def test_namespace_enforces_pod_security_as_the_roles_need(plan, bundle):
    """ "baseline" while the roles run with the node's seccomp default, as serving does ("restricted"
    refuses an unset profile); "restricted" once they run RuntimeDefault (tests/test_role_pod.py)."""
    labels = bundle.namespace["metadata"]["labels"]
    assert bundle.namespace["metadata"]["name"] == f"{plan.name}-validation"
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == f"v{plan.kubernetes_version}"


def test_every_check_but_the_node_image_mounts_shm(plan, bundle):
    """Each /dev/shm is the pod's in-memory emptyDir (tests/test_pod.py), an eighth of the node's memory."""
    assert pod_conventions.shm_volume(plan)["emptyDir"]["sizeLimit"] == f"{plan.instance.memory_mib // 8}Mi"
    for spec in bundle.jobs:
        if spec.key != "node-image":  # runs nothing that uses shared memory
            assert {"name": "dshm", "mountPath": "/dev/shm"} in _container(spec)["volumeMounts"]


def test_single_role_jobs_use_the_roles_node_selector_and_toleration(plan, bundle):
    for role in plan.roles.values():
        pod = _pod(_jobs(bundle)[f"efa-{role.name}"])
        assert pod["nodeSelector"] == {ROLE_LABEL: role.name, "node.kubernetes.io/instance-type": plan.instance.name}
        assert pod["tolerations"] == [{"key": ROLE_LABEL, "operator": "Equal", "value": role.name, "effect": "NoSchedule"}]
    decode = _pod(_jobs(bundle)["uccl-decode-0"])
    assert decode["nodeSelector"][ROLE_LABEL] == "decode"


def test_nccl_spans_both_roles_by_node_affinity_and_both_tolerations(plan, bundle):
    pod = _pod(_jobs(bundle)["nccl"])
    assert "nodeSelector" not in pod
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    expr = {e["key"]: e for e in terms[0]["matchExpressions"]}
    assert expr[ROLE_LABEL] == {"key": ROLE_LABEL, "operator": "In", "values": ["prefill", "decode"]}
    assert {t["value"] for t in pod["tolerations"]} == {"prefill", "decode"}
    assert all(t["effect"] == "NoSchedule" and t["key"] == ROLE_LABEL for t in pod["tolerations"])


def test_one_pod_per_node(bundle):
    for spec in bundle.jobs:
        anti = _pod(spec)["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert anti["topologyKey"] == "kubernetes.io/hostname"
        assert anti["labelSelector"]["matchLabels"] == {manifests.JOB_NAME_LABEL: spec.name}


def test_headless_service_gives_pods_stable_names(bundle):
    for spec in bundle.jobs:
        assert spec.service["spec"]["clusterIP"] == "None"
        assert spec.service["spec"]["publishNotReadyAddresses"] is True
        assert spec.service["spec"]["selector"] == {manifests.JOB_NAME_LABEL: spec.name}
        assert spec.service["metadata"]["name"] == _pod(spec)["subdomain"] == spec.name


def test_pods_get_the_serving_fabric_environment(bundle):
    """Validation measures what serving will use: the same EFA/NCCL variables."""
    for spec in bundle.jobs:
        env = {e["name"]: e.get("value") for e in _container(spec)["env"]}
        assert env["FI_PROVIDER"] == "efa"
        assert env["NCCL_NET_PLUGIN"] == "ofi"
        assert env["NCCL_DEBUG"] == "INFO"
        assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"


def test_the_launchers_role_reads_and_execs_into_pods_of_the_run_namespace_only(plan, bundle):
    """kubectl exec GETs the pod, then opens pods/exec (a WebSocket GET that Kubernetes >= 1.35 also
    authorizes as create); kubectl-rsh.sh lists pods to find a Job index's pod. Nothing else: no
    ClusterRole, no secrets, no writes (https://kubernetes.io/docs/reference/access-authn-authz/rbac/)."""
    account, role, binding = bundle.shared
    ns = f"{plan.name}-validation"
    assert [o["kind"] for o in bundle.shared] == ["ServiceAccount", "Role", "RoleBinding"]
    assert {o["metadata"]["namespace"] for o in bundle.shared} == {ns}
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]},
    ]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": ns}]
    assert account["automountServiceAccountToken"] is False  # only the pods that ask for it get the token


def test_only_the_nccl_pods_get_the_launchers_token(bundle):
    for spec in bundle.jobs:
        pod = _pod(spec)
        if spec.key == "nccl":
            assert pod["serviceAccountName"] == "nccl-launcher-abc123"
            assert pod["automountServiceAccountToken"] is True
        else:
            assert "serviceAccountName" not in pod
            assert pod["automountServiceAccountToken"] is False


def test_no_home_made_remote_exec_is_left(bundle):
    """Issue 20: mpirun reaches the pods through kubectl exec, not a kit socket protocol."""
    import ast
    from pathlib import Path

    fabric = Path(manifests.__file__).parent
    assert not (fabric / "agent.py").exists()
    for module in fabric.glob("*.py"):
        tree = ast.parse(module.read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not imported & {"socket", "socketserver", "pdkit.ops.fabric.agent"}, module.name
    kinds = {o["kind"] for o in bundle.objects()}
    assert not kinds & {"ConfigMap", "Secret"}
    assert all("ports" not in s.service["spec"] for s in bundle.jobs if s.key in ("nccl", "node-image"))


def test_efa_script_pairs_even_and_odd_pods():
    script = manifests.efa_script(job="efa-decode-x", pods=2)
    assert "efa-pingpong.sh server" in script
    assert 'peer="efa-decode-x-$((idx - 1)).efa-decode-x"' in script
    assert "pdkit-probe" in script
    assert "ulimit -l" in script
    assert "fi_info -p efa -t FI_EP_RDM" in script


def test_mpirun_runs_every_gpu_through_kubectl_exec():
    argv = manifests.mpirun_argv(job="nccl-x", pods=4, gpus_per_node=8, test="alltoall_perf")
    assert argv[argv.index("-np") + 1] == "32"
    assert argv[argv.index("-N") + 1] == "8"
    assert argv[argv.index("--host") + 1] == "nccl-x-0:8,nccl-x-1.nccl-x:8,nccl-x-2.nccl-x:8,nccl-x-3.nccl-x:8"
    assert argv[argv.index("plm_rsh_agent") + 1] == "kubectl-rsh.sh"
    tail = ["alltoall_perf", "-b", "8", "-e", "16G", "-f", "2", "-g", "1", "-J", "/dev/shm/alltoall_perf.json"]
    assert argv[argv.index("alltoall_perf") :] == tail


def test_nccl_script_runs_both_tests_and_releases_the_workers(bundle):
    script = _container(_jobs(bundle)["nccl"])["command"][2]
    assert script.count("pdkit-begin test=") == 2
    assert script.count("pdkit-begin json=") == 2  # nccl-tests' -J document, preferred by the checks
    assert "all_reduce_perf" in script
    assert "alltoall_perf" in script
    assert "agent.py" not in script
    workers = "nccl-abc123-1.nccl-abc123 nccl-abc123-2.nccl-abc123 nccl-abc123-3.nccl-abc123"
    assert f'for host in {workers}; do kubectl-rsh.sh "$host" touch {manifests.WORKER_DONE_FILE}; done' in script
    assert script.rstrip().endswith("release\nexit 0")
    assert f"while [ ! -e {manifests.WORKER_DONE_FILE} ]" in script


def test_uccl_runs_the_decode_shape_of_the_model(plan, bundle):
    """Hidden size, top-k and experts from the model table; tokens per rank from the decode role."""
    script = _container(_jobs(bundle)["uccl-decode-0"])["command"][2]
    bench = next(line for line in script.splitlines() if line.startswith("uccl-ep-bench.sh"))
    argv = shlex.split(bench)[:-1]
    m = plan.model
    assert argv == [
        "uccl-ep-bench.sh",
        "low-latency",
        f"--num-tokens={plan.decode.settings.cuda_graph_max_bs}",
        f"--hidden={m.hidden_size}",
        f"--num-topk={m.experts_per_token}",
        f"--num-experts={m.routed_experts}",
    ]
    assert "NNODES=2" in script
    assert "MASTER_ADDR=uccl-decode-0-abc123-0.uccl-decode-0-abc123" in script


def test_scaled_profile_gets_more_pods_and_one_uccl_job_per_decode_replica():
    profile, path = profile_files.load("glm51-fp8-4p4d")
    p = plan_mod.build(profile, profile_path=path)
    b = manifests.render(p, derive(p), image=IMAGE, run_id="x")
    jobs = {s.key: s for s in b.jobs}
    assert jobs["nccl"].pods == 8
    assert jobs["efa-decode"].pods == 4
    assert {k for k in jobs if k.startswith("uccl")} == {"uccl-decode-0", "uccl-decode-1"}


def test_no_uccl_job_when_decode_ep_stays_in_one_node(raw_with):
    raw = raw_with(
        "roles.decode.nodes_per_replica",
        1,
        "roles.decode.replicas",
        2,
        "roles.decode.parallelism.tp",
        8,
        "roles.decode.parallelism.attn_dp",
        8,
        "roles.decode.context_length",
        32768,
        # One node holds 1/8 of the experts per GPU: more than the derived fraction leaves for weights.
        "roles.decode.mem_fraction_static",
        0.88,
    )
    p = plan_mod.build(profile_files.parse(raw))
    assert not p.decode.ep_spans_nodes
    keys = {s.key for s in manifests.render(p, derive(p), image=IMAGE, run_id="x").jobs}
    assert not any(k.startswith("uccl") for k in keys)
