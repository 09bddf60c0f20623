"""`pdkit preflight` on a rehearsal: no reservation to check, and the on-demand P-instance vCPU quota is a hard limit.

On-demand P instances count against Service Quotas L-417A185B "Running On-Demand P instances" (vCPUs) and EC2
refuses launches beyond it with VcpuLimitExceeded (https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html),
so a shortfall FAILs here where the block profile only WARNs. The calls are checked against the botocore models by Stubber.
"""

from __future__ import annotations

import json

from pdkit.cli.context import load_plan
from pdkit.cli.main import main
from tests.test_cmd_preflight import PINS, addon_versions, stub_bootstrap, stub_lambda, stub_node_image

pytest_plugins = ["tests.fixtures.cmd_fixtures"]  # aws, and pins: the add-on pins fixture

PROFILE = "rehearsal-glm51-fp8-2p2d"
NAME = "rehearsal-glm51-2p2d"


def stub_block_images(aws, *, missing: str | None = None) -> None:
    """DescribeImages for every image the rehearsal runs; `missing` answers ImageNotFoundException, as ECR does for a tag
    it does not hold (https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_DescribeImages.html)."""
    for image in load_plan(PROFILE).images.values():
        params = {"repositoryName": image.repository, "imageIds": [{"imageTag": image.tag}]}
        if image.name == missing:
            aws("ecr").add_client_error("describe_images", "ImageNotFoundException", "not found", 400, expected_params=params)
        else:
            detail = {"repositoryName": image.repository, "imageTags": [image.tag], "imageDigest": "sha256:" + "0" * 64}
            aws("ecr").add_response("describe_images", {"imageDetails": [detail]}, params)


def stub(aws, quota: float, *, missing: str | None = None) -> None:
    stub_block_images(aws, missing=missing)
    stub_lambda(aws)
    stub_bootstrap(aws)
    stub_node_image(aws)
    aws("sts").add_response(
        "get_caller_identity", {"Account": "123456789012", "Arn": "arn:aws:iam::123456789012:role/ops", "UserId": "AID"}, {}
    )
    aws("ec2")  # no reservation calls: an on-demand rehearsal has none
    aws("service-quotas").add_response(
        "get_service_quota", {"Quota": {"QuotaCode": "L-417A185B", "Value": quota}}, {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"}
    )
    eks = aws("eks")
    for name in sorted(PINS):
        eks.add_response("describe_addon_versions", addon_versions(name, PINS[name]), {"addonName": name, "kubernetesVersion": "1.36"})
    eks.add_client_error("describe_cluster", "ResourceNotFoundException", "No cluster found", 404, expected_params={"name": NAME})


def checks(capsys) -> dict[str, dict[str, str]]:
    return {r["name"]: r for r in json.loads(capsys.readouterr().out)["checks"]}


def test_rehearsal_fails_on_a_short_on_demand_p_quota(aws, pins, capsys):
    stub(aws, quota=32.0)
    assert main(["preflight", "--profile", PROFILE, "--output", "json"]) == 1
    rows = checks(capsys)
    assert rows["Reservation"]["status"] == "PASS"
    assert "on-demand rehearsal of glm51-fp8-2p2d" in rows["Reservation"]["detail"]
    quota = rows["GPU vCPU quota"]
    assert quota["status"] == "FAIL"
    assert "4 x p5.4xlarge need 64" in quota["detail"]
    assert "--quota-code L-417A185B --desired-value 64" in quota["fix"]


def test_rehearsal_passes_with_room_in_the_quota(aws, pins, capsys):
    stub(aws, quota=64.0)
    main(["preflight", "--profile", PROFILE, "--output", "json"])
    rows = checks(capsys)
    assert rows["GPU vCPU quota"]["status"] == "PASS"
    assert rows["Block images"]["status"] == "PASS"
    assert "Reservation topology" not in rows
    assert "Interconnect" not in rows


def test_rehearsal_fails_without_the_blocks_images_in_the_blocks_region(aws, pins, capsys):
    """The rehearsal builds no image and pulls the block's from the block's registry, so preflight asks the block
    region's ECR (eu-south-2, not the rehearsal's eu-north-1) for every tag, and a missing one FAILs with the fix."""
    stub(aws, quota=64.0, missing="router")
    assert main(["preflight", "--profile", PROFILE, "--output", "json"]) == 1
    row = checks(capsys)["Block images"]
    assert row["status"] == "FAIL"
    assert "glm51-2p2d/router:router-" in row["detail"]
    assert "make images PROFILE=glm51-fp8-2p2d" in row["fix"]
    assert ("ecr", None, "eu-south-2") in aws.requested
