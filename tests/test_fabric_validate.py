"""`pdkit validate` against a fake cluster: phases in order, cleanup, refusals, the saved result, the CLI."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
import yaml

from pdkit.cli.main import main
from pdkit.errors import KitError
from pdkit.ops import kube
from pdkit.ops.fabric import validate
from pdkit.ops.kube import JobState, PodState, Waiting, run_jobs
from tests.fixtures.fabric import fakes
from tests.fixtures.fabric.fakes import GOOD_LOGS, Clock, FakeCluster, fixture

IMAGE = "registry.example/validation:v1"
SERVING_IMAGE = "registry.example/sglang-efa:v1"


def _run(plan, cluster, clock=None, **kw):
    clock = clock or Clock()
    return validate.run(plan, cluster, image=IMAGE, waiting=lambda _phase: fakes.waiting(clock), run_id="abc123", **kw)


def test_all_phases_pass_and_everything_is_cleaned_up(plan):
    cluster = FakeCluster(logs=GOOD_LOGS)
    outcome = _run(plan, cluster)
    assert outcome.ok, [c for c in outcome.checks if c.status != "PASS"]
    jobs = [o["metadata"]["name"] for o in cluster.created if o["kind"] == "Job"]
    assert jobs == [
        "node-image-abc123",
        "efa-prefill-abc123",
        "efa-decode-abc123",
        "nccl-abc123",
        "uccl-decode-0-abc123",
        "mooncake-decode-abc123",
        "mooncake-prefill-abc123",
    ]
    # Everything but the namespace is deleted again.
    created = {(o["kind"], o["metadata"]["name"]) for o in cluster.created if o["kind"] != "Namespace"}
    deleted = {(o["kind"], o["metadata"]["name"]) for o in cluster.deleted}
    assert created == deleted
    assert {
        ("ServiceAccount", "nccl-launcher-abc123"),
        ("Role", "nccl-launcher-abc123"),
        ("RoleBinding", "nccl-launcher-abc123"),
    } <= deleted


def test_keep_leaves_the_objects(plan):
    cluster = FakeCluster(logs=GOOD_LOGS)
    _run(plan, cluster, keep=True)
    assert cluster.deleted == []


def test_only_runs_the_asked_phases(plan):
    cluster = FakeCluster(logs=GOOD_LOGS)
    outcome = _run(plan, cluster, phases=("nccl",))
    assert [o["metadata"]["name"] for o in cluster.created if o["kind"] == "Job"] == ["nccl-abc123"]
    assert outcome.ok


def test_refuses_while_serving_holds_the_gpus(plan):
    cluster = FakeCluster(logs=GOOD_LOGS, serving=["glm51-2p2d-decode-0", "glm51-2p2d-decode-0-1"])
    with pytest.raises(KitError, match="serving pods hold the GPU nodes") as err:
        _run(plan, cluster)
    assert '{"op":"replace","path":"/spec/roles/1/spec/replicas","value":0}' in str(err.value)
    assert '{"op":"replace","path":"/spec/roles/1/spec/replicas","value":1}' in str(err.value)
    assert cluster.created == []


def test_an_unschedulable_phase_skips_the_rest(plan):
    clock = Clock()
    cluster = FakeCluster(logs=GOOD_LOGS, stuck={"efa-decode": "0/6 nodes are available: 2 Insufficient vpc.amazonaws.com/efa."})
    outcome = _run(plan, cluster, clock)
    rows = {(c.name, c.target): c for c in outcome.checks}
    assert rows[("EFA probe and fi_pingpong", "decode")].status == "FAIL"
    assert rows[("nccl", "-")].status == "SKIP"
    assert "not run: efa-decode could not run" in rows[("nccl", "-")].measured
    assert not outcome.ok
    assert [o["metadata"]["name"] for o in cluster.created if o["kind"] == "Job"] == [
        "node-image-abc123",
        "efa-prefill-abc123",
        "efa-decode-abc123",
    ]
    assert clock.now > 60  # waited the schedule timeout, not forever


def test_run_jobs_times_out_a_job_that_never_ends():
    clock = Clock()
    cluster = FakeCluster(stuck={"x": ""})  # pending without a scheduler message: just slow
    job = {
        "kind": "Job",
        "metadata": {"name": "x", "namespace": "ns", "labels": {"pdkit/validation-check": "x"}},
        "spec": {"completions": 1},
    }
    runs = run_jobs(cluster, [(job, [])], waiting=Waiting(timeout_s=100, poll_s=10, sleep=clock.sleep, clock=clock))
    assert runs["x"].problem == "still running after 2 min"
    assert cluster.deleted == [job]


def test_run_jobs_collects_logs_by_completion_index():
    class TwoPods(FakeCluster):
        def job(self, namespace, name):
            return JobState(succeeded=2, finished=True)

        def pods(self, namespace, job):
            return [
                PodState("x-1-a", 1, "n1", "Succeeded"),
                PodState("x-0-a", 0, "n0", "Succeeded"),
                PodState("stray", None, None, "Failed"),
            ]

        def logs(self, namespace, pod):
            return f"log of {pod}"

    cluster = TwoPods()
    job = {"kind": "Job", "metadata": {"name": "x", "namespace": "ns", "labels": {}}, "spec": {}}
    cluster.jobs["x"] = job
    runs = run_jobs(cluster, [(job, [])], waiting=Waiting(timeout_s=10))
    assert runs["x"].logs == {0: "log of x-0-a", 1: "log of x-1-a"}
    assert runs["x"].nodes == {0: "n0", 1: "n1"}
    assert runs["x"].finished


def test_outcome_saves_json_and_logs(plan, tmp_path):
    outcome = _run(plan, FakeCluster(logs=GOOD_LOGS))
    files = outcome.save(tmp_path / "v" / "validate.json")
    data = json.loads((tmp_path / "v" / "validate.json").read_text())
    assert data["kind"] == "pdkit-validation"
    assert data["ok"] is True
    assert data["thresholds"]["allreduce_min_busbw_gbps"] == 200.0
    assert {c["status"] for c in data["checks"]} == {"PASS", "SKIP"}  # SKIP: no node-image.env on the EKS-optimized AMI
    assert (tmp_path / "v" / "validate-logs" / "nccl-0.log").read_text() == fixture("nccl-efa.log")
    assert len(files) > 5
    assert validate.load(tmp_path / "v" / "validate.json")["run_id"] == "abc123"


def test_load_rejects_other_json(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"kind": "something"}')
    with pytest.raises(KitError, match="not a `pdkit validate` result"):
        validate.load(path)


def test_default_image_is_the_plans_validation_image(plan):
    image = validate.default_image(plan, None)
    assert image.startswith("000000000000.dkr.ecr.eu-south-2.amazonaws.com/glm51-2p2d/validation:")
    assert image.endswith(plan.images["validation"].tag)


# --- the command ---------------------------------------------------------------------------------------


def test_cli_render_needs_no_cluster(capsys, plan):
    """`pdkit validate --render` prints every phase's objects (the Mooncake Jobs with the rest), each valid for the
    plan's Kubernetes version."""
    assert main(["validate", "--render", "--registry", "123456789012.dkr.ecr.eu-south-2.amazonaws.com"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs][:4] == ["Namespace", "ServiceAccount", "Role", "RoleBinding"]
    assert {"mooncake-decode-render", "mooncake-prefill-render"} <= {d["metadata"]["name"] for d in docs if d["kind"] == "Job"}
    for doc in docs:
        kubernetes_validate.validate(doc, f"{plan.kubernetes_version}.0", strict=True)


def test_cli_rejects_unknown_phase(capsys):
    assert main(["validate", "--only", "efa,disk"]) == 2
    assert "unknown phase(s) ['disk']" in capsys.readouterr().err


def test_cli_runs_prints_and_saves(monkeypatch, capsys, tmp_path):
    """`pdkit validate` prints the rows and the next step and saves the result, which says which images ran. Issue 14
    item 8: the UCCL-EP check stands for decode, so it runs in decode's serving image (the validation image's deep_ep
    could differ from the one serving loads); nccl in the validation image."""
    fake = FakeCluster(logs=GOOD_LOGS)
    monkeypatch.setattr(kube, "connect", lambda context: fake)
    out = tmp_path / "validate.json"
    assert main(["validate", "--out", str(out), "--image", IMAGE, "--serving-image", SERVING_IMAGE]) == 0
    text = capsys.readouterr().out
    assert "all_reduce_perf bus bandwidth" in text
    assert "PASS" in text
    assert "FAIL" not in text
    assert "Next: scale serving back up, then `pdkit bench`" in text
    images = {
        o["metadata"]["name"].rsplit("-", 1)[0]: o["spec"]["template"]["spec"]["containers"][0]["image"]
        for o in fake.created
        if o["kind"] == "Job"
    }
    assert (images["uccl-decode-0"], images["nccl"]) == (SERVING_IMAGE, IMAGE)
    saved = json.loads(out.read_text())
    assert (saved["image"], saved["role_images"]) == (IMAGE, {"prefill": SERVING_IMAGE, "decode": SERVING_IMAGE})


def test_cli_exit_code_is_one_on_failure(monkeypatch, capsys, tmp_path):
    logs = {**GOOD_LOGS, "nccl": {0: fixture("nccl-socket.log")}}
    monkeypatch.setattr(kube, "connect", lambda context: FakeCluster(logs=logs))
    argv = ["validate", "--out", str(tmp_path / "v.json"), "--output", "json", "--image", IMAGE, "--serving-image", SERVING_IMAGE]
    assert main(argv) == 1
    data = json.loads(capsys.readouterr().out)
    failed = [c for c in data["checks"] if c["status"] == "FAIL"]
    assert {c["name"] for c in failed} >= {"all_reduce_perf network", "alltoall_perf network"}
    assert all(c["next_step"] for c in failed)


def test_help_imports_nothing_heavy():
    """Help must stay fast: no kubernetes, rich or matplotlib at import or registration."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom pdkit.cli.main import build_parser as parser\n"
        "for cmd in ('validate', 'bench', 'report'):\n"
        "    try:\n        parser().parse_args([cmd, '--help'])\n    except SystemExit:\n        pass\n"
        "print(sorted(m for m in ('kubernetes', 'rich', 'matplotlib', 'boto3') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_validate_runs_every_phase_by_default_and_its_help_names_them(capsys):
    """A new phase is run by plain `pdkit validate` and documented in its --help."""
    from pdkit.cli.main import build_parser
    from pdkit.render import fabric as manifests

    args = build_parser().parse_args(["validate"])
    assert args.only is None
    help_text = build_parser()._subparsers._group_actions[0].choices["validate"].format_help()
    for phase in manifests.PHASES:
        assert phase in help_text
