"""`pdkit preflight`: one PASS/WARN/FAIL row per check with its fix; exit 0 only without FAIL. Each guard has a test that fires it."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from pdkit.cli.main import main
from pdkit.ops import preflight
from tests.fixtures.addon_versions import reply as addon_versions  # AWS's documented DescribeAddonVersions example
from tests.fixtures.cmd_support import CB, CR, NOW, PINS, profile, real_profile, stub_reservation
from tests.fixtures.scaledown import stub_no_node_groups

pytest_plugins = ["tests.fixtures.cmd_fixtures"]

PARENT = "/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/nvidia/recommended/image_id"
PROMOTED = "/pdkit/glm51-2p2d/ami/gpu"


def stub_checks(
    aws,
    *,
    account: str = "123456789012",
    reservation: dict[str, Any] | None = None,
    reservation_error: str | None = None,
    interconnect: str | None = "ok",
    interconnect_error: str | None = None,
    topology: list[str] | None = None,
    quota: float | None = 1536.0,
    addons: dict[str, dict[str, Any]] | None = None,
    cluster: dict[str, Any] | None = None,
    placeholder: bool = False,
    lambda_limit: tuple[int, int] | None = (1000, 1000),
    node_image: bool = True,
) -> None:
    """Stub the preflight calls in order; each keyword changes one answer (lambda_limit or quota None: the test stubs
    Lambda or the quota itself, node_image False: the test stubs the image parameter itself, addons {}: no pins)."""
    if lambda_limit is not None:
        stub_lambda(aws, *lambda_limit)
    stub_bootstrap(aws)
    if node_image:
        stub_node_image(aws)
    else:
        aws("ssm")
    aws("sts").add_response("get_caller_identity", {"Account": account, "Arn": f"arn:aws:iam::{account}:role/ops", "UserId": "AID"}, {})
    ec2 = aws("ec2")
    if not placeholder:
        if reservation_error:
            ec2.add_client_error(
                "describe_capacity_reservations", reservation_error, "nope", 400, expected_params={"CapacityReservationIds": [CR]}
            )
        else:
            stub_reservation(aws, **(reservation or {}))
            found = {"CapacityBlockId": CB} | (reservation or {})
            if interconnect_error:
                ec2.add_client_error(
                    "describe_capacity_block_status", interconnect_error, "denied", 403, expected_params={"CapacityBlockIds": [CB]}
                )
            elif found.get("CapacityBlockId"):
                statuses = [{"CapacityBlockId": CB, "InterconnectStatus": interconnect}] if interconnect else []
                ec2.add_response("describe_capacity_block_status", {"CapacityBlockStatuses": statuses}, {"CapacityBlockIds": [CB]})
            nodes = ["nn-top", "nn-mid", "nn-bottom"] if topology is None else topology
            ec2.add_response(
                "describe_capacity_reservation_topology",
                {"CapacityReservations": [{"CapacityReservationId": CR, "NetworkNodes": nodes}]},
                {"CapacityReservationIds": [CR]},
            )
    if quota is not None:
        aws("service-quotas").add_response(
            "get_service_quota", {"Quota": {"QuotaCode": "L-417A185B", "Value": quota}}, {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"}
        )
    eks = aws("eks")
    answers = addons if addons is not None else {name: addon_versions(name, version) for name, version in PINS.items()}
    for name in sorted(answers):
        eks.add_response("describe_addon_versions", answers[name], {"addonName": name, "kubernetesVersion": "1.36"})
    if cluster is None:
        eks.add_client_error(
            "describe_cluster", "ResourceNotFoundException", "No cluster found", 404, expected_params={"name": "glm51-2p2d"}
        )
    else:
        eks.add_response("describe_cluster", {"cluster": cluster}, {"name": "glm51-2p2d"})
    if not placeholder and not reservation_error:
        stub_no_node_groups(aws)  # the "EKS scale-down" rows (tests/test_scaledown.py): no GPU node group yet
    stub_serving_images(aws)


def stub_node_image(aws) -> None:
    aws("ssm").add_response("get_parameter", {"Parameter": {"Name": PARENT, "Value": "ami-0eks0000000000000"}}, {"Name": PARENT})


def stub_bootstrap(aws) -> None:
    """The CDK bootstrap row: the parameter the bootstrap stack writes (CDK guide, bootstrapping-env)."""
    name = "/cdk-bootstrap/hnb659fds/version"
    aws("ssm").add_response("get_parameter", {"Parameter": {"Name": name, "Type": "String", "Value": "30", "Version": 1}}, {"Name": name})


def stub_serving_images(aws) -> None:
    """The serving images row: every image the default profile builds is in ECR (DescribeImages)."""
    from tests.conftest import plan_of

    for image in plan_of().images.values():
        params = {"repositoryName": image.repository, "imageIds": [{"imageTag": image.tag}]}
        aws("ecr").add_response("describe_images", {"imageDetails": [{"imageTags": [image.tag]}]}, params)


def stub_lambda(aws, quota: int = 1000, unreserved: int = 1000) -> None:
    aws("lambda").add_response(
        "get_account_settings", {"AccountLimit": {"ConcurrentExecutions": quota, "UnreservedConcurrentExecutions": unreserved}}, {}
    )


def rows(capsys) -> dict[str, dict[str, str]]:
    data = json.loads(capsys.readouterr().out)
    return {r["name"]: r for r in data["checks"]}


def test_all_good_passes_with_exit_zero(aws, pins, tmp_path, capsys):
    stub_checks(aws, cluster={"name": "glm51-2p2d", "status": "ACTIVE", "version": "1.36"})
    assert main(["preflight", "--profile", real_profile(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out
    assert "Preflight passed" in out
    for words in (
        "account 123456789012",
        "a Capacity Block for ML",
        "active since",
        "eu-south-2a",
        "4 instances",
        "cb-0123456789abcdef0: ok",
        "nn-top > nn-mid > nn-bottom",
        "1536 vCPUs >= 768",
        "compatible with Kubernetes 1.36: coredns v1.14.3-eksbuild.11, vpc-cni v1.23.0-eksbuild.1",
        "ACTIVE, Kubernetes 1.36",
    ):
        assert words in out, words


def test_placeholder_fails_with_the_exact_next_command(aws, pins, capsys):
    stub_checks(aws, placeholder=True)
    assert main(["preflight", "--output", "json"]) == 1
    row = rows(capsys)["Reservation"]
    assert row["status"] == "FAIL"
    assert row["fix"].startswith("pdkit capacity offerings")


def reservation(**change: Any) -> dict[str, Any]:
    return {"reservation": change}


@pytest.mark.parametrize(
    ("stub", "changes", "check", "status", "words"),
    [
        (reservation(State="expired"), {}, "Reservation state", "FAIL", "pdkit capacity offerings"),
        (reservation(State="payment-failed"), {}, "Reservation state", "FAIL", "payment"),
        (reservation(State="payment-pending"), {}, "Reservation state", "WARN", "12 h"),
        (reservation(State="scheduled", StartDate=NOW + timedelta(hours=3)), {}, "Reservation state", "PASS", "starts"),
        (reservation(AvailabilityZone="eu-south-2b"), {}, "Availability Zone", "FAIL", "set aws.availability_zone: eu-south-2b"),
        (reservation(InstanceType="p5.48xlarge"), {}, "Instance type", "FAIL", "set capacity.instance_type: p5.48xlarge"),
        (reservation(TotalInstanceCount=2), {}, "Instance count", "FAIL", "the roles need 4"),
        (reservation(TotalInstanceCount=8), {}, "Instance count", "FAIL", "deploy guard refuses"),
        (reservation(EndDate=NOW + timedelta(hours=4, minutes=30)), {}, "Serving window", "FAIL", "pdkit capacity extend"),
        (reservation(EndDate=NOW + timedelta(hours=5, minutes=30)), {}, "Serving window", "PASS", "before the kit drains at T-60 min"),
        (reservation(ReservationType="default"), {}, "Reservation kind", "FAIL", "On-Demand Capacity Reservation"),
        ({}, {}, "EKS cluster", "WARN", "not deployed yet ... make deploy"),
        ({"interconnect": "ok"}, {}, "Interconnect", "PASS", ": ok"),
        ({"interconnect": "impaired"}, {}, "Interconnect", "FAIL", ""),
        ({"interconnect": "insufficient-data"}, {}, "Interconnect", "WARN", ""),
        ({"interconnect": None}, {}, "Interconnect", "WARN", ""),
        # DescribeCapacityBlockStatus takes the cb- id; without it there is nothing to ask (no call is stubbed).
        (reservation(CapacityBlockId=None), {}, "Interconnect", "WARN", ""),
        ({"topology": []}, {}, "Reservation topology", "WARN", ""),
        (
            {"quota": 192.0},
            {},
            "GPU vCPU quota",
            "WARN",
            "AWS does not document it ... request-service-quota-increase --service-code ec2 --quota-code L-417A185B --desired-value 768",
        ),
        ({"account": "999999999999"}, {"aws__account": "123456789012"}, "AWS credentials", "FAIL", ""),
        ({"cluster": {"name": "glm51-2p2d", "status": "ACTIVE", "version": "1.35"}}, {}, "EKS cluster", "WARN", ""),
        ({"cluster": {"name": "glm51-2p2d", "status": "CREATING", "version": "1.36"}}, {}, "EKS cluster", "WARN", ""),
        ({"cluster": {"name": "glm51-2p2d", "status": "FAILED", "version": "1.36"}}, {}, "EKS cluster", "FAIL", ""),
        # The GPU nodes' image: EKS's public AL2023 NVIDIA parameter for the plan's Kubernetes version.
        ({}, {}, "GPU node image", "PASS", "ami-0eks0000000000000"),
        # A new account's Lambda quota (10, see "Lambda concurrency" below) passes with the default of no reservation.
        ({"lambda_limit": (10, 10)}, {}, "Lambda concurrency", "PASS", "nothing reserved"),
    ],
)
def test_one_answer_sets_one_row(aws, pins, tmp_path, capsys, stub, changes, check, status, words):
    """Each guard fires on its own answer, says what to do in its row, and only a FAIL makes the exit non-zero."""
    stub_checks(aws, **stub)
    code = main(["preflight", "--profile", real_profile(tmp_path, **changes), "--output", "json"])
    row = rows(capsys)[check]
    assert row["status"] == status
    assert all(part in row["detail"] + " " + row["fix"] for part in words.split(" ... "))
    assert code == (1 if status == "FAIL" else 0)


def test_unknown_reservation_fails_its_row_and_skips_the_rows_that_need_it(aws, pins, tmp_path, capsys):
    stub_checks(aws, reservation_error="InvalidCapacityReservationId.NotFound")
    assert main(["preflight", "--profile", real_profile(tmp_path), "--output", "json"]) == 1
    found = rows(capsys)
    assert found["Reservation"]["status"] == "FAIL"
    assert "describe-capacity-reservations" in found["Reservation"]["fix"]
    assert "Interconnect" not in found
    assert "Serving window" not in found


def test_missing_permission_fails_its_row_and_the_run_goes_on(aws, pins, tmp_path, capsys):
    stub_checks(aws, interconnect_error="UnauthorizedOperation")
    assert main(["preflight", "--profile", real_profile(tmp_path), "--output", "json"]) == 1
    found = rows(capsys)
    assert found["Interconnect"]["status"] == "FAIL"
    assert "ec2:DescribeCapacityBlockStatus" in found["Interconnect"]["fix"]
    assert found["EKS cluster"]["status"] == "WARN"  # later checks still ran


def test_quota_falls_back_to_the_aws_default(aws, pins, tmp_path, capsys):
    stub_checks(aws, placeholder=True, quota=None)
    aws("service-quotas").add_client_error("get_service_quota", "NoSuchResourceException", "not applied", 400)
    aws("service-quotas").add_response(
        "get_aws_default_service_quota", {"Quota": {"Value": 1024.0}}, {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"}
    )
    main(["preflight", "--output", "json"])
    assert rows(capsys)["GPU vCPU quota"]["status"] == "PASS"


def test_addon_pin_not_offered_fails_with_the_newest_to_pin(aws, pins, tmp_path, capsys):
    """The "EKS add-ons" row fails on a pin EKS does not list for the cluster version and names the newest it lists
    (and its default); the same check gates `make deploy` (tests/test_addon_versions.py)."""
    answers = {
        "coredns": addon_versions("coredns", "v1.14.3-eksbuild.11"),
        "vpc-cni": addon_versions("vpc-cni", "v1.22.0-eksbuild.2", "v1.24.1-eksbuild.1", default="v1.22.0-eksbuild.2"),
    }
    stub_checks(aws, addons=answers)
    assert main(["preflight", "--profile", real_profile(tmp_path), "--output", "json"]) == 1
    row = rows(capsys)["EKS add-ons"]
    assert row["status"] == "FAIL"
    assert row["detail"] == "vpc-cni v1.23.0-eksbuild.1 is not listed as compatible with Kubernetes 1.36"
    assert row["fix"] == (
        "pin vpc-cni: v1.24.1-eksbuild.1 (the newest EKS lists for Kubernetes 1.36; EKS's default is v1.22.0-eksbuild.2) "
        "in pdkit/model/data/addons.yaml"
    )


@pytest.mark.parametrize(
    ("text", "status", "words"),
    [(None, "WARN", "not pinned yet"), ("managed:\n  vpc-cni: {version: v1}\n", "FAIL", "expected `managed:`")],
)
def test_missing_or_unreadable_addon_pins_set_their_row(aws, tmp_path, capsys, monkeypatch, text, status, words):
    """No pins file yet is a warning; a pins file that is not name: version fails its row (the run goes on)."""
    path = tmp_path / "addons.yaml"
    if text is not None:
        path.write_text(text)
    monkeypatch.setattr(preflight, "ADDON_PINS", path)
    stub_checks(aws, placeholder=True, addons={})
    main(["preflight", "--output", "json", "--profile", profile(tmp_path)])  # exit 1 either way: the placeholder's row fails
    row = rows(capsys)["EKS add-ons"]
    assert row["status"] == status
    assert words in row["detail"]


def test_expired_credentials_abort_with_one_line(aws, capsys):
    aws("sts").add_client_error("get_caller_identity", "ExpiredToken", "The security token included in the request is expired", 400)
    assert main(["preflight"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "aws sso login" in err


def test_text_table_names_the_first_fix(aws, pins, capsys):
    stub_checks(aws, placeholder=True)
    assert main(["preflight"]) == 1
    out = capsys.readouterr().out
    assert "do not deploy onto the block yet. First fix: pdkit capacity offerings" in out


def test_pins_are_read_from_the_managed_section_or_a_flat_mapping(tmp_path):
    nested = tmp_path / "nested.yaml"
    nested.write_text("managed:\n  vpc-cni: v1\ncharts:\n  lws: {version: 0.10.0}\n")
    flat = tmp_path / "flat.yaml"
    flat.write_text("vpc-cni: v1\n")
    assert preflight.pinned_addons(nested) == preflight.pinned_addons(flat) == {"vpc-cni": "v1"}
    assert preflight.pinned_addons(tmp_path / "none.yaml") is None


def test_the_kit_pins_its_addons():
    """The add-on row compares the cluster with pdkit/model/data/addons.yaml: the kit ships it, so it must read."""
    pins = preflight.pinned_addons()
    assert pins, "pdkit/model/data/addons.yaml is missing or empty: the add-on row would have nothing to compare"
    assert all(isinstance(v, str) for v in pins.values())


# --- Lambda concurrency ---------------------------------------------------------------------------
# Lambda keeps at least 100 concurrent executions unreserved, or the whole quota of an account below
# 100 (https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html); a new account's
# quota is 10, and PutFunctionConcurrency there answers "decreases account's
# UnreservedConcurrentExecution below its minimum value of [10]". GetAccountSettings reports
# AccountLimit.ConcurrentExecutions and UnreservedConcurrentExecutions (botocore lambda model).


@pytest.mark.parametrize(
    ("limit", "reserved", "status", "words"),
    [
        # A new account's quota of 10: the fix removes the opt-in, or names the quota to ask for.
        (
            (10, 10),
            1,
            "FAIL",
            "would leave 6 of 10 unreserved; Lambda refuses below 10 ... remove cluster.lambda_reserved_concurrency from {path} "
            "... --service-code lambda --quota-code L-B99A9384 --desired-value 104",
        ),
        ((1000, 103), 1, "FAIL", "would leave 99 of 1000 unreserved; Lambda refuses below 100"),
        ((1000, 1000), 2, "PASS", "reserving 2 for each of 4 functions (8) leaves 992 of 1000 unreserved"),
    ],
)
def test_an_opt_in_reservation_leaves_what_lambda_keeps_unreserved(aws, pins, tmp_path, capsys, limit, reserved, status, words):
    stub_checks(aws, lambda_limit=limit)
    aws("lambda").add_response("list_functions", {"Functions": []}, {})
    path = real_profile(tmp_path, cluster__lambda_reserved_concurrency=reserved)
    code = main(["preflight", "--profile", path, "--output", "json"])
    row = rows(capsys)["Lambda concurrency"]
    assert (row["status"], code) == (status, 1 if status == "FAIL" else 0)
    assert all(part in row["detail"] + " " + row["fix"] for part in words.format(path=path).split(" ... "))


def test_a_redeploy_counts_the_reservations_the_kit_already_holds(aws, pins, tmp_path, capsys):
    """After a deploy with the reservation, UnreservedConcurrentExecutions already excludes the kit's 4: not counted twice."""
    stub_checks(aws, lambda_limit=(1000, 100))
    lam = aws("lambda")
    kit_fn = {"FunctionName": "glm51-2p2d-block-clock", "Description": "glm51-2p2d: minutes left in Capacity Block"}
    other = {"FunctionName": "someone-else", "Description": "not ours"}
    lam.add_response("list_functions", {"Functions": [kit_fn, other], "NextMarker": "m"}, {})
    lam.add_response("get_function_concurrency", {"ReservedConcurrentExecutions": 1}, {"FunctionName": "glm51-2p2d-block-clock"})
    lam.add_response("list_functions", {"Functions": [kit_fn | {"FunctionName": "glm51-2p2d-serving-metrics"}]}, {"Marker": "m"})
    lam.add_response("get_function_concurrency", {"ReservedConcurrentExecutions": 1}, {"FunctionName": "glm51-2p2d-serving-metrics"})
    assert main(["preflight", "--profile", real_profile(tmp_path, cluster__lambda_reserved_concurrency=1), "--output", "json"]) == 1
    assert "would leave 98 of 1000" in rows(capsys)["Lambda concurrency"]["detail"]


