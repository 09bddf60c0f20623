"""`pdkit preflight` on a rehearsal: no reservation to check, and the on-demand P-instance vCPU quota is a hard limit.

On-demand P instances count against Service Quotas L-417A185B "Running On-Demand P instances" (vCPUs) and EC2
refuses launches beyond it with VcpuLimitExceeded (https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html),
so a shortfall FAILs here where the block profile only WARNs. The calls are checked against the botocore models by Stubber.
"""

from __future__ import annotations

import json

from pdkit.cli import main
from tests.test_cmd_preflight import PINS, addon_versions, stub_lambda, stub_node_image

pytest_plugins = ["tests.fixtures.cmd_fixtures"]
from tests.test_cmd_preflight import pins  # noqa: E402,F401  (the add-on pins fixture)

PROFILE = "rehearsal-glm51-fp8-2p2d"
NAME = "rehearsal-glm51-2p2d"


def stub(aws, quota: float) -> None:
    stub_lambda(aws)
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


def test_rehearsal_fails_on_a_short_on_demand_p_quota(aws, pins, capsys):  # noqa: F811
    stub(aws, quota=32.0)
    assert main(["preflight", "--profile", PROFILE, "--output", "json"]) == 1
    rows = checks(capsys)
    assert rows["Reservation"]["status"] == "PASS"
    assert "on-demand rehearsal of glm51-fp8-2p2d" in rows["Reservation"]["detail"]
    quota = rows["GPU vCPU quota"]
    assert quota["status"] == "FAIL"
    assert "4 x p5.4xlarge need 64" in quota["detail"]
    assert "--quota-code L-417A185B --desired-value 64" in quota["fix"]


def test_rehearsal_passes_with_room_in_the_quota(aws, pins, capsys):  # noqa: F811
    stub(aws, quota=64.0)
    main(["preflight", "--profile", PROFILE, "--output", "json"])
    rows = checks(capsys)
    assert rows["GPU vCPU quota"]["status"] == "PASS"
    assert "Reservation topology" not in rows
    assert "Interconnect" not in rows
