"""Every AWS failure reaches the operator as one line with the fix and a non-zero exit, never a traceback."""

from __future__ import annotations

import socket

import pytest
from botocore.exceptions import ClientError, UnStubbedResponseError

from pdkit import aws_errors
from pdkit.cli import main
from tests.fixtures.cmd_support import CR, REGION, real_profile

pytest_plugins = ["tests.fixtures.cmd_fixtures"]


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("ExpiredToken", "aws sso login"),
        ("InvalidClientTokenId", "refresh them"),
        ("AuthFailure", "refresh them"),
        ("UnauthorizedOperation", "not allowed to call ec2:DescribeCapacityReservations"),
        ("AccessDenied", "add ec2:DescribeCapacityReservations to your IAM role"),
        ("InvalidCapacityReservationId.NotFound", "no such Capacity Reservation in eu-south-2"),
        ("InvalidCapacityReservationId.Malformed", "check capacity.reservation_id"),
        ("RequestLimitExceeded", "wait a minute and run the command again"),
        ("OptInRequired", "enable the region"),
        ("UnsupportedOperation", "use a region that offers it"),
        ("InternalError", "AWS Support needs the request id"),
    ],
)
def test_aws_error_is_one_line_with_fix(aws, tmp_path, capsys, code, expected):
    aws("ec2").add_client_error(
        "describe_capacity_reservations", code, "the service said no", 400, expected_params={"CapacityReservationIds": [CR]}
    )
    assert main(["capacity", "status", "--profile", real_profile(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert err.startswith("pdkit: error: ")
    assert expected in err
    assert "Fix:" in err


def test_endpoint_connection_error_names_the_endpoint_and_honours_aws_endpoint_url(offline_aws, monkeypatch, tmp_path, capsys):
    """The real client factory: AWS_ENDPOINT_URL_EC2 is honoured (boto3's own handling) and a dead endpoint is one line."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    assert main(["capacity", "status", "--profile", real_profile(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"cannot reach http://127.0.0.1:{port}" in err
    assert "AWS_ENDPOINT_URL" in err
    assert err.count("\n") == 1


def test_no_credentials_is_one_line(offline_aws, monkeypatch, tmp_path, capsys):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    # Belt and braces: were credentials found after all, the call would hit a closed loopback port, not AWS.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    assert main(["capacity", "status", "--profile", real_profile(tmp_path)]) == 2
    assert "no usable AWS credentials found" in capsys.readouterr().err


def test_unknown_aws_profile_is_one_line(offline_aws, tmp_path, capsys):
    assert main(["capacity", "status", "--profile", real_profile(tmp_path), "--aws-profile", "nope"]) == 2
    assert "'nope' not found" in capsys.readouterr().err


def test_region_override_and_aws_profile_reach_the_client_factory(aws, tmp_path, capsys):
    aws("ec2").add_client_error("describe_capacity_reservations", "InvalidCapacityReservationId.NotFound", "no", 400)
    assert main(["capacity", "status", "--profile", real_profile(tmp_path), "--region", "us-east-1", "--aws-profile", "ops"]) == 2
    assert aws.requested == [("ec2", "ops", "us-east-1")]
    assert "in us-east-1" in capsys.readouterr().err


def test_stubber_assertions_are_never_disguised_as_operator_errors():
    """A test's 'unexpected call' must stay a failure, not become exit 2 that a negative test would accept."""
    assert aws_errors.explain(UnStubbedResponseError(operation_name="PurchaseCapacityBlock", reason="x"), region=REGION) is None
    assert aws_errors.explain(ValueError("bug"), region=REGION) is None


def test_throttling_names_the_iam_action_of_eks_calls():
    err = ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "DescribeNodegroup")
    kit = aws_errors.explain(err, region=REGION)
    assert kit is not None
    assert "eks:DescribeNodegroup" in str(kit)
