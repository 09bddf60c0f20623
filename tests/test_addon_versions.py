"""Issue 25 item 7: the pinned EKS add-on versions are checked against the cluster's Kubernetes version before
`make deploy` creates anything (a hard gate in `pdkit deploy-check`), with the same check as preflight's "EKS add-ons" row.

EKS: "Before you create an Amazon EKS add-on you need to verify that the Amazon EKS add-on version is compatible
with your cluster", with DescribeAddonVersions for the add-on and the Kubernetes version
(https://docs.aws.amazon.com/eks/latest/userguide/addon-compat.html). Replies are AWS's documented example
(tests/fixtures/addon_versions.py), checked by botocore's Stubber against the EKS model; pagination follows the
model's DescribeAddonVersions paginator (nextToken).
"""

from __future__ import annotations

import boto3
from botocore.stub import Stubber

from pdkit.cli.main import main
from pdkit.model.catalog import addons
from pdkit.ops import addon_versions
from tests.fixtures.addon_versions import DOCUMENTED, reply, stub_listed

pytest_plugins = ["tests.fixtures.cmd_fixtures"]


def _eks(*pages: tuple[dict, dict]) -> tuple[object, Stubber]:
    client = boto3.client("eks", region_name="eu-south-2", aws_access_key_id="testing", aws_secret_access_key="testing")  # noqa: S106
    stub = Stubber(client)
    for page, params in pages:
        stub.add_response("describe_addon_versions", page, params)
    stub.activate()
    return client, stub


def test_the_documented_example_lists_its_version_as_compatible():
    """AWS's own sample answer, unchanged: v1.31.0-eksbuild.1 of aws-ebs-csi-driver is compatible with 1.30, and the default."""
    eks, stub = _eks((DOCUMENTED, {"addonName": "aws-ebs-csi-driver", "kubernetesVersion": "1.30"}))
    (verdict,) = addon_versions.check(eks, {"aws-ebs-csi-driver": "v1.31.0-eksbuild.1"}, "1.30")
    stub.assert_no_pending_responses()
    assert verdict.compatible
    assert verdict.newest == verdict.default == "v1.31.0-eksbuild.1"


def test_a_version_listed_for_another_cluster_version_is_not_compatible():
    """Compatibility is what `compatibilities[].clusterVersion` says, not the version's presence in the answer."""
    eks, _ = _eks((reply("vpc-cni", "v1.23.0-eksbuild.1", cluster="1.35"), {"addonName": "vpc-cni", "kubernetesVersion": "1.36"}))
    (verdict,) = addon_versions.check(eks, {"vpc-cni": "v1.23.0-eksbuild.1"}, "1.36")
    assert not verdict.compatible
    assert verdict.problem() == "EKS lists no version of add-on vpc-cni for Kubernetes 1.36"
    assert "aws eks describe-addon-versions --addon-name vpc-cni --kubernetes-version 1.36" in verdict.fix()


def test_every_page_is_read():
    """The pin is on the second page: a reader of the first page only would refuse a compatible pin."""
    first = reply("coredns", "v1.14.2-eksbuild.1", next_token="page-2")  # noqa: S106 - a page token, not a secret
    second = reply("coredns", "v1.14.3-eksbuild.11")
    eks, stub = _eks(
        (first, {"addonName": "coredns", "kubernetesVersion": "1.36"}),
        (second, {"addonName": "coredns", "kubernetesVersion": "1.36", "nextToken": "page-2"}),
    )
    (verdict,) = addon_versions.check(eks, {"coredns": "v1.14.3-eksbuild.11"}, "1.36")
    stub.assert_no_pending_responses()
    assert verdict.compatible
    assert [o.version for o in verdict.offered] == ["v1.14.2-eksbuild.1", "v1.14.3-eksbuild.11"]


