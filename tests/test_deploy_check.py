"""`pdkit deploy-check` (run by `make deploy` before `cdk deploy`): no rolling node update inside a Capacity Block.

EKS: "When upgrading managed node groups with Capacity Blocks, make sure that the desired size of the node group
is set to 0" (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html). A managed node group
update launches new nodes before it terminates old ones, one unavailable at a time by default
(https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html). The AWS calls go through
botocore's Stubber, which checks them against the cloudformation, eks and ssm service models.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from pdkit.cli.main import main
from pdkit.ops import deploy_check
from tests.conftest import Kit, synth
from tests.fixtures.addon_versions import stub_gate
from tests.fixtures.cmd_support import profile, stub_nodegroups

pytest_plugins = ["tests.fixtures.cmd_fixtures"]


@pytest.fixture(autouse=True)
def addons_listed(request: pytest.FixtureRequest) -> None:
    """deploy-check first gates the add-on pins (tests/test_addon_versions.py): EKS lists each of them here."""
    if "aws" in request.fixturenames:
        stub_gate(request.getfixturevalue("aws"))


STACK = "glm51-2p2d-capacity"
GROUPS = ("glm51-2p2d-decode", "glm51-2p2d-prefill")
IMAGE_PARAMETER = "/pdkit/glm51-2p2d/ami/gpu"


def cdk_out(kit: Kit) -> str:
    return str(Path(kit.assembly.directory))


def capacity_template(kit: Kit) -> dict[str, Any]:
    return kit.template_json("capacity")


def with_new_launch_template_data(template: dict[str, Any]) -> dict[str, Any]:
    """The deployed template as it was before a launch-template change (another root volume size)."""
    older = copy.deepcopy(template)
    for resource in older["Resources"].values():
        if resource["Type"] == "AWS::EC2::LaunchTemplate":
            resource["Properties"]["LaunchTemplateData"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] = 100
    return older


def stub_template(aws, template: dict[str, Any], stack: str = STACK) -> None:
    """GetTemplate of the deployed capacity stack (the Original stage: what CloudFormation last deployed)."""
    aws("cloudformation").add_response(
        "get_template", {"TemplateBody": json.dumps(template)}, {"StackName": stack, "TemplateStage": "Original"}
    )


def stub_sizes(aws, desired: int) -> None:
    stub_nodegroups(aws, desired, GROUPS)


def run(aws, kit: Kit, *extra: str) -> int:
    aws("eks")
    aws("ssm")
    return main(["deploy-check", "--cdk-out", cdk_out(kit), *extra])


def test_launch_template_change_with_running_nodes_is_refused_with_the_fix(aws, kit, capsys):
    """A changed LaunchTemplateData is a new version, and the node groups follow LatestVersionNumber: an EKS version update."""
    stub_template(aws, with_new_launch_template_data(capacity_template(kit)))
    stub_sizes(aws, 2)
    assert run(aws, kit) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "BlockDeviceMappings" in err
    assert "glm51-2p2d-prefill at desired 2" in err
    assert "Fix: pdkit nodes down && make deploy && pdkit nodes up" in err


def test_the_fix_carries_the_profile_flags(aws, kit, capsys, tmp_path):
    path = profile(tmp_path)
    stub_template(aws, with_new_launch_template_data(capacity_template(kit)))
    stub_sizes(aws, 1)
    assert run(aws, kit, "--profile", path) == 2
    err = capsys.readouterr().err
    assert f"Fix: pdkit nodes down --profile {path} && make deploy PROFILE={path} && pdkit nodes up --profile {path}" in err


def test_launch_template_change_passes_with_the_node_groups_at_zero(aws, kit, capsys):
    """Desired 0 is exactly what EKS asks for during a Capacity Block node group update."""
    stub_template(aws, with_new_launch_template_data(capacity_template(kit)))
    stub_sizes(aws, 0)
    assert run(aws, kit) == 0
    assert "at 0" in capsys.readouterr().out


def test_unchanged_template_passes_without_reading_the_node_groups(aws, kit, capsys):
    stub_template(aws, capacity_template(kit))
    assert run(aws, kit) == 0
    assert "nothing rolls" in capsys.readouterr().out


def test_a_stack_not_deployed_yet_passes(aws, kit, capsys):
    """CloudFormation answers GetTemplate for an unknown stack with ValidationError 'Stack with id ... does not exist'."""
    aws("cloudformation").add_client_error(
        "get_template", service_error_code="ValidationError", service_message=f"Stack with id {STACK} does not exist", http_status_code=400
    )
    assert run(aws, kit) == 0
    assert "not deployed yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("changed", "service", "operation", "code", "action"),
    [
        (False, "cloudformation", "get_template", "AccessDenied", "cloudformation:GetTemplate"),
        (True, "eks", "describe_nodegroup", "AccessDeniedException", "eks:DescribeNodegroup"),
    ],
)
def test_a_denied_call_is_one_line_naming_the_action(aws, kit, capsys, changed, service, operation, code, action):
    if changed:  # a launch-template change makes the check read the node groups' sizes
        stub_template(aws, with_new_launch_template_data(capacity_template(kit)))
    aws(service).add_client_error(operation, service_error_code=code, service_message="no", http_status_code=403)
    assert run(aws, kit) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert action in err


def test_missing_cloud_assembly_says_synth_first(aws, tmp_path, capsys):
    aws("cloudformation")
    aws("eks")
    aws("ssm")
    assert main(["deploy-check", "--cdk-out", str(tmp_path / "nowhere")]) == 2
    assert "make synth" in capsys.readouterr().err


def test_switching_ami_source_replaces_the_node_groups(kit, custom_kit):
    """Switching ami.source renames the node groups and swaps the shared template for per-role ones (a replacement)."""
    changes = deploy_check.template_changes(capacity_template(kit), capacity_template(custom_kit))
    assert any(re.match(r"node group glm51-2p2d-prefill is replaced by .*glm51-2p2d-prefill-custom", c) for c in changes), changes
    assert any(c.startswith("node group glm51-2p2d-decode is replaced") for c in changes), changes


def test_labels_and_taints_alone_do_not_roll_nodes(kit):
    """Labels and taints go through UpdateNodegroupConfig, which keeps the instances (AWS::EKS::Nodegroup: No interruption)."""
    deployed = copy.deepcopy(capacity_template(kit))
    for resource in deployed["Resources"].values():
        if resource["Type"] == "AWS::EKS::Nodegroup":
            resource["Properties"]["Labels"] = {"old": "label"}
    assert deploy_check.template_changes(deployed, capacity_template(kit)) == []


def test_a_promoted_image_is_a_new_launch_template_version(aws, custom_kit, capsys, tmp_path):
    """The promoted AMI reaches the template through an SSM-typed parameter, which CloudFormation resolves again at
    every update: the template text stays the same while the launch template gets a new version."""
    template = capacity_template(custom_kit)
    (key,) = deploy_check.ssm_parameters_in_launch_templates(template)
    stub_template(aws, template)
    aws("cloudformation").add_response(
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackName": STACK,
                    "CreationTime": "2026-11-30T00:00:00Z",
                    "StackStatus": "UPDATE_COMPLETE",
                    "Parameters": [{"ParameterKey": key, "ParameterValue": IMAGE_PARAMETER, "ResolvedValue": "ami-0aaaaaaaaaaaaaaaa"}],
                }
            ]
        },
        {"StackName": STACK},
    )
    aws("ssm").add_response(
        "get_parameter", {"Parameter": {"Name": IMAGE_PARAMETER, "Value": "ami-0bbbbbbbbbbbbbbbb"}}, {"Name": IMAGE_PARAMETER}
    )
    stub_nodegroups(aws, 2, tuple(f"{group}-custom" for group in GROUPS))
    assert main(["deploy-check", "--cdk-out", cdk_out(custom_kit), "--profile", profile(tmp_path, ami__source="custom")]) == 2
    err = capsys.readouterr().err
    assert "moved from ami-0aaaaaaaaaaaaaaaa to ami-0bbbbbbbbbbbbbbbb" in err
    assert "pdkit nodes down" in err


def test_make_deploy_checks_the_assembly_it_deploys():
    """The documented path is `make deploy`: it must synthesize, run the check on that cloud assembly, and deploy
    exactly that assembly (`cdk deploy --app cdk.out`: the CDK CLI's --app also takes a synthesized assembly
    directory), so no change reaches CloudFormation without passing the check. YES=1 reaches the check (the step
    that confirms a capacity.purchase fee, tests/test_capacity_purchase_deploy.py), so CI can run it unprompted."""
    makefile = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    recipe = re.search(r"^deploy:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe, "no deploy target"
    lines = [line.strip() for line in recipe[1].splitlines()]
    check = next(i for i, line in enumerate(lines) if line.startswith("pdkit deploy-check") and "--cdk-out cdk.out" in line)
    synth_at = next(i for i, line in enumerate(lines) if " synth" in line)
    deploy_at = next(i for i, line in enumerate(lines) if " deploy " in line and "deploy-check" not in line)
    assert synth_at < check < deploy_at
    assert "$(if $(YES),--yes)" in lines[check]
    assert "--app cdk.out" in lines[deploy_at]


@pytest.fixture(scope="module")
def rehearsal_kit() -> Kit:
    return synth("rehearsal-glm51-fp8-2p2d")


def test_on_demand_rehearsal_rolls_without_refusal_or_size_lookup(aws, rehearsal_kit, capsys):
    """The no-rolling-update rule exists because a block has no spare instance; an on-demand node group's update
    launches its replacements on demand first (https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html),
    so a launch-template change passes and no node group size is read (no eks response is stubbed)."""
    stub_template(aws, with_new_launch_template_data(capacity_template(rehearsal_kit)), "rehearsal-glm51-2p2d-capacity")
    assert run(aws, rehearsal_kit, "--profile", "rehearsal-glm51-fp8-2p2d") == 0
    out = capsys.readouterr().out
    assert "BlockDeviceMappings" in out
    assert "On-demand node groups roll" in out
