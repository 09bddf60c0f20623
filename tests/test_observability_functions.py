"""The block clock and the serving-figures function, against botocore's service models (Stubber)."""

from __future__ import annotations

import io
import json
import math
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.credentials import Credentials
from botocore.stub import Stubber

from pdkit.functions import block_clock, serving_metrics
from pdkit.model import reservation
from pdkit.render.observability import catalog
from pdkit.render.observability.figures import FIGURES, FIGURES_BY_METRIC

RID = "cr-0123456789abcdef0"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BLOCK_DIMS = [{"Name": "CapacityReservationId", "Value": RID}, {"Name": "ClusterName", "Value": "c"}]


def _client(name):
    return boto3.client(name, region_name="eu-south-2", aws_access_key_id="test", aws_secret_access_key="test")  # noqa: S106


# ---- block clock ----


@pytest.fixture
def clock_env(monkeypatch):
    monkeypatch.setenv("RESERVATION_ID", RID)
    monkeypatch.setenv("CLUSTER_NAME", "c")


def _run_clock(found=None, error=None, expected=None):
    ec2, cw = _client("ec2"), _client("cloudwatch")
    with Stubber(ec2) as ec2_stub, Stubber(cw) as cw_stub:
        if error:
            ec2_stub.add_client_error(
                "describe_capacity_reservations", service_error_code=error, expected_params={"CapacityReservationIds": [RID]}
            )
        else:
            ec2_stub.add_response(
                "describe_capacity_reservations", {"CapacityReservations": found or []}, {"CapacityReservationIds": [RID]}
            )
        if expected is not None:
            data = [{"MetricName": k, "Dimensions": BLOCK_DIMS, "Timestamp": NOW, "Value": v, "Unit": "None"} for k, v in expected.items()]
            cw_stub.add_response("put_metric_data", {}, {"Namespace": catalog.BLOCK_NAMESPACE, "MetricData": data})
        result = block_clock.handler({}, None, clients={"ec2": ec2, "cloudwatch": cw}, now=NOW)
        ec2_stub.assert_no_pending_responses()
        cw_stub.assert_no_pending_responses()
    return result


def _block(**overrides):
    return {
        "CapacityReservationId": RID,
        "State": "active",
        "StartDate": NOW - timedelta(hours=2),
        "EndDate": NOW + timedelta(minutes=75, seconds=30),
    } | overrides


def test_active_block_publishes_minutes_left_and_elapsed(clock_env):
    expected = {catalog.BLOCK_ACTIVE: 1.0, catalog.BLOCK_MINUTES_LEFT: 75.5, catalog.BLOCK_MINUTES_ELAPSED: 120.0}
    assert _run_clock([_block()], expected=expected)["published"] == expected


def test_extension_moves_the_clock(clock_env):
    """The end date is read every minute: an extended block's clock jumps forward, the alarm clears."""
    expected = {catalog.BLOCK_ACTIVE: 1.0, catalog.BLOCK_MINUTES_LEFT: 1515.5, catalog.BLOCK_MINUTES_ELAPSED: 120.0}
    assert _run_clock([_block(EndDate=NOW + timedelta(hours=25, minutes=15, seconds=30))], expected=expected)["published"] == expected


@pytest.mark.parametrize("state", ["scheduled", "expired", "payment-pending"])
def test_inactive_block_publishes_only_that_it_is_inactive(clock_env, state):
    """No minutes-left point outside an active block, so the block-ending alarm cannot fire there."""
    assert _run_clock([_block(State=state)], expected={catalog.BLOCK_ACTIVE: 0.0})["published"] == {catalog.BLOCK_ACTIVE: 0.0}


def test_unknown_reservation_is_inactive_not_a_crash(clock_env):
    assert _run_clock(error="InvalidCapacityReservationId.NotFound", expected={catalog.BLOCK_ACTIVE: 0.0})


def test_other_aws_errors_fail_the_run(clock_env):
    """A throttled or denied describe must fail loudly (the pipeline alarm), not publish 'inactive'."""
    with pytest.raises(Exception, match="UnauthorizedOperation"):
        _run_clock(error="UnauthorizedOperation")


def test_placeholder_reservation_calls_nothing(clock_env, monkeypatch):
    monkeypatch.setenv("RESERVATION_ID", reservation.PLACEHOLDER)
    assert block_clock.handler({}, None, clients={"ec2": object(), "cloudwatch": object()}, now=NOW) == {"published": {}}


def test_minutes_never_go_negative():
    late = block_clock.readings(_block(EndDate=NOW - timedelta(minutes=3)), NOW)
    assert late[catalog.BLOCK_MINUTES_LEFT] == 0.0


# ---- serving figures ----


def _vector(*samples):
    return [{"metric": labels, "value": [1764590400, str(value)]} for labels, value in samples]


