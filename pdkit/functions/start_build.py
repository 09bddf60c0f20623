"""Custom resource: start the in-region CodeBuild of the images when their source changes.

It does not wait: a 20+ GB CUDA image takes longer than a CloudFormation custom resource may.
The build skips images whose tag already exists (immutable tags), so a re-run is cheap. A duplicate
invocation (Lambda may deliver an asynchronous event twice) starts a second build of the same tags:
whichever pushes second meets the immutable tag and fails, the images are the first build's.
"""

from __future__ import annotations

from typing import Any

from pdkit.functions import cfn_response


def handler(event: dict[str, Any], context: Any, *, codebuild: Any = None, respond: Any = cfn_response.send) -> None:
    """Answers every request, once: Delete always succeeds, odd properties or an unknown request type fail with the
    reason (a handler that raises before answering leaves the stack waiting for the resource's ServiceTimeout)."""
    physical = event.get("PhysicalResourceId") or "not-started"
    kind = event.get("RequestType")
    if kind == "Delete":
        respond(event, success=True, reason="builds are not undone; images stay in ECR", physical_id=physical)
        return
    props = event.get("ResourceProperties")
    project = props.get("ProjectName") if isinstance(props, dict) else None
    if kind not in ("Create", "Update") or not isinstance(project, str) or not project:
        problem = f"unknown RequestType {kind!r}" if kind not in ("Create", "Update") else "ResourceProperties lack ProjectName"
        respond(
            event,
            success=False,
            reason=f"image build not started: {problem}. Fix: the images stack writes the request (stacks/images_stack.py): "
            "deploy it again with `make deploy`",
            physical_id=physical,
        )
        return
    try:
        if codebuild is None:
            import boto3

            codebuild = boto3.client("codebuild")
        build = codebuild.start_build(projectName=project)["build"]
    except Exception as exc:  # answer CloudFormation in every case, or the stack waits an hour
        respond(event, success=False, reason=f"could not start CodeBuild project {project}: {exc}", physical_id=physical)
        return
    respond(
        event,
        success=True,
        reason=f"started build {build['id']}; follow it with `aws codebuild batch-get-builds --ids {build['id']}`",
        physical_id=build["id"],
    )
