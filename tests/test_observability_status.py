"""pdkit/ops/status_metrics.py: the headline figures `pdkit status` prints, from GetMetricData results."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import boto3
from botocore.stub import Stubber

from pdkit.cli import context
from pdkit.ops import status_metrics

PLAN = context.load_plan(None)
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _result(ident, *values):
    """GetMetricData answer for one query, newest point first, one minute apart."""
    stamps = [NOW - timedelta(minutes=i) for i in range(len(values))]
    return {"Id": ident, "Label": ident, "Timestamps": stamps, "Values": list(values), "StatusCode": "Complete"}


def _by_item(figures):
    return {f.item: f for f in figures}


def test_queries_are_valid_get_metric_data_input():
    """Stubber validates the request against botocore's CloudWatch model: ids, stats, dimensions."""
    cw = boto3.client("cloudwatch", region_name=PLAN.region, aws_access_key_id="t", aws_secret_access_key="t")  # noqa: S106
    queries = status_metrics.queries(PLAN)
    assert len({q["Id"] for q in queries}) == len(queries)
    assert all(re.fullmatch(r"[a-z][a-zA-Z0-9_]*", q["Id"]) for q in queries)
    with Stubber(cw) as stub:
        stub.add_response(
            "get_metric_data",
            {"MetricDataResults": []},
            {"MetricDataQueries": queries, "StartTime": NOW - status_metrics.WINDOW, "EndTime": NOW, "ScanBy": "TimestampDescending"},
        )
        cw.get_metric_data(MetricDataQueries=queries, StartTime=NOW - status_metrics.WINDOW, EndTime=NOW, ScanBy="TimestampDescending")


def test_no_data_reads_wait_not_ok():
    figures = status_metrics.headline(PLAN, [])
    assert figures
    assert {f.state for f in figures} == {"WAIT"}


def test_latest_point_wins_and_within_limits_is_ok():
    tpot = PLAN.profile.observability.tpot_p99_ms
    figures = _by_item(status_metrics.headline(PLAN, [_result("tpot_p99", tpot - 1, tpot + 50)]))
    assert figures["TPOT p99 (decode)"].state == "OK"
    assert figures["TPOT p99 (decode)"].value == tpot - 1


def test_tpot_above_the_profile_threshold_fails():
    tpot = PLAN.profile.observability.tpot_p99_ms
    figure = _by_item(status_metrics.headline(PLAN, [_result("tpot_p99", tpot + 5)]))["TPOT p99 (decode)"]
    assert figure.state == "FAIL"
    assert f"limit {tpot:g}" in figure.detail


def test_fewer_healthy_replicas_than_planned_fails():
    figures = _by_item(
        status_metrics.headline(
            PLAN, [_result("healthy_decode", PLAN.decode.replicas - 1), _result("healthy_prefill", PLAN.prefill.replicas)]
        )
    )
    assert figures["decode replicas healthy"].state == "FAIL"
    assert figures["prefill replicas healthy"].state == "OK"


def test_block_inside_the_drain_lead_fails():
    figure = _by_item(status_metrics.headline(PLAN, [_result("block_left", PLAN.drain_lead_minutes - 1)]))["block minutes left"]
    assert figure.state == "FAIL"
    assert figure.detail.startswith(f"{PLAN.drain_lead_minutes - 1} min")


def test_any_efa_drop_fails():
    assert _by_item(status_metrics.headline(PLAN, [_result("efa_drops", 0.2)]))["EFA receive drops/s (all nodes)"].state == "FAIL"
    assert _by_item(status_metrics.headline(PLAN, [_result("efa_drops", 0.0)]))["EFA receive drops/s (all nodes)"].state == "OK"


def test_a_rehearsal_asks_for_no_block_clock():
    """On demand there is no Capacity Reservation: a CapacityReservationId dimension would name the placeholder
    cr-00000000000000000, a metric nothing publishes, and `status --metrics` would WAIT on it forever."""
    rehearsal = context.load_plan("rehearsal-glm51-fp8-2p2d")
    queries = status_metrics.queries(rehearsal)
    dims = [d["Name"] for q in queries for d in q["MetricStat"]["Metric"]["Dimensions"]]
    assert "CapacityReservationId" not in dims
    assert "block minutes left" not in _by_item(status_metrics.headline(rehearsal, []))
    assert "block minutes left" in _by_item(status_metrics.headline(PLAN, []))
