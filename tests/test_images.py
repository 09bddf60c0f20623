"""Images stack: ECR repositories and the in-region build, named and tagged by the plan."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import boto3
import pytest
from aws_cdk.assertions import Match, Template
from botocore.stub import Stubber

from pdkit.functions import start_build
from pdkit.model.images import _versions_module
from stacks.images_stack import BUILD_HOST_PINS
from tests.conftest import ROOT, synth


def test_plan_tags_come_from_the_versions_file(kit):
    versions = _versions_module()
    doc = versions.load(versions.VERSIONS_FILE)
    for name, image in kit.plan.images.items():
        assert image.tag == versions.image_tag(doc, name)
        assert image.repository == f"glm51-2p2d/{name}"


def test_repositories_are_immutable_scanned_encrypted_and_retained(kit):
    repos = kit.template("images").find_resources("AWS::ECR::Repository")
    assert len(repos) == len(kit.plan.images)
    for repo in repos.values():
        props = repo["Properties"]
        assert props["ImageTagMutability"] == "IMMUTABLE"
        assert props["ImageScanningConfiguration"] == {"ScanOnPush": True}
        assert props["EncryptionConfiguration"]["EncryptionType"] == "KMS"
        assert "LifecyclePolicy" in props
        # Kept on update and delete, not on a failed first create (fixed name: stacks/retention.py).
        assert (repo["DeletionPolicy"], repo["UpdateReplacePolicy"]) == ("RetainExceptOnCreate", "Retain")
        # The rollback of a failed first create can delete a repository the build already pushed to (red-team finding).
        assert props["EmptyOnDelete"] is True


def test_build_runs_in_region_privileged_for_docker_on_amd64(kit):
    """In the seed's region (eu-south-2) on the largest compute type it offers (stacks/build_compute.py)."""
    kit.template("images").has_resource_properties(
        "AWS::CodeBuild::Project",
        {
            "Environment": Match.object_like({"PrivilegedMode": True, "ComputeType": "BUILD_GENERAL1_LARGE", "Type": "LINUX_CONTAINER"}),
            "EncryptionKey": Match.any_value(),
        },
    )


@pytest.mark.parametrize(
    ("region", "expected"),
    [
        ("eu-south-2", "BUILD_GENERAL1_LARGE"),  # Europe (Spain): not in the guide's 2xlarge list
        ("eu-north-1", "BUILD_GENERAL1_2XLARGE"),  # Europe (Stockholm)
        ("us-east-1", "BUILD_GENERAL1_2XLARGE"),
        ("ap-southeast-7", "BUILD_GENERAL1_LARGE"),  # a region the list does not know: the type every region offers
    ],
)
def test_the_compute_type_is_one_the_region_offers(region, expected):
    """BUILD_GENERAL1_2XLARGE "is available only in Regions" the CodeBuild User Guide lists
    (awsdocs/aws-codebuild-user-guide, doc_source/build-env-ref-compute-types.md); a project with a compute type
    its region does not offer fails its create, so elsewhere the build takes LARGE, which has no Region limit."""
    import aws_cdk as cdk
    from aws_cdk import aws_codebuild as codebuild

    from stacks.build_compute import compute_type

    stack = cdk.Stack(cdk.App(), "Build", env=cdk.Environment(region=region))
    codebuild.Project(
        stack,
        "Project",
        build_spec=codebuild.BuildSpec.from_object({"version": "0.2"}),
        environment=codebuild.BuildEnvironment(compute_type=compute_type(region)),
    )
    (project,) = Template.from_stack(stack).find_resources("AWS::CodeBuild::Project").values()
    assert project["Properties"]["Environment"]["ComputeType"] == expected


def _buildspec(kit) -> dict:
    (project,) = kit.template("images").find_resources("AWS::CodeBuild::Project").values()
    return json.loads(project["Properties"]["Source"]["BuildSpec"])


def _build_steps(kit) -> list[str]:
    return _buildspec(kit)["phases"]["build"]["commands"]


def test_build_spec_pushes_each_planned_tag_and_skips_existing(kit):
    commands = " ".join(_build_steps(kit))
    for image in kit.plan.images.values():
        ref = f"$REGISTRY/{image.repository}:{image.tag}"
        assert f"imageTag={image.tag}" in commands, "an existing immutable tag is skipped, not rebuilt"
        assert f"bash containers/build.sh {image.name} {ref} --push" in commands, "build, import-test and push as a local build does"


