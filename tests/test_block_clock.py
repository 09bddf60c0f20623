"""The block clock's edges (pdkit/functions/block_clock.py): rounding, a block that just started, an empty
describe answer, errors without an AWS error code, and the clients it builds for itself in Lambda.

EC2 DescribeCapacityReservations returns `CapacityReservations` (a list, possibly empty) with StartDate and
EndDate as timestamps (botocore ec2 service-2.json, CapacityReservation); botocore raises connection
failures as EndpointConnectionError, which carries no `response`. CloudWatch PutMetricData takes the values.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber

from pdkit.functions import block_clock
from pdkit.render.observability import catalog

RID = "cr-0123456789abcdef0"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def clock_env(monkeypatch):
    monkeypatch.setenv("RESERVATION_ID", RID)
    monkeypatch.setenv("CLUSTER_NAME", "c")


def _client(name):
    return boto3.client(name, region_name="eu-south-2", aws_access_key_id="test", aws_secret_access_key="test")  # noqa: S106


def _active(**overrides):
    return {
        "CapacityReservationId": RID,
        "State": "active",
        "StartDate": NOW - timedelta(hours=2),
        "EndDate": NOW + timedelta(hours=1),
    } | overrides


def test_minutes_are_rounded_to_a_tenth():
    """75 min 20 s left is 75.3, 2 h 0 min 40 s elapsed is 120.7: one decimal, as the dashboards show them."""
    values = block_clock.readings(
        _active(EndDate=NOW + timedelta(minutes=75, seconds=20), StartDate=NOW - timedelta(minutes=120, seconds=40)), NOW
    )
    assert values[catalog.BLOCK_MINUTES_LEFT] == 75.3
    assert values[catalog.BLOCK_MINUTES_ELAPSED] == 120.7


def test_a_block_that_just_started_has_zero_minutes_elapsed():
    assert block_clock.readings(_active(StartDate=NOW), NOW)[catalog.BLOCK_MINUTES_ELAPSED] == 0.0


def test_an_empty_describe_answer_is_an_inactive_block():
    ec2, cw = _client("ec2"), _client("cloudwatch")
    with Stubber(ec2) as ec2_stub, Stubber(cw) as cw_stub:
        ec2_stub.add_response("describe_capacity_reservations", {"CapacityReservations": []}, {"CapacityReservationIds": [RID]})
        cw_stub.add_response("put_metric_data", {}, None)
        result = block_clock.handler({}, None, clients={"ec2": ec2, "cloudwatch": cw}, now=NOW)
    assert result == {"published": {catalog.BLOCK_ACTIVE: 0.0}}


def test_an_error_without_an_aws_code_fails_the_run_as_itself():
    """A connection failure has no error code: it must fail the run as what it is, not as a crash of the handler."""

    class Unreachable:
        def describe_capacity_reservations(self, **kwargs):
            raise EndpointConnectionError(endpoint_url="https://ec2.eu-south-2.amazonaws.com/")

    with pytest.raises(EndpointConnectionError):
        block_clock.handler({}, None, clients={"ec2": Unreachable(), "cloudwatch": object()}, now=NOW)


def test_in_lambda_it_builds_its_own_clients_and_reads_the_real_clock(monkeypatch):
    """Without injected clients (the Lambda runtime) it asks boto3 for ec2 and cloudwatch, and `now` is aware UTC."""
    made: dict[str, Stubber] = {}
    real_client = boto3.client

    def client(service, *args, **kwargs):
        c = real_client(service, region_name="eu-south-2", aws_access_key_id="test", aws_secret_access_key="test")  # noqa: S106
        made[service] = stub = Stubber(c)
        if service == "ec2":
            end = datetime.now(UTC) + timedelta(hours=1)
            stub.add_response("describe_capacity_reservations", {"CapacityReservations": [_active(EndDate=end)]}, None)
        else:
            stub.add_response("put_metric_data", {}, None)
        stub.activate()
        return c

    monkeypatch.setattr(boto3, "client", client)
    published = block_clock.handler({}, None)["published"]
    assert sorted(made) == ["cloudwatch", "ec2"]
    for stub in made.values():
        stub.assert_no_pending_responses()
    assert 59.0 <= published[catalog.BLOCK_MINUTES_LEFT] <= 60.0
