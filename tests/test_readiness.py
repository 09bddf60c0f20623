"""Preflight rows for what stops serving on a right block (pdkit/ops/readiness.py), against botocore's models.

Before, preflight said "Preflight passed" with no cluster admin and no image in ECR: the first sign was kubectl's
"Unauthorized" or an ImagePullBackOff on the paid block.
"""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import boto3
import pytest
from botocore.stub import Stubber

from pdkit.ops import readiness
from tests.conftest import plan_of
from tests.fixtures.cmd_support import kubectl_reporting

ARN = "arn:aws:iam::123456789012:role/Admin"


def client(service: str) -> tuple[object, Stubber]:
    c = boto3.client(service, region_name="eu-south-2", aws_access_key_id="test", aws_secret_access_key="test")  # noqa: S106 - a Stubber client, never sent
    return c, Stubber(c)


def test_no_cluster_admin_fails_and_says_how_to_add_one():
    plan = plan_of()
    assert plan.cluster_access.admin_principal_arns == ()
    name, status, detail, fix = readiness.cluster_admins(plan)
    assert (name, status) == ("Cluster admins", "FAIL")
    assert "no kubectl reaches the cluster" in detail
    assert "--admin-arn" in fix
    admitted = replace(plan, cluster_access=replace(plan.cluster_access, admin_principal_arns=(ARN,)))
    assert readiness.cluster_admins(admitted)[1] == "PASS"


def test_an_account_and_region_cdk_never_bootstrapped_fails_with_make_bootstrap():
    """The bootstrap stack writes /cdk-bootstrap/hnb659fds/version (CDK guide, bootstrapping-env); GetParameter answers
    ParameterNotFound for a missing parameter (botocore ssm model, GetParameter errors)."""
    ssm, stub = client("ssm")
    stub.add_client_error("get_parameter", "ParameterNotFound", expected_params={"Name": "/cdk-bootstrap/hnb659fds/version"})
    stub.add_response(
        "get_parameter",
        {"Parameter": {"Name": "/cdk-bootstrap/hnb659fds/version", "Type": "String", "Value": "30", "Version": 1}},
        {"Name": "/cdk-bootstrap/hnb659fds/version"},
    )
    with stub:
        missing = readiness.cdk_bootstrap(ssm, "eu-south-2")
        present = readiness.cdk_bootstrap(ssm, "eu-south-2")
    assert missing[1] == "FAIL"
    assert "make bootstrap" in missing[3]
    assert present == ("CDK bootstrap", "PASS", "bootstrapped (template version 30)", "")


def test_the_kit_keeps_cdks_default_bootstrap_qualifier():
    """The parameter name holds the qualifier: a cdk.json that set another one would move it."""
    from pdkit.model.profile_files import CDK_JSON

    assert "@aws-cdk/core:bootstrapQualifier" not in json.loads(CDK_JSON.read_text())["context"]


def _images_stub(plan, answers: dict[str, str | None]):
    ecr, stub = client("ecr")
    for image in plan.images.values():
        params = {"repositoryName": image.repository, "imageIds": [{"imageTag": image.tag}]}
        code = answers.get(image.name)
        if code:
            stub.add_client_error("describe_images", code, expected_params=params)
        else:
            stub.add_response("describe_images", {"imageDetails": [{"imageTags": [image.tag]}]}, params)
    return ecr, stub


@pytest.mark.parametrize(
    ("answer", "status", "words"),
    [
        ("RepositoryNotFoundException", "WARN", "make deploy builds them"),
        ("ImageNotFoundException", "FAIL", "ImagePullBackOff"),
        (None, "PASS", "images the serving pods pull are in ECR eu-south-2"),
    ],
)
def test_serving_images_in_ecr(answer, status, words):
    """DescribeImages answers RepositoryNotFoundException before the images stack exists and ImageNotFoundException for
    a repository without the plan's tag (ECR API reference, DescribeImages errors)."""
    plan = plan_of()
    first = next(iter(plan.images))
    ecr, stub = _images_stub(plan, {first: answer} if answer else {})
    with stub:
        _name, got, detail, fix = readiness.serving_images(plan, ecr)
    assert got == status
    assert words in detail + fix


@pytest.mark.parametrize(
    ("minor", "status"), [("36", "PASS"), ("35", "PASS"), ("37", "PASS"), ("34", "FAIL"), ("26", "FAIL"), ("36+", "PASS")]
)
def test_kubectl_within_one_minor_version_of_the_cluster(minor, status):
    """Kubernetes' version skew policy: kubectl within one minor version of kube-apiserver. GKE/EKS builds report a
    minor such as "36+", which counts as 36."""
    plan = plan_of()
    assert plan.kubernetes_version == "1.36"
    row = readiness.kubectl(plan, run=kubectl_reporting("1", minor), which=lambda _n: "/usr/local/bin/kubectl")
    assert row[1] == status


def test_no_kubectl_on_path_is_a_warning_with_where_to_get_it():
    row = readiness.kubectl(plan_of(), which=lambda _n: None)
    assert row[:2] == ("kubectl", "WARN")
    assert "kubectl 1.36" in row[3]


def test_a_kubectl_that_does_not_report_its_version_is_a_warning():
    """A wrapper or a broken install printing something else: WARN with where to get kubectl, never a traceback."""

    def garbage(*_a: object, **_k: object) -> SimpleNamespace:
        return SimpleNamespace(stdout="kubectl: command not supported", returncode=1)

    row = readiness.kubectl(plan_of(), run=garbage, which=lambda _n: "/usr/local/bin/kubectl")
    assert row[:2] == ("kubectl", "WARN")
    assert "did not report its version" in row[2]
