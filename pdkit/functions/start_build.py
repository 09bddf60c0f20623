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
    physical = event.get("PhysicalResourceId", "not-started")
    if event["RequestType"] == "Delete":
        respond(event, success=True, reason="builds are not undone; images stay in ECR", physical_id=physical)
        return
    project = event["ResourceProperties"]["ProjectName"]
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
