"""pdkit/ops/status_metrics.py: the headline figures `pdkit status` prints, from GetMetricData results."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.stub import Stubber

from pdkit.ops import status_metrics
from tests.conftest import plan_of

PLAN = plan_of()
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


TPOT = PLAN.alarms.tpot_p99_ms
DRAIN = PLAN.drain_lead_minutes


@pytest.mark.parametrize(
    ("results", "item", "state", "detail"),
    [
        # The latest point wins (results come newest first); within the profile's limit is OK.
        ([_result("tpot_p99", TPOT - 1, TPOT + 50)], "TPOT p99 (decode)", "OK", f"{TPOT - 1:g} ms"),
        ([_result("tpot_p99", TPOT + 5)], "TPOT p99 (decode)", "FAIL", f"{TPOT + 5:g} ms (limit {TPOT:g}"),
        ([_result("healthy_decode", PLAN.decode.replicas - 1)], "decode replicas healthy", "FAIL", ""),
        ([_result("healthy_prefill", PLAN.prefill.replicas)], "prefill replicas healthy", "OK", ""),
        ([_result("block_left", DRAIN - 1)], "block minutes left", "FAIL", f"{DRAIN - 1} min"),
        ([_result("efa_drops", 0.2)], "EFA receive drops/s (all nodes)", "FAIL", ""),
        ([_result("efa_drops", 0.0)], "EFA receive drops/s (all nodes)", "OK", ""),
    ],
)
def test_each_figure_against_its_limit(results, item, state, detail):
    """TPOT above the profile's threshold, fewer healthy replicas than planned, a block inside the drain lead and any
    EFA drop each FAIL their row; the row names the limit or the value."""
    figure = _by_item(status_metrics.headline(PLAN, results))[item]
    assert figure.state == state
    assert figure.detail.startswith(detail)


def test_a_rehearsal_asks_for_no_block_clock():
    """On demand there is no Capacity Reservation: a CapacityReservationId dimension would name the placeholder
    cr-00000000000000000, a metric nothing publishes, and `status --metrics` would WAIT on it forever."""
    rehearsal = plan_of("rehearsal-glm51-fp8-2p2d")
    queries = status_metrics.queries(rehearsal)
    dims = [d["Name"] for q in queries for d in q["MetricStat"]["Metric"]["Dimensions"]]
    assert "CapacityReservationId" not in dims
    assert "block minutes left" not in _by_item(status_metrics.headline(rehearsal, []))
    assert "block minutes left" in _by_item(status_metrics.headline(PLAN, []))
