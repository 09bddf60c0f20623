"""The weights import Job rendered from the plan (pdkit/render/serving/weights_job.py): valid for the
cluster's Kubernetes version, on the system nodes, as the writer service account, restricted, bounded."""

from __future__ import annotations

import copy
import importlib.util

import kubernetes_validate
import pytest
import yaml

from pdkit.pods import weights_import
from pdkit.render.serving import inputs, names, weights_job

IMAGE = "123456789012.dkr.ecr.eu-south-2.amazonaws.com/glm51-2p2d/sglang-efa:0.5.23-test"
BUCKET = "glm51-2p2d-weights-123456789012-eu-south-2"
GATED_ARN = "arn:aws:secretsmanager:eu-south-2:123456789012:secret:glm51/hf-token-AbCdEf"


@pytest.fixture(scope="module")
def job(plan):
    return weights_job.render(plan, image=IMAGE, bucket=BUCKET, prefix=plan.weights.prefix)


@pytest.fixture(scope="module")
def gated_job(plan):
    return weights_job.render(plan, image=IMAGE, bucket=BUCKET, prefix=plan.weights.prefix, token_secret_arn=GATED_ARN)


def pod(job):
    return job["spec"]["template"]["spec"]


def container(job):
    (only,) = pod(job)["containers"]
    return only


def test_the_job_validates_for_the_plans_kubernetes_version(plan, job, gated_job):
    version = f"{plan.kubernetes_version}.0"
    for obj in (job, gated_job):
        kubernetes_validate.validate(obj, version, strict=True)


def test_validation_is_not_vacuous(plan, job):
    bad = copy.deepcopy(job)
    bad["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] = "3"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, f"{plan.kubernetes_version}.0", strict=True)
    typo = copy.deepcopy(job)
    typo["spec"]["template"]["spec"]["nodeselector"] = typo["spec"]["template"]["spec"].pop("nodeSelector")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, f"{plan.kubernetes_version}.0", strict=True)


def test_it_runs_on_the_system_nodes_never_on_the_gpu_nodes(plan, job):
    spec = pod(job)
    assert spec["nodeSelector"] == plan.system_node_labels == {"pdkit/role": "system"}
    assert "tolerations" not in spec, "no toleration for the GPU roles' taints"
    assert "affinity" not in spec
    resources = container(job)["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert set(resources["limits"]) == {"memory"}


def test_it_runs_as_the_writer_service_account_in_the_serving_namespace(plan, job):
    assert job["metadata"]["namespace"] == names.namespace(plan) == "pd-serving"
    assert job["metadata"]["name"] == "glm51-2p2d-weights-import"
    assert pod(job)["serviceAccountName"] == weights_job.service_account_name(plan) == "glm51-2p2d-weights-writer"
    assert pod(job)["automountServiceAccountToken"] is False


def test_nothing_privileged_and_pod_security_restricted(job):
    """The namespace enforces "baseline" and audits "restricted": the Job meets "restricted" (no privilege and no
    host access, for every renderer: tests/test_pod.py), non-root, on a read-only root and emptyDirs only."""
    spec, sc = pod(job), container(job)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert sc.get("runAsUser", 1) != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert all(set(v) - {"name"} == {"emptyDir"} for v in spec["volumes"]), "no hostPath, no claim"


def test_streaming_needs_no_disk_for_the_checkpoint(plan, job):
    """760 GB never touch the system node's 50 GiB root volume: one small emptyDir for HOME//tmp."""
    (scratch,) = pod(job)["volumes"]
    assert scratch["emptyDir"]["sizeLimit"] == "1Gi"
    mib = int(container(job)["resources"]["requests"]["memory"].removesuffix("Mi"))
    parts = weights_job.WORKERS * (weights_import.PARTS_IN_FLIGHT + 1) * weights_job.PART_MIB
    assert parts < mib <= 8 * 1024, "memory holds the parts in flight and fits a system node"
    assert int(container(job)["resources"]["limits"]["memory"].removesuffix("Mi")) > mib


def test_deadline_backoff_and_failure_policy(plan, job):
    spec = job["spec"]
    at_pessimistic_rate = plan.model.checkpoint_gb / weights_job.MIN_IMPORT_GBPS
    assert spec["activeDeadlineSeconds"] == weights_job.deadline_seconds(plan)
    assert at_pessimistic_rate < spec["activeDeadlineSeconds"] <= 6 * 3600
    assert 1 <= spec["backoffLimit"] <= 6
    assert pod(job)["restartPolicy"] == "Never"
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {
        "action": "FailJob",
        "onExitCodes": {"containerName": "import", "operator": "In", "values": [weights_import.EXIT_NOT_RETRYABLE]},
    }
    assert rules[1]["action"] == "Ignore", "a drained system node does not use up a retry"
    assert weights_job.render(plan, image=IMAGE, bucket=BUCKET, prefix="p/", deadline_s=600)["spec"]["activeDeadlineSeconds"] == 600


def test_the_command_is_the_import_modules_own_cli(plan, job):
    command = container(job)["command"]
    assert command[:3] == ["python3", "-m", "pdkit.pods.weights_import"]
    assert importlib.util.find_spec(command[2]) is not None
    args = weights_import.build_parser().parse_args(command[3:])
    assert (args.model, args.revision) == ("zai-org/GLM-5.1-FP8", "main")
    assert (args.bucket, args.prefix, args.region) == (BUCKET, plan.weights.prefix, plan.region)
    assert args.prefix == "models/zai-org/GLM-5.1-FP8/main/"
    assert args.hf_token_secret_arn is None
    assert container(job)["image"] == IMAGE


def test_a_gated_model_passes_the_secret_arn_never_the_token(gated_job, job):
    args = weights_import.build_parser().parse_args(container(gated_job)["command"][3:])
    assert args.hf_token_secret_arn == GATED_ARN
    for obj in (job, gated_job):
        env = {e["name"] for e in container(obj)["env"]}
        assert not any("TOKEN" in name for name in env)
        assert "secretKeyRef" not in yaml.safe_dump(obj)


def test_the_image_is_the_serving_image(plan):
    serving = inputs.from_plan(plan, registry="123456789012.dkr.ecr.eu-south-2.amazonaws.com")
    job = weights_job.render(plan, image=serving.image, bucket=serving.weights_bucket, prefix=serving.weights_prefix)
    assert container(job)["image"] == serving.image
    assert "/sglang-efa:" in serving.image