def test_role_figures_become_role_dimensions():
    answers = {FIGURES_BY_METRIC["TpotP99Ms"].promql: _vector(({"role": "decode"}, 21.5))}
    data, failed = serving_metrics.datums([FIGURES_BY_METRIC["TpotP99Ms"]], lambda q: answers[q], cluster="c", roles=["prefill", "decode"])
    assert failed == []
    assert data == [
        {
            "MetricName": "TpotP99Ms",
            "Dimensions": [{"Name": "ClusterName", "Value": "c"}, {"Name": "Role", "Value": "decode"}],
            "Value": 21.5,
            "Unit": "Milliseconds",
        }
    ]


def test_nan_and_unknown_roles_are_dropped():
    """histogram_quantile without traffic is NaN: no point is better than a fake one."""
    result = _vector(({"role": "decode"}, math.nan), ({"role": "router"}, 3), ({"role": "prefill"}, math.inf))
    data, _ = serving_metrics.datums([FIGURES_BY_METRIC["TtftP99Ms"]], lambda q: result, cluster="c", roles=["prefill", "decode"])
    assert data == []


def test_absent_health_counts_as_zero_healthy_replicas():
    """A router that is not running reports nothing: that is zero healthy replicas, not silence."""
    data, _ = serving_metrics.datums([FIGURES_BY_METRIC["HealthyWorkers"]], lambda q: [], cluster="c", roles=["prefill", "decode"])
    assert sorted((d["Dimensions"][1]["Value"], d["Value"]) for d in data) == [("decode", 0.0), ("prefill", 0.0)]


def test_failed_queries_are_reported_and_skipped():
    def query(promql):
        if "smg_" in promql:
            raise RuntimeError("timeout")
        return []

    data, failed = serving_metrics.datums(FIGURES, query, cluster="c", roles=["prefill", "decode"])
    assert failed
    assert all("smg_" in FIGURES_BY_METRIC[m].promql for m in failed)
    assert data  # the absent-is-zero figures of SGLang still publish


@pytest.fixture
def serving_env(monkeypatch):
    monkeypatch.setenv("ROLES", "prefill,decode")
    monkeypatch.setenv("CLUSTER_NAME", "c")
    monkeypatch.setenv("WORKSPACE_ENDPOINT", "https://aps-workspaces.eu-south-2.amazonaws.com/workspaces/ws-1/")
    monkeypatch.setenv("AWS_REGION", "eu-south-2")


def test_handler_publishes_in_batches_to_the_serving_namespace(serving_env):
    cw = _client("cloudwatch")

    def query(promql):
        return _vector(({"role": "prefill"}, 1), ({"role": "decode"}, 2))

    expected, _ = serving_metrics.datums(FIGURES, query, cluster="c", roles=["prefill", "decode"])
    assert len(expected) > serving_metrics.BATCH  # exercise the batching
    with Stubber(cw) as stub:
        for i in range(0, len(expected), serving_metrics.BATCH):
            chunk = [d | {"Timestamp": NOW} for d in expected[i : i + serving_metrics.BATCH]]
            stub.add_response("put_metric_data", {}, {"Namespace": catalog.SERVING_NAMESPACE, "MetricData": chunk})
        result = serving_metrics.handler({}, None, query=query, cloudwatch=cw, now=NOW)
        stub.assert_no_pending_responses()
    assert result == {"published": len(expected), "failed": []}


def test_handler_fails_when_every_query_fails(serving_env):
    """So the pipeline alarm pages instead of every serving alarm going quietly blind."""

    def down(promql):
        raise OSError("connection refused")

    with pytest.raises(RuntimeError, match="every Prometheus query failed"):
        serving_metrics.handler({}, None, query=down, cloudwatch=object(), now=NOW)


def test_queries_are_sigv4_signed_for_the_aps_service():
    sent = []

    def opener(request, timeout):
        sent.append(request)
        return io.BytesIO(json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode())

    query = serving_metrics.signed_query(
        "https://aps-workspaces.eu-south-2.amazonaws.com/workspaces/ws-1/",
        "eu-south-2",
        credentials=Credentials("AKID", "SECRET"),
        opener=opener,
    )
    assert query("up") == []
    (request,) = sent
    assert request.full_url == "https://aps-workspaces.eu-south-2.amazonaws.com/workspaces/ws-1/api/v1/query"
    assert request.get_method() == "POST"
    assert request.data == b"query=up"
    assert "/eu-south-2/aps/aws4_request" in request.get_header("Authorization")


def test_query_errors_raise():
    def opener(request, timeout):
        return io.BytesIO(json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode())

    query = serving_metrics.signed_query("https://x.example/ws/", "eu-south-2", credentials=Credentials("A", "S"), opener=opener)
    with pytest.raises(RuntimeError, match="bad_data"):
        query("sum(")


def test_only_https_endpoints():
    with pytest.raises(ValueError, match="https"):
        serving_metrics.signed_query("http://x.example/ws/", "eu-south-2", credentials=Credentials("A", "S"))