def test_a_missing_lambda_permission_fails_its_row(aws, pins, tmp_path, capsys):
    stub_checks(aws, lambda_limit=None)
    aws("lambda").add_client_error(
        "get_account_settings", "AccessDeniedException", "not authorized to perform: lambda:GetAccountSettings", 403
    )
    assert main(["preflight", "--profile", real_profile(tmp_path), "--output", "json"]) == 1
    row = rows(capsys)["Lambda concurrency"]
    assert row["status"] == "FAIL"
    assert "lambda:GetAccountSettings" in row["fix"]


# --- GPU node image -------------------------------------------------------------------------------------------
# The image the GPU node groups launch from comes from an SSM parameter: EKS's public AL2023 NVIDIA parameter for the
# cluster's version, or the kit's promoted one (runbooks/05-node-image.md). SSM answers ParameterNotFound for a name
# that does not exist (botocore ssm model, GetParameter errors); EC2 DescribeImages answers InvalidAMIID.NotFound for
# a deregistered image.


@pytest.mark.parametrize(
    ("source", "parameter", "words"),
    [
        # EKS publishes no AL2023 NVIDIA AMI for the plan's Kubernetes version.
        ("eks-optimized", PARENT, "Kubernetes 1.36"),
        # ami.source: custom before an image was promoted: the fix is the runbook.
        ("custom", PROMOTED, f"{PROMOTED} ... runbooks/05-node-image.md"),
    ],
)
def test_node_image_row_fails_when_its_parameter_does_not_exist(aws, pins, tmp_path, capsys, source, parameter, words):
    stub_checks(aws, node_image=False)
    aws("ssm").add_client_error("get_parameter", "ParameterNotFound", "", 400, expected_params={"Name": parameter})
    assert main(["preflight", "--profile", real_profile(tmp_path, ami__source=source), "--output", "json"]) == 1
    row = rows(capsys)["GPU node image"]
    assert row["status"] == "FAIL"
    assert all(part in row["detail"] + " " + row["fix"] for part in words.split(" ... "))


@pytest.mark.parametrize(("answer", "status"), [("available", "PASS"), ("deregistered", "FAIL"), ("failed", "FAIL")])
def test_custom_source_checks_the_promoted_ami_is_available(aws, pins, tmp_path, capsys, answer, status):
    stub_checks(aws, node_image=False)
    aws("ssm").add_response("get_parameter", {"Parameter": {"Name": PROMOTED, "Value": "ami-0c0000000000000aa"}}, {"Name": PROMOTED})
    if answer == "deregistered":
        aws("ec2").add_client_error(
            "describe_images", "InvalidAMIID.NotFound", "gone", 400, expected_params={"ImageIds": ["ami-0c0000000000000aa"]}
        )
    else:
        aws("ec2").add_response(
            "describe_images",
            {"Images": [{"ImageId": "ami-0c0000000000000aa", "Name": "glm51-2p2d-gpu-node-x", "State": answer}]},
            {"ImageIds": ["ami-0c0000000000000aa"]},
        )
    main(["preflight", "--profile", real_profile(tmp_path, ami__source="custom"), "--output", "json"])
    assert rows(capsys)["GPU node image"]["status"] == status
