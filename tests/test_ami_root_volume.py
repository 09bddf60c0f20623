"""The GPU root volume and the pre-pulled serving image: the custom AMI pays only if its snapshot is restored fast.

A volume created from a snapshot fetches its blocks from S3 on first read unless a volume initialization rate is
provisioned (https://docs.aws.amazon.com/ebs/latest/userguide/initalize-volume.html). The field names and their
ranges are read from botocore's EC2 model (LaunchTemplateEbsBlockDeviceRequest), the API the launch template uses.
"""

from __future__ import annotations

import re
from typing import Any

import aws_cdk as cdk
import botocore.session
import yaml
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.model.plan import Plan
from pdkit.render import plan_report
from stacks.gpu_launch_template import gpu_root_volume
from tests.conftest import new_app


def plan_for(source: str) -> Plan:
    raw = yaml.safe_load(profile_files.resolve(None).read_text())
    raw.setdefault("ami", {})["source"] = source
    return plan_mod.build(profile_files.parse(raw), profile_path="<test>")


def ebs_of(plan: Plan) -> dict[str, Any]:
    stack = cdk.Stack(new_app(), "Probe")
    ec2.CfnLaunchTemplate(
        stack,
        "Template",
        launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(block_device_mappings=[gpu_root_volume(plan)]),
    )
    (lt,) = Template.from_stack(stack).find_resources("AWS::EC2::LaunchTemplate").values()
    ebs: dict[str, Any] = lt["Properties"]["LaunchTemplateData"]["BlockDeviceMappings"][0]["Ebs"]
    return ebs


def model_range(member: str) -> tuple[int, int]:
    """The valid range EC2 documents for a LaunchTemplateEbsBlockDeviceRequest member, from botocore's model."""
    shape = botocore.session.get_session().get_service_model("ec2").shape_for("LaunchTemplateEbsBlockDeviceRequest")
    text = shape.members[member].documentation.replace(",", "")
    found = re.search(r"Valid [Rr]ange: (?:Minimum value of )?(\d+)(?: - |\. Maximum value of )(\d+)", text)
    assert found, text
    return int(found[1]), int(found[2])


def test_custom_image_root_is_initialized_at_a_provisioned_rate_ec2_accepts():
    """VolumeInitializationRate: 'Valid range: 100 - 300 MiB/s' (EC2 API reference); without it the pre-pulled image
    arrives block by block on first read."""
    ebs = ebs_of(plan_for("custom"))
    low, high = model_range("VolumeInitializationRate")
    assert low <= ebs["VolumeInitializationRate"] <= high


def test_custom_image_root_throughput_keeps_up_with_the_initialization_rate():
    """gp3 Throughput: 'Minimum value of 125. Maximum value of 2,000' (MiB/s); at the 125 default, reads would cap below the fill rate."""
    ebs = ebs_of(plan_for("custom"))
    low, high = model_range("Throughput")
    assert low <= ebs["Throughput"] <= high
    assert ebs["Throughput"] >= ebs["VolumeInitializationRate"]


def test_eks_optimized_root_pays_for_no_initialization():
    """On the EKS-optimized AMI the serving image is pulled onto the NVMe RAID; the root holds nothing worth fetching early."""
    ebs = ebs_of(plan_for("eks-optimized"))
    assert "VolumeInitializationRate" not in ebs
    assert "Throughput" not in ebs


def test_the_pre_pulled_image_is_ready_before_a_pull_would_be():
    """The plan's start-up model: the custom image must beat the ECR pull, or the pipeline does not pay for itself."""
    minutes = plan_for("custom").estimates.image_ready_minutes
    assert minutes["custom"] < minutes["eks-optimized"]
    # At gp3's baseline 125 MiB/s (no provisioned rate) the same 20 GB would take longer than the pull.
    lazy = plan_mod.SERVING_IMAGE_GB / (plan_mod.GP3_BASELINE_MIBPS * 2**20 / 1e9) / 60
    assert lazy > minutes["eks-optimized"]


def test_plan_report_shows_image_minutes_for_both_sources():
    text = plan_report.as_text(plan_for("eks-optimized"))
    minutes = plan_for("eks-optimized").estimates.image_ready_minutes
    line = next(line for line in text.splitlines() if "serving image" in line)
    assert f"~{minutes['eks-optimized']:g} min" in line
    assert f"~{minutes['custom']:g} min" in line
    assert "this profile: eks-optimized" in line
