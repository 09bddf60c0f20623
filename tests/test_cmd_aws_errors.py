"""Every AWS failure reaches the operator as one line with the fix and a non-zero exit, never a traceback."""

from __future__ import annotations

import socket
import time

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, UnStubbedResponseError

from pdkit.cli.main import main
from pdkit.ops import aws_clients, aws_errors
from tests.fixtures.cmd_support import CR, REGION, real_profile
from tests.fixtures.ec2_standin import HANG, running

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
    """The real client factory: AWS_ENDPOINT_URL_EC2 is honoured (boto3's own handling) and a dead endpoint is one line
    that names the variable, not the region (https://docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html:
    the service-specific variable replaces the region's endpoint)."""
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
    # The override, not the region, is what the operator changed: do not send them to describe-regions.
    assert "may not exist" not in err
    assert f"AWS_ENDPOINT_URL_EC2=http://127.0.0.1:{port}" in err
    # Without an override, a failure to reach the region's own endpoint is most often a region typo.
    monkeypatch.delenv("AWS_ENDPOINT_URL_EC2")
    kit = aws_errors.explain(EndpointConnectionError(endpoint_url="https://ec2.eu-south-9.amazonaws.com/"), region="eu-south-9")
    assert kit is not None
    assert "the region 'eu-south-9' may not exist" in str(kit)


def test_read_command_against_an_endpoint_that_never_answers_gives_up_with_one_line(offline_aws, monkeypatch, tmp_path, capsys):
    """A loopback endpoint that accepts and never answers: the command says it is waiting, makes the bounded
    number of attempts, and ends in one line naming the override, well before the stand-in drops the
    connection. botocore's defaults (60 s read timeout, 3 attempts) would wait minutes
    (https://botocore.amazonaws.com/v1/documentation/api/latest/reference/config.html)."""
    monkeypatch.setattr(aws_clients, "READS", aws_clients.Patience(connect=1, read=0.3, attempts=2))
    monkeypatch.setattr(aws_clients, "WAIT_NOTICE_AFTER", 0.1)
    with running({"DescribeCapacityReservations": lambda _p: HANG}, hang_for=4) as ec2:
        monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", ec2.url)
        began = time.monotonic()
        code = main(["capacity", "status", "--profile", real_profile(tmp_path)])
        took = time.monotonic() - began
    assert code == 2
    assert took < 3
    assert len(ec2.sent("DescribeCapacityReservations")) == 2
    err = capsys.readouterr().err
    assert "Waiting for DescribeCapacityReservations" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"pdkit: error: {ec2.url}/ accepted the connection but did not answer in time")
    assert "AWS_ENDPOINT_URL_EC2" in last
    assert "may not exist" not in err
    assert "Traceback" not in err


def test_read_clients_give_up_within_a_minute(offline_aws):
    """The real client factory's timeouts and attempts bound a call on a silent endpoint to 60 s."""
    config = aws_clients.make_client("ec2", aws_profile=None, region=REGION).meta.config
    assert config.retries["total_max_attempts"] * (config.connect_timeout + config.read_timeout) <= 60


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
    assert "'nope' (from --aws-profile) not found" in capsys.readouterr().err


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


# The services the kit's commands make clients for (pdkit/ops): each one's endpoint variable as botocore spells it.
KIT_SERVICES = ("ec2", "eks", "sts", "cloudformation", "service-quotas", "autoscaling", "ssm", "s3", "ecr", "secretsmanager")


@pytest.mark.parametrize("service", KIT_SERVICES)
def test_endpoint_variable_names_are_the_ones_botocore_reads(service):
    """Checked against botocore's own resolver (configprovider.ConfiguredEndpointProvider), not a spelling of ours:
    with only our service variable set, botocore resolves the client's endpoint from it, and from no other."""
    from botocore.configprovider import ConfiguredEndpointProvider

    mine, everyone = aws_errors.endpoint_variables(service)
    assert everyone == "AWS_ENDPOINT_URL"
    provider = ConfiguredEndpointProvider(full_config={}, scoped_config={}, client_name=service, environ={mine: "http://127.0.0.1:1"})
    assert provider.provide() == "http://127.0.0.1:1"
    other = ConfiguredEndpointProvider(
        full_config={}, scoped_config={}, client_name="ec2" if service != "ec2" else "sts", environ={mine: "http://x"}
    )
    assert other.provide() is None


def test_an_sts_failure_never_blames_another_services_endpoint_variable(offline_aws, monkeypatch):
    """AWS_ENDPOINT_URL_EC2 (an EC2 stand-in) cannot have sent an STS call anywhere: the region's STS endpoint failed,
    so the hint is the region and the network. Before, the first AWS_ENDPOINT_URL* set was blamed whatever the call."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", "http://127.0.0.1:4566")
    kit = aws_errors.explain(EndpointConnectionError(endpoint_url="https://sts.eu-south-2.amazonaws.com/"), region=REGION)
    assert kit is not None
    assert "AWS_ENDPOINT_URL_EC2" not in str(kit)
    assert "the region 'eu-south-2' may not exist" in str(kit)
    # The variable that did send it is named: here the STS one, and the global one only when it holds that URL.
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:4567")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4568")
    kit = aws_errors.explain(EndpointConnectionError(endpoint_url="http://127.0.0.1:4567/"), region=REGION)
    assert "the endpoint comes from AWS_ENDPOINT_URL_STS=http://127.0.0.1:4567" in str(kit)
    kit = aws_errors.explain(EndpointConnectionError(endpoint_url="http://127.0.0.1:4568"), region=REGION)
    assert "the endpoint comes from AWS_ENDPOINT_URL=http://127.0.0.1:4568" in str(kit)


@pytest.mark.parametrize("value", ["localhost:4566", "http://[::1", "http://exa mple"])
def test_a_malformed_endpoint_variable_is_one_line_naming_it(offline_aws, monkeypatch, tmp_path, capsys, value):
    """botocore raises a bare ValueError ("Invalid endpoint: ...") when it makes the client; through the real CLI
    that is one line naming the variable and the fix, exit 2."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", value)
    assert main(["capacity", "status", "--profile", real_profile(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"AWS_ENDPOINT_URL_EC2={value} is not an endpoint URL botocore accepts" in err
    assert "Traceback" not in err


def test_an_unknown_aws_profile_from_the_environment_says_so(offline_aws, monkeypatch, tmp_path, capsys):
    """No --aws-profile was typed: the name came from AWS_PROFILE, and "drop --aws-profile" would be no fix."""
    monkeypatch.setenv("AWS_PROFILE", "nope")
    assert main(["capacity", "status", "--profile", real_profile(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "'nope' not found; it comes from AWS_PROFILE in your environment" in err
    assert "drop --aws-profile" not in err
