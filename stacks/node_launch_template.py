"""Launch-template pieces every node shares: IMDSv2 only with hop limit 1, encrypted gp3 root volume."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2

ROOT_DEVICE = "/dev/xvda"  # AL2023 EKS AMIs boot from /dev/xvda


def metadata_options() -> ec2.CfnLaunchTemplate.MetadataOptionsProperty:
    # Hop limit 1 keeps pods (one hop away) off the instance role: pods get AWS credentials from Pod Identity.
    return ec2.CfnLaunchTemplate.MetadataOptionsProperty(http_tokens="required", http_put_response_hop_limit=1, http_endpoint="enabled")


def detailed_monitoring() -> ec2.CfnLaunchTemplate.MonitoringProperty:
    # 1-minute EC2 metrics; AWS Control Tower (CT.EC2.PR.10) rejects launch templates without it.
    return ec2.CfnLaunchTemplate.MonitoringProperty(enabled=True)


def root_volume(size_gib: int) -> ec2.CfnLaunchTemplate.BlockDeviceMappingProperty:
    return ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
        device_name=ROOT_DEVICE,
        ebs=ec2.CfnLaunchTemplate.EbsProperty(volume_size=size_gib, volume_type="gp3", encrypted=True, delete_on_termination=True),
    )
