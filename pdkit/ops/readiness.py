"""Preflight rows for what stops serving even when the block is right: nobody admitted to the cluster, an account
and region CDK has not bootstrapped, images the plan names missing from ECR, a kubectl too far from the cluster.

Each check returns its rows; pdkit.ops.preflight adds them to its table. AWS answers are read with the clients the
preflight already holds (tests: botocore Stubber).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import TYPE_CHECKING, Any, Literal

from pdkit.ops.aws_errors import error_code

if TYPE_CHECKING:
    from pdkit.model.plan import Plan

Status = Literal["PASS", "WARN", "FAIL"]
Row = tuple[str, Status, str, str]

# The modern bootstrap template writes its version here; `cdk deploy` reads it to know the account and region are
# bootstrapped (https://docs.aws.amazon.com/cdk/v2/guide/bootstrapping-env.html; the parameter's name is
# /cdk-bootstrap/<qualifier>/version, and hnb659fds is the default qualifier the kit's cdk.json keeps).
BOOTSTRAP_QUALIFIER = "hnb659fds"
BOOTSTRAP_PARAMETER = f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version"
# "kubectl is supported within one minor version (older or newer) of kube-apiserver"
# (https://kubernetes.io/releases/version-skew-policy/#kubectl).
KUBECTL_SKEW = 1
# Looked up at call time, so a test can stand in for the operator's machine without patching the subprocess module.
WHICH = shutil.which
RUN = subprocess.run


def cluster_admins(plan: Plan) -> Row:
    """The kit turns the cluster creator's admin off (BootstrapClusterCreatorAdminPermissions false): without an
    admin principal nobody's kubectl reaches the cluster, and nothing can be served or repaired."""
    admins = plan.cluster_access.admin_principal_arns
    if admins:
        return ("Cluster admins", "PASS", f"{len(admins)} principal(s) get cluster admin: {', '.join(admins)}", "")
    return (
        "Cluster admins",
        "FAIL",
        "cluster.admin_principal_arns is empty: the cluster creator gets no admin, so no kubectl reaches the cluster",
        "add your role's ARN to cluster.admin_principal_arns (`pdkit init NAME --from PROFILE --admin-arn ARN` writes it)",
    )


def cdk_bootstrap(ssm: Any, region: str) -> Row:
    try:
        version = ssm.get_parameter(Name=BOOTSTRAP_PARAMETER)["Parameter"]["Value"]
    except Exception as err:
        if error_code(err) != "ParameterNotFound":
            raise
        return (
            "CDK bootstrap",
            "FAIL",
            f"{region} of this account is not bootstrapped for the CDK (no {BOOTSTRAP_PARAMETER})",
            "make bootstrap  (once per account and region), then run pdkit preflight again",
        )
    return ("CDK bootstrap", "PASS", f"bootstrapped (template version {version})", "")


def serving_images(plan: Plan, ecr: Any) -> Row:
    """The images the serving pods pull. Before the images stack exists its repositories do not either, and `make
    deploy` builds them: a warning. A repository without the plan's tag means the in-region build has not finished
    or failed: serving would sit in ImagePullBackOff on the paid block. DescribeImages answers
    RepositoryNotFoundException and ImageNotFoundException (https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_DescribeImages.html)."""
    no_repo: list[str] = []
    no_tag: list[str] = []
    built = [image for image in plan.images.values() if image.build]
    for image in built:
        try:
            ecr.describe_images(repositoryName=image.repository, imageIds=[{"imageTag": image.tag}])
        except Exception as err:
            code = error_code(err)
            if code == "RepositoryNotFoundException":
                no_repo.append(image.repository)
            elif code == "ImageNotFoundException":
                no_tag.append(f"{image.repository}:{image.tag}")
            else:
                raise
    if not built:
        return ("Serving images", "PASS", "images.source external: the kit builds none", "")
    if no_tag:
        return (
            "Serving images",
            "FAIL",
            f"not in ECR {plan.image_region}: {', '.join(no_tag)}",
            "look at the images stack's CodeBuild build (`aws codebuild list-projects`, then `aws codebuild list-builds-for-project "
            "--project-name NAME`): `make deploy` builds the tag, and a failed build leaves serving in ImagePullBackOff",
        )
    if no_repo:
        return ("Serving images", "WARN", f"not built yet ({len(no_repo)} repositories do not exist)", "make deploy builds them in-region")
    return ("Serving images", "PASS", f"all {len(built)} images the serving pods pull are in ECR {plan.image_region}", "")


def kubectl(plan: Plan, *, run: Any = None, which: Any = None) -> Row:
    """The runbooks' kubectl lines need a kubectl within one minor version of the cluster's Kubernetes."""
    run, which = run or RUN, which or WHICH
    path = which("kubectl")
    want = plan.kubernetes_version
    if path is None:
        return (
            "kubectl",
            "WARN",
            "not on PATH; runbooks 01-02 and `pdkit status` use it",
            f"install kubectl {want} (https://kubernetes.io/docs/tasks/tools/)",
        )
    try:
        done = run([path, "version", "--client", "--output=json"], capture_output=True, text=True, timeout=20, check=False)
        client = json.loads(done.stdout)["clientVersion"]
        major, minor = int(client["major"]), int(str(client["minor"]).rstrip("+"))
    except (OSError, ValueError, KeyError, TypeError, subprocess.TimeoutExpired):
        return (
            "kubectl",
            "WARN",
            f"{path} did not report its version",
            f"install kubectl {want} (https://kubernetes.io/docs/tasks/tools/)",
        )
    wanted_major, wanted_minor = (int(x) for x in want.split(".")[:2])
    have = f"{major}.{minor}"
    if major != wanted_major or abs(minor - wanted_minor) > KUBECTL_SKEW:
        return (
            "kubectl",
            "FAIL",
            f"{path} is {have}; Kubernetes supports kubectl within one minor version of the cluster's {want}",
            f"install kubectl {want} (https://kubernetes.io/docs/tasks/tools/)",
        )
    return ("kubectl", "PASS", f"{have} at {path} (cluster {want})", "")
