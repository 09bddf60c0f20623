"""`pdkit weights import|verify`: the Job through a fake Kubernetes API, the bucket through botocore's Stubber."""

from __future__ import annotations

import hashlib
import io
import json

import kubernetes_validate
import pytest
import yaml
from botocore.response import StreamingBody
from kubernetes.client import (
    V1Container,
    V1Job,
    V1JobCondition,
    V1JobStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodCondition,
    V1PodList,
    V1PodSpec,
    V1PodStatus,
    V1ServiceAccount,
)
from kubernetes.client.exceptions import ApiException

from pdkit.cli import commands
from pdkit.cli.main import main
from pdkit.ops import kube, weights
from pdkit.pods.weights_manifest import FileEntry, Manifest
from tests.fixtures.cmd_support import profile

pytest_plugins = ["tests.fixtures.cmd_fixtures"]

ACCOUNT = "123456789012"
BUCKET = f"glm51-2p2d-weights-{ACCOUNT}-eu-south-2"
PREFIX = "models/zai-org/GLM-5.1-FP8/main/"
NS, JOB, SA = "pd-serving", "glm51-2p2d-weights-import", "glm51-2p2d-weights-writer"
POD = "glm51-2p2d-weights-import-x7k2p"


@pytest.fixture(autouse=True)
def weights_registered(monkeypatch):
    """Until pdkit/cli/commands/__init__.py lists the module, register it for these tests."""
    if "weights" not in commands.MODULES:
        monkeypatch.setattr(commands, "MODULES", (*commands.MODULES, "weights"))
    monkeypatch.setattr(weights, "POLL_SECONDS", 0)


def stub_account(aws):
    aws("sts").add_response(
        "get_caller_identity", {"UserId": "AIDAEXAMPLE", "Account": ACCOUNT, "Arn": f"arn:aws:iam::{ACCOUNT}:user/op"}, {}
    )


# --- Kubernetes fakes ---------------------------------------------------------------------------------


def job_status(*, active=0, failed=0, complete=False, failure=None) -> V1Job:
    conditions = []
    if complete:
        conditions.append(V1JobCondition(type="Complete", status="True"))
    if failure:
        reason, message = failure
        conditions.append(V1JobCondition(type="Failed", status="True", reason=reason, message=message))
    return V1Job(metadata=V1ObjectMeta(name=JOB), status=V1JobStatus(active=active, failed=failed, conditions=conditions or None))


def pod(phase="Running", name=POD) -> V1Pod:
    return V1Pod(
        metadata=V1ObjectMeta(name=name, annotations={}),
        spec=V1PodSpec(containers=[V1Container(name="import")], node_name="ip-10-0-64-12"),
        status=V1PodStatus(phase=phase),
    )


class Core:
    def __init__(self, *, accounts=(SA,), pods=(), logs=()):
        self.accounts, self.pods = set(accounts), list(pods)
        self.logs = list(logs)  # successive log texts, one per read; the last one repeats
        self.log_reads: list[tuple[str, str, int]] = []

    def read_namespaced_service_account(self, name, namespace, *, _request_timeout):
        if name not in self.accounts:
            raise ApiException(status=404, reason="Not Found")
        return V1ServiceAccount(metadata=V1ObjectMeta(name=name, namespace=namespace))

    def list_namespaced_pod(self, namespace, *, label_selector, _request_timeout):
        assert label_selector == f"batch.kubernetes.io/job-name={JOB}"
        return V1PodList(items=self.pods)

    def read_namespaced_pod_log(self, name, namespace, *, container, tail_lines, _request_timeout):
        self.log_reads.append((name, container, tail_lines))
        text = self.logs.pop(0) if len(self.logs) > 1 else (self.logs[0] if self.logs else "")
        return "\n".join(text.splitlines()[-tail_lines:])


class Batch:
    def __init__(self, before=None, after=()):
        self.states = [before]  # what reads return: None = no such Job
        self.after = list(after)
        self.created: list[dict] = []
        self.deleted: list[tuple[str, str]] = []

    def read_namespaced_job_status(self, name, namespace, *, _request_timeout):
        assert (name, namespace) == (JOB, NS)
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        if state is None:
            raise ApiException(status=404, reason="Not Found")
        return state

    def create_namespaced_job(self, namespace, body):
        self.created.append(body)
        self.states = list(self.after) or [job_status(active=1)]

    def delete_namespaced_job(self, name, namespace, *, propagation_policy):
        self.deleted.append((name, propagation_policy))
        if self.states == [None]:
            raise ApiException(status=404, reason="Not Found")