def test_the_newest_is_found_by_version_not_by_order_or_text():
    """EKS promises no order, and v1.9.0 sorts after v1.23.0 as text; the fix must name v1.23.0-eksbuild.2."""
    page = reply("vpc-cni", "v1.9.0-eksbuild.1", "v1.23.0-eksbuild.2", "v1.23.0-eksbuild.10", "v1.18.5-eksbuild.1")
    eks, _ = _eks((page, {"addonName": "vpc-cni", "kubernetesVersion": "1.36"}))
    (verdict,) = addon_versions.check(eks, {"vpc-cni": "v1.24.0-eksbuild.1"}, "1.36")
    assert verdict.newest == "v1.23.0-eksbuild.10"
    assert addon_versions.version_key("1.23.1") == (1, 23, 1, 0), "eksctl sees versions without the leading v too"


def test_refusal_is_one_line_with_each_fix():
    eks, _ = _eks(
        (reply("coredns", "v1.14.3-eksbuild.11"), {"addonName": "coredns", "kubernetesVersion": "1.36"}),
        (reply("vpc-cni", "v1.24.1-eksbuild.1", default="v1.24.1-eksbuild.1"), {"addonName": "vpc-cni", "kubernetesVersion": "1.36"}),
    )
    verdicts = addon_versions.check(eks, {"vpc-cni": "v1.23.0-eksbuild.1", "coredns": "v1.14.3-eksbuild.11"}, "1.36")
    refused = addon_versions.refusal(verdicts)
    assert refused is not None
    text = str(refused)
    assert "\n" not in text
    assert "vpc-cni v1.23.0-eksbuild.1 is not listed as compatible with Kubernetes 1.36" in text
    assert "Fix: pin vpc-cni: v1.24.1-eksbuild.1 (the newest EKS lists for Kubernetes 1.36) in pdkit/model/data/addons.yaml" in text
    assert "coredns" not in text
    assert addon_versions.refusal(verdicts[:1]) is None


# --- the deploy gate: `pdkit deploy-check`, which `make deploy` runs before `cdk deploy` ---------------------------


def test_deploy_check_refuses_an_incompatible_pin_before_reading_anything_else(aws, tmp_path, capsys):
    """A pin EKS does not list stops `make deploy` at deploy-check: exit 2, one line with the pin to use, and no
    CloudFormation call (the test gives the command no cloudformation client, so any later step would fail loudly)."""
    pins = addons().managed
    listed = dict(pins, **{"vpc-cni": "v1.99.0-eksbuild.1"})  # EKS lists another vpc-cni than the kit pins
    eks = aws("eks")
    for name in sorted(listed):
        eks.add_response("describe_addon_versions", reply(name, listed[name]), {"addonName": name, "kubernetesVersion": "1.36"})
    assert main(["deploy-check", "--cdk-out", str(tmp_path / "cdk.out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"vpc-cni {pins['vpc-cni']} is not listed as compatible with Kubernetes 1.36" in err
    assert "Fix: pin vpc-cni: v1.99.0-eksbuild.1" in err
    assert "Nothing was deployed" in err


def test_deploy_check_says_the_pins_fit(aws, tmp_path, capsys):
    """With every pin listed the gate passes and says so, then deploy-check goes on (here: to the missing assembly)."""
    stub_listed(aws, dict(addons().managed))
    aws("cloudformation")
    aws("ssm")
    assert main(["deploy-check", "--cdk-out", str(tmp_path / "nowhere")]) == 2
    captured = capsys.readouterr()
    assert "EKS lists every pinned add-on version as compatible with Kubernetes 1.36" in captured.out
    assert "make synth" in captured.err


def test_a_denied_describe_addon_versions_is_one_line_naming_the_action(aws, tmp_path, capsys):
    aws("eks").add_client_error(
        "describe_addon_versions",
        "AccessDeniedException",
        "User: arn:aws:iam::123456789012:user/ops is not authorized to perform: eks:DescribeAddonVersions",
        403,
    )
    assert main(["deploy-check", "--cdk-out", str(tmp_path / "cdk.out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "eks:DescribeAddonVersions" in err
