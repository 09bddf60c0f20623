"""The node-image phase: its Job (both AMI sources), its parser on SYNTHETIC output, its checks, its place in the run."""

from __future__ import annotations

import subprocess

import kubernetes_validate
import pytest

from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.model.thresholds import derive
from pdkit.ops.fabric import checks, parsers, validate
from pdkit.ops.kube import JobRun
from pdkit.render import fabric as manifests
from pdkit.render.pod import GPU
from tests.fixtures.fabric import fakes
from tests.fixtures.fabric.fakes import Clock, FakeCluster, fixture

IMAGE = "registry.example/validation:v1"


def _plan(source: str):
    profile, path = profile_files.load(None)
    profile = profile.model_copy(update={"ami": profile.ami.model_copy(update={"source": source})})
    return plan_mod.build(profile, profile_path=path)


@pytest.fixture(scope="module")
def eks():
    return _plan("eks-optimized")


@pytest.fixture(scope="module")
def custom():
    return _plan("custom")


def _spec(plan):
    bundle = manifests.render(plan, derive(plan), image=IMAGE, run_id="abc123")
    return bundle, next(s for s in bundle.jobs if s.key == "node-image")


def _pod(spec):
    return spec.job["spec"]["template"]["spec"]


# --- manifests -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["eks-optimized", "custom"])
def test_node_image_job_validates_and_runs_first(source):
    plan = _plan(source)
    bundle, spec = _spec(plan)
    assert bundle.jobs[0] is spec
    assert spec.phase == "node-image"
    for obj in bundle.objects():
        kubernetes_validate.validate(obj, f"{plan.kubernetes_version}.0", strict=True)


def test_one_pod_per_gpu_node_with_every_gpu(custom):
    _, spec = _spec(custom)
    assert spec.pods == sum(r.nodes for r in custom.roles.values()) == 4
    pod = _pod(spec)
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert {t["key"] for t in pod["tolerations"]} == {r.taint["key"] for r in custom.roles.values()}
    res = pod["containers"][0]["resources"]
    assert res["limits"] == {GPU: str(custom.instance.gpus)}
    assert pod["containers"][0]["image"] == IMAGE