@pytest.fixture
def cluster(monkeypatch):
    def install(core=None, batch=None):
        core, batch = core or Core(), batch or Batch()
        monkeypatch.setattr(kube, "connect", lambda context: kube.Kube(core=core, batch=batch))
        return core, batch

    return install


# --- import ---------------------------------------------------------------------------------------------


def test_import_creates_the_job_from_the_plan(aws, cluster, capsys):
    stub_account(aws)
    _, batch = cluster()
    assert main(["weights", "import"]) == 0
    (job,) = batch.created
    kubernetes_validate.validate(job, "1.36.0", strict=True)
    spec = job["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == SA
    assert spec["nodeSelector"] == {"pdkit/role": "system"}
    command = spec["containers"][0]["command"]
    assert command[command.index("--bucket") + 1] == BUCKET
    assert command[command.index("--prefix") + 1] == PREFIX
    assert spec["containers"][0]["image"].startswith(f"{ACCOUNT}.dkr.ecr.eu-south-2.amazonaws.com/")
    assert batch.deleted == [(JOB, "Background")], "a previous Job of that name goes first, with its pods"
    out = capsys.readouterr().out
    assert f"Job {NS}/{JOB} started on the system nodes: zai-org/GLM-5.1-FP8@main -> s3://{BUCKET}/{PREFIX}" in out
    assert "no Hub token (the model is not gated)" in out
    assert f"kubectl -n {NS} logs -f job/{JOB}" in out


def test_without_the_writer_service_account_nothing_is_created(aws, cluster, capsys):
    stub_account(aws)
    _, batch = cluster(core=Core(accounts=()))
    assert main(["weights", "import"]) == 2
    assert batch.created == []
    err = capsys.readouterr().err
    assert f"service account {NS}/{SA} does not exist" in err
    assert "deploy the serving stack" in err


def test_a_running_import_is_left_alone_unless_restarted(aws, cluster, capsys):
    stub_account(aws)
    _, batch = cluster(batch=Batch(before=job_status(active=1)))
    assert main(["weights", "import"]) == 0
    assert batch.created == []
    assert "already importing; leaving it running" in capsys.readouterr().out
    stub_account(aws)
    assert main(["weights", "import", "--restart"]) == 0
    assert len(batch.created) == 1
    assert batch.deleted == [(JOB, "Background")]


def test_a_finished_job_is_replaced(aws, cluster):
    stub_account(aws)
    _, batch = cluster(batch=Batch(before=job_status(failure=("BackoffLimitExceeded", "Job has reached the specified backoff limit"))))
    assert main(["weights", "import"]) == 0
    assert len(batch.created) == 1


def test_wait_follows_the_log_until_the_job_completes(aws, cluster, capsys):
    stub_account(aws)
    logs = [
        "",
        "2026-12-01 10:00:00 import: zai-org/GLM-5.1-FP8@abc (revision main), 152 files, 756.0 GB",
        *["2026-12-01 10:10:00 imported 312.4/756.0 GB (41%), 0.52 GB/s, ETA 14.2 min, 61/152 files (0 already in the bucket)"] * 3,
        "2026-12-01 10:25:00 import complete: 152 files, 756.0 GB (0 already in the bucket) in 1500 s; manifest 3f2a9c1d7e6b",
    ]
    after = [job_status(active=1)] * 6 + [job_status(complete=True)]
    core, _ = cluster(core=Core(pods=[pod()], logs=logs), batch=Batch(after=after))
    assert main(["weights", "import", "--wait"]) == 0
    captured = capsys.readouterr()
    assert "imported 312.4/756.0 GB (41%), 0.52 GB/s, ETA 14.2 min" in captured.err
    assert captured.err.count("imported 312.4/756.0 GB") == 1, "a line is shown once, not at every poll"
    assert "import complete: 152 files, 756.0 GB" in captured.out
    assert "Next: pdkit weights verify" in captured.out
    assert {(name, container) for name, container, _ in core.log_reads} == {(POD, "import")}


def test_wait_reports_a_failed_import_with_the_log_and_the_fix(aws, cluster, capsys):
    stub_account(aws)
    log = "2026-12-01 10:00:03 pdkit weights import: error: zai-org/GLM-5.1-FP8 is gated on the Hugging Face Hub. Fix: ..."
    failed = job_status(failed=1, failure=("PodFailurePolicy", "Container import for pod pd-serving/x failed with exit code 3"))
    cluster(core=Core(pods=[pod("Failed")], logs=[log]), batch=Batch(after=[failed]))
    assert main(["weights", "import", "--wait"]) == 1
    out = capsys.readouterr().out
    assert "Import failed: PodFailurePolicy: Container import for pod pd-serving/x failed with exit code 3." in out
    assert "  | 2026-12-01 10:00:03 pdkit weights import: error: zai-org/GLM-5.1-FP8 is gated" in out
    assert "a retry cannot help until the error line above is acted on" in out


def test_wait_says_when_an_attempt_failed_and_when_the_pod_is_stuck(aws, cluster, capsys):
    stub_account(aws)
    stuck = pod("Pending")
    stuck.status.conditions = [
        V1PodCondition(type="PodScheduled", status="False", reason="Unschedulable", message="0/2 nodes: Insufficient memory.")
    ]
    after = [
        job_status(active=1),
        job_status(active=1, failed=1),
        job_status(failure=("DeadlineExceeded", "Job was active longer than specified deadline"), failed=1),
    ]
    cluster(core=Core(pods=[stuck]), batch=Batch(after=after))
    assert main(["weights", "import", "--wait"]) == 1
    captured = capsys.readouterr()
    assert "cannot be scheduled on a system node: 0/2 nodes: Insufficient memory." in captured.err
    assert captured.err.count("cannot be scheduled") == 1
    assert "attempt 1 failed; the Job retries" in captured.err
    assert "larger --deadline-hours" in captured.out


def test_render_prints_the_job_without_aws_or_kubernetes(aws, monkeypatch, capsys):
    monkeypatch.setattr(kube, "connect", lambda context: pytest.fail("--render must not touch the cluster"))
    registry = ["--registry", "123456789012.dkr.ecr.eu-south-2.amazonaws.com", "--bucket", BUCKET]
    assert main(["weights", "import", "--render", "--deadline-hours", "5", *registry]) == 0
    job = yaml.safe_load(capsys.readouterr().out)
    kubernetes_validate.validate(job, "1.36.0", strict=True)
    assert job["kind"] == "Job"
    assert job["spec"]["activeDeadlineSeconds"] == 5 * 3600
    assert "123456789012.dkr.ecr.eu-south-2.amazonaws.com/" in job["spec"]["template"]["spec"]["containers"][0]["image"]
    assert aws.requested == [], "no AWS client was even created"


def test_an_unreachable_cluster_explains_the_ssm_access_path(aws, monkeypatch, tmp_path, capsys):
    stub_account(aws)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert main(["weights", "import"]) == 1
    err = capsys.readouterr().err
    assert "Kubernetes: no usable kubeconfig" in err
    assert "AWS-StartPortForwardingSessionToRemoteHost" in err


def test_a_gated_model_passes_its_secret_to_the_job(aws, cluster, tmp_path):
    from pdkit.model.profile import ModelRef

    if "hf_token_secret_arn" not in ModelRef.model_fields:
        pytest.skip("ModelRef.hf_token_secret_arn is not in the profile schema yet")
    arn = f"arn:aws:secretsmanager:eu-south-2:{ACCOUNT}:secret:glm51/hf-token-AbCdEf"
    stub_account(aws)
    _, batch = cluster()
    assert main(["weights", "import", "--profile", profile(tmp_path, model__hf_token_secret_arn=arn)]) == 0
    command = batch.created[0]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--hf-token-secret-arn") + 1] == arn


def test_replace_waits_for_the_previous_job_to_go():
    class Slow(Batch):
        conflicts = 2

        def create_namespaced_job(self, namespace, body):
            if self.conflicts:
                self.conflicts -= 1
                raise ApiException(status=409, reason="AlreadyExists")
            super().create_namespaced_job(namespace, body)

    batch, naps = Slow(before=job_status(complete=True)), []
    c = kube.Kube(core=Core(), batch=batch)
    c.replace({"kind": "Job", "metadata": {"name": JOB, "namespace": NS}}, sleep=naps.append)
    assert len(batch.created) == 1
    assert len(naps) == 2


# --- verify ---------------------------------------------------------------------------------------------

DATA = {
    "config.json": b'{"architectures": ["GlmMoeDsaForCausalLM"]}',
    "model-00001-of-00002.safetensors": b"\x01" * 4096,
    "model-00002-of-00002.safetensors": b"\x02" * 1024,
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


MANIFEST = Manifest(model="zai-org/GLM-5.1-FP8", revision="c" * 40, files=tuple(FileEntry(p, len(d), sha(d)) for p, d in DATA.items()))


def body(data: bytes) -> StreamingBody:
    return StreamingBody(io.BytesIO(data), len(data))


def stub_manifest(aws, manifest=MANIFEST):
    text = manifest.to_json().encode()
    aws("s3").add_response(
        "get_object", {"Body": body(text), "ContentLength": len(text)}, {"Bucket": BUCKET, "Key": PREFIX + "pdkit-manifest.json"}
    )


def stub_listing(aws, sizes: dict[str, int]):
    """Two pages, so the paginator is exercised."""
    items = [{"Key": PREFIX + k, "Size": v} for k, v in sorted(sizes.items())]
    half = len(items) // 2
    aws("s3").add_response(
        "list_objects_v2",
        {"Contents": items[:half], "IsTruncated": True, "NextContinuationToken": "t1", "KeyCount": half},
        {"Bucket": BUCKET, "Prefix": PREFIX},
    )
    aws("s3").add_response(
        "list_objects_v2",
        {"Contents": items[half:], "IsTruncated": False, "KeyCount": len(items) - half},
        {"Bucket": BUCKET, "Prefix": PREFIX, "ContinuationToken": "t1"},
    )


def stub_head(aws, path, recorded):
    aws("s3").add_response(
        "head_object", {"ContentLength": len(DATA[path]), "Metadata": {"sha256": recorded}}, {"Bucket": BUCKET, "Key": PREFIX + path}
    )


def sizes_with_manifest(**over):
    return {**{p: len(d) for p, d in DATA.items()}, "pdkit-manifest.json": 900, **over}


VERIFY = ["weights", "verify", "--workers", "1"]  # one thread: the Stubber answers in order


def test_verify_a_complete_bucket(aws, capsys):
    stub_account(aws)
    stub_manifest(aws)
    stub_listing(aws, sizes_with_manifest())
    for path, data in DATA.items():
        stub_head(aws, path, sha(data))
    assert main(VERIFY) == 0
    out = capsys.readouterr().out
    assert f"s3://{BUCKET}/{PREFIX}: manifest {MANIFEST.digest()[:12]} of zai-org/GLM-5.1-FP8@{'c' * 40}, 3 files" in out
    assert "All 3 files match the manifest" in out


def test_verify_names_missing_resized_and_replaced_objects(aws, capsys):
    stub_account(aws)
    stub_manifest(aws)
    sizes = sizes_with_manifest(**{"model-00002-of-00002.safetensors": 1000, "old/model-00001-of-00009.safetensors": 5})
    del sizes["config.json"]
    stub_listing(aws, sizes)
    stub_head(aws, "model-00001-of-00002.safetensors", "0" * 64)
    assert main(VERIFY) == 1
    out = capsys.readouterr().out
    assert "FAIL  config.json: missing" in out
    assert "FAIL  model-00001-of-00002.safetensors: sha256 recorded on the object (" + "0" * 64 + ") differs from the manifest" in out
    assert "FAIL  model-00002-of-00002.safetensors: 1000 bytes in the bucket, 1024 in the manifest" in out
    assert "1 objects under the prefix are not in the manifest" in out
    assert "old/model-00001-of-00009.safetensors" in out
    assert "Fix: run `pdkit weights import` again" in out


def test_deep_verify_hashes_every_object(aws, capsys):
    stub_account(aws)
    stub_manifest(aws)
    stub_listing(aws, sizes_with_manifest())
    for path, data in DATA.items():
        stub_head(aws, path, sha(data))
        served = b"\x09" + data[1:] if path == "model-00001-of-00002.safetensors" else data
        aws("s3").add_response("get_object", {"Body": body(served), "ContentLength": len(served)}, {"Bucket": BUCKET, "Key": PREFIX + path})
    assert main([*VERIFY, "--deep", "--output", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["deep"] is True
    assert report["ok"] is False
    assert [p["path"] for p in report["problems"]] == ["model-00001-of-00002.safetensors"]
    assert report["problems"][0]["problem"].startswith("content hashes to ")
    assert report["manifest"]["digest"] == MANIFEST.digest()


def test_deep_mismatch_says_to_delete_before_reimporting(aws, capsys):
    stub_account(aws)
    stub_manifest(aws)
    stub_listing(aws, sizes_with_manifest())
    for path, data in DATA.items():
        stub_head(aws, path, sha(data))
        served = b"x" * len(data) if path == "config.json" else data
        aws("s3").add_response("get_object", {"Body": body(served), "ContentLength": len(served)}, {"Bucket": BUCKET, "Key": PREFIX + path})
    assert main([*VERIFY, "--deep"]) == 1
    out = capsys.readouterr().out
    assert f"aws s3 rm s3://{BUCKET}/{PREFIX}config.json" in out


def test_verify_with_an_explicit_bucket_needs_no_account_lookup(aws, capsys):
    other = "my-weights"
    text = MANIFEST.to_json().encode()
    aws("s3").add_response("get_object", {"Body": body(text)}, {"Bucket": other, "Key": PREFIX + "pdkit-manifest.json"})
    aws("s3").add_client_error("list_objects_v2", "NoSuchBucket", "The specified bucket does not exist", 404)
    assert main([*VERIFY, "--bucket", other]) == 2
    assert "bucket my-weights does not exist in this account" in capsys.readouterr().err


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("pdkit: error: ")
    return err[0]


def test_no_manifest_means_import_first(aws, capsys):
    stub_account(aws)
    aws("s3").add_client_error("get_object", "NoSuchKey", "The specified key does not exist.", 404)
    assert main(VERIFY) == 2
    assert "run `pdkit weights import` first" in one_error_line(capsys)


@pytest.mark.parametrize(
    ("operation", "code", "status", "expected"),
    [
        ("list_objects_v2", "AccessDenied", 403, "may not ListObjectsV2 on s3://glm51-2p2d-weights-123456789012-eu-south-2/models/"),
        ("list_objects_v2", "AccessDenied", 403, "allow s3:ListBucket"),
        ("head_object", "403", 403, "allow s3:GetObject on the bucket's prefix and kms:Decrypt on the serving stack's weights key"),
        ("list_objects_v2", "PermanentRedirect", 301, "is not in eu-south-2"),
        ("list_objects_v2", "SlowDown", 503, "S3 kept failing ListObjectsV2"),
        ("list_objects_v2", "ExpiredToken", 400, "AWS rejected the credentials (ExpiredToken"),
    ],
)
def test_each_s3_error_is_one_line_with_its_fix(aws, capsys, operation, code, status, expected):
    stub_account(aws)
    stub_manifest(aws)
    if operation == "head_object":
        stub_listing(aws, sizes_with_manifest())
    aws("s3").add_client_error(operation, code, "Forbidden" if code == "403" else f"{code} from the test", status)
    assert main(VERIFY) == 2
    assert expected in one_error_line(capsys)


def test_kms_denial_on_the_manifest_names_the_key(aws, capsys):
    stub_account(aws)
    aws("s3").add_client_error(
        "get_object", "AccessDenied", "User: arn:aws:iam::123456789012:user/op is not authorized to perform: kms:Decrypt", 403
    )
    assert main(VERIFY) == 2
    line = one_error_line(capsys)
    assert "kms:Decrypt on the serving stack's weights key" in line
    assert "is not authorized to perform: kms:Decrypt" in line


def test_sts_failure_is_translated_too(aws, capsys):
    aws("sts").add_client_error("get_caller_identity", "ExpiredToken", "The security token included in the request is expired", 403)
    assert main(VERIFY) == 2
    assert "AWS rejected the credentials" in one_error_line(capsys)