def _run_step(step: str, tmp_path: Path, *, aws_exit: int, aws_output: str) -> subprocess.CompletedProcess[str]:
    """Run one buildspec build command with /bin/sh (CodeBuild's default shell) against a stand-in `aws` and build script."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    aws = bin_dir / "aws"
    aws.write_text(f"#!/bin/sh\ncat <<'EOF' >&2\n{aws_output}\nEOF\nexit {aws_exit}\n")
    aws.chmod(0o755)
    (tmp_path / "containers").mkdir(exist_ok=True)
    (tmp_path / "containers" / "build.sh").write_text('echo "BUILT $1"\n')
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "REGISTRY": "111122223333.dkr.ecr.eu-south-2.amazonaws.com"}
    return subprocess.run(["/bin/sh", "-c", step], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)


def test_build_step_builds_only_when_ecr_says_the_tag_is_missing(kit, tmp_path):
    """DescribeImages answers ImageNotFoundException for a tag that does not exist; any other error (AccessDeniedException for a
    missing ecr:DescribeImages grant, RepositoryNotFoundException, throttling) must fail the build, not be read as "missing"
    and start a rebuild whose push to the IMMUTABLE repository then fails.
    https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_DescribeImages.html (Errors); the AWS CLI exits 254
    and prints "An error occurred (<Code>) when calling the <Operation> operation: <Message>"
    (https://docs.aws.amazon.com/cli/latest/topic/return-codes.html).
    """
    step = _build_steps(kit)[0]
    found = _run_step(step, tmp_path, aws_exit=0, aws_output="{}")
    assert found.returncode == 0
    assert "BUILT" not in found.stdout
    assert "exists, skipping" in found.stdout
    missing = _run_step(
        step,
        tmp_path,
        aws_exit=254,
        aws_output="An error occurred (ImageNotFoundException) when calling the DescribeImages operation: "
        "The image with imageId {imageDigest:'null', imageTag:'x'} does not exist within the repository",
    )
    assert missing.returncode == 0, missing.stderr
    assert "BUILT" in missing.stdout
    denied = _run_step(
        step,
        tmp_path,
        aws_exit=254,
        aws_output="An error occurred (AccessDeniedException) when calling the DescribeImages operation: "
        "User: arn:aws:sts::111122223333:assumed-role/build is not authorized to perform: ecr:DescribeImages",
    )
    assert denied.returncode != 0
    assert "BUILT" not in denied.stdout
    assert "AccessDeniedException" in denied.stderr, "the reason reaches the build log"


def test_build_spec_pulls_nothing_from_docker_hub_to_build(kit):
    """`docker buildx create` makes a docker-container builder, which pulls moby/buildkit from Docker Hub: anonymous pulls from
    CodeBuild's shared addresses hit Docker Hub's pull limits (https://docs.docker.com/docker-hub/usage/pulls/). Docker's own
    builder (https://docs.docker.com/build/builders/drivers/docker/) needs no image and loads the result for the smoke test.
    """
    spec = _buildspec(kit)
    commands = " ".join(command for phase in spec["phases"].values() for command in phase.get("commands", []))
    assert "buildx create" not in commands
    script = (ROOT / "containers" / "build.sh").read_text()
    assert "buildx create" not in script
    assert "--load" in script


def test_build_spec_exports_the_resolved_base_digests(kit):
    """The digests each build resolved reach the build's record (exported variable) so the next build can be pinned to them."""
    spec = _buildspec(kit)
    assert spec["env"]["exported-variables"] == ["BASE_IMAGE_DIGESTS"]
    assert "--record base-digests.txt" in " ".join(_build_steps(kit))
    assert any("BASE_IMAGE_DIGESTS=" in c and "base-digests.txt" in c for c in spec["phases"]["post_build"]["commands"])


def test_build_uses_the_dockerfile_and_context_of_the_versions_file(kit):
    """CodeBuild builds what a local build builds: build.sh takes the Dockerfile and context from versions.yaml."""
    versions = _versions_module()
    doc = versions.load(versions.VERSIONS_FILE)
    for image in kit.plan.images.values():
        printed = subprocess.run(
            [sys.executable, str(ROOT / "containers" / "build_args.py"), image.name, "--paths"], capture_output=True, text=True, check=True
        ).stdout.split()
        spec = doc["images"][image.name]
        assert printed == [spec["dockerfile"], spec["context"], *([spec["target"]] if spec.get("target") else [])]


def test_each_moe_backend_has_its_own_built_image(kit):
    """uccl-ep and upstream deepep need different deep_ep modules (UCCL-EP's wrapper vs sgl-deep-ep), so the plan names
    two serving images, each with its own repository, tag and CodeBuild step; the seed profile runs UCCL-EP on both roles."""
    tags = {name: image.tag for name, image in kit.plan.images.items()}
    assert {"sglang-efa", "sglang-deepep"} <= set(tags)
    assert tags["sglang-efa"] != tags["sglang-deepep"]
    repos = {r["Properties"]["RepositoryName"] for r in kit.template("images").find_resources("AWS::ECR::Repository").values()}
    assert "glm51-2p2d/sglang-deepep" in repos
    commands = " ".join(_build_steps(kit))
    assert "bash containers/build.sh sglang-deepep " in commands
    assert {role.name: (role.a2a_backend, role.image) for role in kit.plan.roles.values()} == {
        "prefill": ("uccl-ep", "sglang-efa"),
        "decode": ("uccl-ep", "sglang-efa"),
    }


def _staged_source(kit) -> Path:
    """The images stack's Source asset as CDK staged it (what the S3 zip, and so CodeBuild, gets)."""
    assembly = Path(kit.assembly.directory)
    manifest = json.loads((assembly / f"{kit.stacks['images'].artifact_id}.assets.json").read_text())
    (staged,) = [
        assembly / entry["source"]["path"]
        for entry in manifest["files"].values()
        if entry["source"].get("packaging") == "zip" and (assembly / entry["source"]["path"] / "containers").is_dir()
    ]
    return staged


def test_source_asset_holds_every_build_context_file_and_nothing_else(kit):
    """containers/ plus exactly the pdkit modules the serving image copies; no dotfiles, caches, venvs or the rest of pdkit."""
    versions = _versions_module()
    doc = versions.load(versions.VERSIONS_FILE)
    staged = _staged_source(kit)
    files = {p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()}
    needed = {p.relative_to(versions.REPO_ROOT).as_posix() for image in doc["images"] for p in versions.context_files(doc, image)}
    needed |= {versions.dockerfile_path(doc, image).relative_to(versions.REPO_ROOT).as_posix() for image in doc["images"]}
    needed |= {versions.dockerignore_path(doc, image).relative_to(versions.REPO_ROOT).as_posix() for image in doc["images"]}
    needed |= {"containers/build_args.py", "containers/versions.py", "containers/versions.yaml"}
    assert needed <= files, sorted(needed - files)
    outside = {name for name in files if not name.startswith("containers/")}
    assert outside == {name for name in needed if name.startswith("pdkit/")}, sorted(outside)
    assert {"pdkit/pods/staging.py", "pdkit/pods/weights_manifest.py"} <= outside
    assert not [name for name in files if "__pycache__" in name or any(part.startswith(".") for part in name.split("/"))]


def test_build_starts_on_deploy_when_the_source_changes(kit):
    kit.template("images").has_resource_properties(
        "Custom::ImageBuild", {"SourceHash": Match.any_value(), "ProjectName": Match.any_value()}
    )


def test_external_images_build_nothing(raw_with):
    kit = synth(raw_with("images.source", "external", "images.registry", "registry.example.com/team"))
    t = kit.template("images")
    assert not t.find_resources("AWS::ECR::Repository")
    assert not t.find_resources("AWS::CodeBuild::Project")
    assert kit.plan.images["sglang-efa"].uri("ignored").startswith("registry.example.com/team/sglang-efa:sglang-efa-")


def _event(request="Create"):
    return {
        "RequestType": request,
        "ResourceProperties": {"ProjectName": "p"},
        "StackId": "s",
        "RequestId": "r",
        "LogicalResourceId": "B",
        "ResponseURL": "https://x.invalid/",
    }


def _codebuild():
    return boto3.client("codebuild", region_name="eu-south-2", aws_access_key_id="t", aws_secret_access_key="t")  # noqa: S106


def test_start_build_reports_the_build_id():
    answers = []
    client = _codebuild()
    with Stubber(client) as stub:
        stub.add_response("start_build", {"build": {"id": "p:123"}}, {"projectName": "p"})
        start_build.handler(_event(), None, codebuild=client, respond=lambda e, **kw: answers.append(kw))
    assert answers == [{"success": True, "reason": answers[0]["reason"], "physical_id": "p:123"}]
    assert "batch-get-builds --ids p:123" in answers[0]["reason"]


def test_start_build_failure_fails_the_deploy_with_the_reason():
    answers = []
    client = _codebuild()
    with Stubber(client) as stub:
        stub.add_client_error("start_build", service_error_code="AccountLimitExceededException", expected_params={"projectName": "p"})
        start_build.handler(_event(), None, codebuild=client, respond=lambda e, **kw: answers.append(kw))
    assert answers[0]["success"] is False
    assert "AccountLimitExceededException" in answers[0]["reason"]


def test_delete_does_not_touch_codebuild():
    answers = []
    start_build.handler(_event("Delete"), None, codebuild=object(), respond=lambda e, **kw: answers.append(kw))
    assert answers[0]["success"] is True


def test_the_build_host_installs_what_versions_py_imports_at_the_kits_pins():
    """containers/build_args.py runs on the CodeBuild host through containers/versions.py: the buildspec installs
    every distribution versions.py imports (PyYAML, pydantic, docker, dockerfile-parse) at the versions
    requirements.txt locks, so the build validates versions.yaml and tags images exactly as the kit does."""
    tree = ast.parse((ROOT / "containers" / "versions.py").read_text())
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    third_party = {name.split(".")[0] for name in modules} - set(sys.stdlib_module_names) - {"__future__"}
    imported = {dist.lower().replace("_", "-") for module in third_party for dist in packages_distributions()[module]}
    assert {pin.split("==")[0] for pin in BUILD_HOST_PINS} == imported == {"pyyaml", "pydantic", "docker", "dockerfile-parse"}
    locked = {line.split(" ")[0] for line in (ROOT / "requirements.txt").read_text().splitlines() if "==" in line}
    assert set(BUILD_HOST_PINS) <= locked, f"{BUILD_HOST_PINS} must match requirements.txt"