def test_custom_ami_mounts_only_etc_pdkit_read_only_in_its_own_namespace(custom):
    bundle, spec = _spec(custom)
    pod = _pod(spec)
    hostpaths = [v for v in pod["volumes"] if "hostPath" in v]
    assert hostpaths == [{"name": "node-image", "hostPath": {"path": "/etc/pdkit", "type": "Directory"}}]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "node-image", "mountPath": "/host/etc/pdkit", "readOnly": True}]
    ctx = pod["containers"][0]["securityContext"]
    assert ctx["privileged"] is False
    assert ctx["runAsNonRoot"] is True
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    # The hostPath pod is not in the restricted namespace; every other Job is.
    ns = spec.job["metadata"]["namespace"]
    assert ns == f"{custom.name}-validation-node-image" == spec.service["metadata"]["namespace"]
    assert [n["metadata"]["name"] for n in bundle.extra_namespaces] == [ns]
    assert bundle.extra_namespaces[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    others = [s for s in bundle.jobs if s.key != "node-image"]
    assert {s.job["metadata"]["namespace"] for s in others} == {bundle.namespace_name}
    assert all("hostPath" not in v for s in others for v in _pod(s)["volumes"])


def test_eks_optimized_ami_needs_no_host_path(eks):
    bundle, spec = _spec(eks)
    assert _pod(spec)["volumes"] == []
    assert bundle.extra_namespaces == []
    assert spec.job["metadata"]["namespace"] == bundle.namespace_name


def test_script_filters_the_fabric_block_the_parser_reads(tmp_path):
    """The pod's awk filter on a SYNTHETIC full `nvidia-smi -q`, through bash, gives the block the parser expects."""
    script = manifests.node_image_script()
    fabric_cmd = next(line for line in script.splitlines() if line.startswith("nvidia-smi -q"))
    (tmp_path / "nvidia-smi").write_text(f"#!/bin/sh\ncat {fakes.HERE / 'nvidia-smi-q.txt'}\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    out = subprocess.run(
        ["bash", "-c", fabric_cmd], capture_output=True, text=True, check=True, env={"PATH": f"{tmp_path}:/usr/bin:/bin"}
    ).stdout
    r = parsers.parse_node_image(f"pdkit-begin section=fabric\n{out}pdkit-end section=fabric status=0\n")
    assert len(r.fabric) == 8
    assert {(f.state, f.status) for f in r.fabric} == {("Completed", "Success")}
    assert "Inforom" not in out
    assert "Idle" not in out


# --- parser -----------------------------------------------------------------------------------------------


def test_parser_reads_the_ok_log():
    r = parsers.parse_node_image(fixture("node-image-ok.log"))
    assert r.node == "ip-10-0-38-12.eu-south-2.compute.internal"
    assert r.env is not None
    assert r.env["NVIDIA_DRIVER"] == "580.95.05"
    assert r.env["SERVING_IMAGE_DIGEST"].startswith("sha256:")
    assert not r.env_absent
    assert r.drivers == ("580.95.05",) * 8
    assert set(r.gpu_names) == {"NVIDIA H200"}
    assert len(r.fabric) == 8
    assert r.fabric[0].gpu == "00000000:18:00.0"
    assert r.modules == {"efa", "efa_nv_peermem"}


def test_parser_reads_absent_and_broken():
    eks = parsers.parse_node_image(fixture("node-image-eks.log"))
    assert eks.env_absent
    assert eks.env is None
    broken = parsers.parse_node_image(fixture("node-image-broken.log"))
    assert len(broken.drivers) == 7
    assert broken.fabric[0] == parsers.FabricState("00000000:18:00.0", "In Progress", "N/A")
    assert broken.modules == {"efa"}


def test_parser_unreadable_proc_modules_and_nvidia_smi_error():
    text = (
        "pdkit-begin section=gpus\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
        "pdkit-end section=gpus status=9\npdkit-begin section=modules\ngrep: /proc/modules: Permission denied\n"
        "pdkit-end section=modules status=2\n"
    )
    r = parsers.parse_node_image(text)
    assert r.drivers == ()
    assert r.gpu_error is not None
    assert r.gpu_error.startswith("NVIDIA-SMI has failed")
    assert r.modules is None


# --- checks -----------------------------------------------------------------------------------------------


def _rows(plan, log, pods=1):
    run = JobRun(logs=dict.fromkeys(range(pods), log), nodes={i: f"n{i}" for i in range(pods)}, finished=True)
    return {c.name: c for c in checks.node_image_checks(plan, derive(plan), run, pods)}


def test_healthy_custom_node_passes(custom):
    rows = _rows(custom, fixture("node-image-ok.log"))
    assert {name: r.status for name, r in rows.items()} == {
        "NVIDIA driver branch": "PASS",
        "NVIDIA driver = node image's": "PASS",
        "GPUs seen by nvidia-smi": "PASS",
        "NVSwitch fabric": "PASS",
        "EFA kernel modules": "PASS",
    }


def test_eks_optimized_node_skips_the_driver_comparison(eks):
    rows = _rows(eks, fixture("node-image-eks.log"))
    assert rows["NVIDIA driver = node image's"].status == "SKIP"
    assert "580.82.07" in rows["NVIDIA driver = node image's"].measured
    assert rows["NVSwitch fabric"].status == "PASS"


def test_broken_node_fails_each_check_with_a_runbook_step(custom):
    rows = _rows(custom, fixture("node-image-broken.log"))
    assert rows.pop("NVIDIA driver branch").status == "PASS", "580.82.07 is on the 580 branch"
    assert {r.status for r in rows.values()} == {"FAIL"}
    assert rows["NVIDIA driver = node image's"].threshold == "= 580.95.05"
    assert rows["GPUs seen by nvidia-smi"].measured.startswith("7 ")
    assert "1 of 7 GPUs not ready" in rows["NVSwitch fabric"].measured
    assert rows["EFA kernel modules"].measured == "missing efa_nv_peermem"
    assert all("runbooks/03-validate.md#node-image-checks-fail" in r.next_step for r in rows.values())


def test_missing_output_and_stuck_job(custom):
    run = JobRun(logs={0: ""}, finished=True)
    [row] = checks.node_image_checks(custom, derive(custom), run, 1)
    assert (row.status, row.measured) == ("FAIL", "no output")
    stuck = JobRun(problem="pod x cannot be scheduled: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")
    [row] = checks.node_image_checks(custom, derive(custom), stuck, 4)
    assert row.status == "FAIL"
    assert "serving holds the GPUs" in row.next_step


# --- in the run -------------------------------------------------------------------------------------------


def test_run_creates_the_extra_namespace_and_runs_node_image_first(custom):
    logs = {"node-image": dict.fromkeys(range(4), fixture("node-image-ok.log"))}
    cluster = FakeCluster(logs=logs)
    clock = Clock()
    outcome = validate.run(
        custom,
        cluster,
        image=IMAGE,
        phases=("node-image",),
        waiting=lambda _p: fakes.waiting(clock),
        run_id="abc123",
    )
    assert [o["metadata"]["name"] for o in cluster.created if o["kind"] == "Namespace"] == [
        f"{custom.name}-validation",
        f"{custom.name}-validation-node-image",
    ]
    assert [o["metadata"]["name"] for o in cluster.created if o["kind"] == "Job"] == ["node-image-abc123"]
    assert outcome.ok, [c for c in outcome.checks if c.status != "PASS"]
    assert sum(c.name == "NVSwitch fabric" for c in outcome.checks) == 4


@pytest.mark.parametrize(("driver", "status"), [("580.82.07", "PASS"), ("590.44.01", "PASS"), ("575.57.08", "FAIL")])
def test_driver_branch_is_the_minimum_or_newer_on_the_eks_optimized_ami(eks, driver, status):
    """CUDA 13 needs the R580 driver branch or a newer one (CUDA 13.0 release notes, minimum 580.65.06); EKS moves its
    AL2023 NVIDIA AMI to newer branches over time, so a newer branch passes and an older one fails."""
    log = fixture("node-image-eks.log").replace("580.82.07", driver)
    row = _rows(eks, log)["NVIDIA driver branch"]
    assert row.status == status
    assert driver in row.measured
    assert row.threshold == ">= 580"
