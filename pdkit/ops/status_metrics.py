"""The headline figures `pdkit status` prints, from CloudWatch: the same numbers as the dashboards.

Pure functions; the CLI makes the one AWS call:

    from pdkit import status_metrics
    now = datetime.now(UTC)
    answer = cloudwatch.get_metric_data(
        MetricDataQueries=status_metrics.queries(plan),
        StartTime=now - status_metrics.WINDOW, EndTime=now, ScanBy="TimestampDescending",
    )
    for f in status_metrics.headline(plan, answer["MetricDataResults"]):
        report.add("metrics", f.item, f.state, f.detail)

Each Figure reads OK, WAIT (no data yet: no block, no traffic, or the pipeline is not up) or FAIL
(past a profile threshold or planned count). IAM: cloudwatch:GetMetricData.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from pdkit.model.plan import Plan
from pdkit.render.observability import catalog as c
from pdkit.render.observability.alarms import ROUTER_ERROR_RATIO

WINDOW = timedelta(minutes=10)
PERIOD = 60
State = Literal["OK", "WAIT", "FAIL"]


@dataclass(frozen=True)
class Figure:
    item: str
    state: State
    detail: str
    value: float | None


@dataclass(frozen=True)
class _Spec:
    id: str
    item: str
    namespace: str
    metric: str
    dims: tuple[tuple[str, str], ...]
    stat: str
    unit: str  # how to print the value
    fail_above: float | None = None
    fail_below: float | None = None


def _specs(plan: Plan) -> list[_Spec]:
    p = plan.alarms
    cluster = (("ClusterName", plan.cluster_name),)
    block = (("CapacityReservationId", plan.reservation_id), *cluster)
    # A rehearsal has no block, so no clock: the block lifecycle function publishes nothing for it.
    specs = (
        []
        if plan.market == "on-demand"
        else [
            _Spec(
                "block_left",
                "block minutes left",
                c.BLOCK_NAMESPACE,
                c.BLOCK_MINUTES_LEFT,
                block,
                "Minimum",
                "min",
                fail_below=plan.drain_lead_minutes,
            ),
        ]
    )
    specs += [
        _Spec(
            "ttft_p99",
            "TTFT p99 (decode)",
            c.SERVING_NAMESPACE,
            "TtftP99Ms",
            (*cluster, ("Role", "decode")),
            "Average",
            "ms",
            p.ttft_p99_ms,
        ),
        _Spec(
            "tpot_p99",
            "TPOT p99 (decode)",
            c.SERVING_NAMESPACE,
            "TpotP99Ms",
            (*cluster, ("Role", "decode")),
            "Average",
            "ms",
            p.tpot_p99_ms,
        ),
        _Spec(
            "output_tps",
            "output tokens/s",
            c.SERVING_NAMESPACE,
            "OutputTokensPerSecond",
            (*cluster, ("Role", "decode")),
            "Average",
            "tok/s",
        ),
    ]
    for role in plan.roles.values():
        dims = (*cluster, ("Role", role.name))
        specs += [
            _Spec(
                f"healthy_{role.name}",
                f"{role.name} replicas healthy",
                c.SERVING_NAMESPACE,
                "HealthyWorkers",
                dims,
                "Minimum",
                f"of {role.replicas}",
                fail_below=role.replicas,
            ),
            _Spec(f"running_{role.name}", f"{role.name} running requests", c.SERVING_NAMESPACE, "RunningRequests", dims, "Average", "req"),
            _Spec(f"queued_{role.name}", f"{role.name} queued requests", c.SERVING_NAMESPACE, "QueuedRequests", dims, "Average", "req"),
        ]
        if role.attn_dp > 1:
            specs += [
                _Spec(
                    f"busiest_rank_{role.name}",
                    f"{role.name} busiest DP rank running requests",
                    c.SERVING_NAMESPACE,
                    "BusiestRankRunningRequests",
                    dims,
                    "Average",
                    "req",
                ),
                _Spec(
                    f"dp_imbalance_{role.name}",
                    f"{role.name} DP load imbalance (max/mean tokens)",
                    c.SERVING_NAMESPACE,
                    "DpTokenImbalance",
                    dims,
                    "Average",
                    f"(1 = even, {role.attn_dp} = one rank busy)",
                ),
            ]
        if role.reports_expert_balancedness:
            specs.append(
                _Spec(
                    f"expert_balance_{role.name}",
                    f"{role.name} expert balancedness",
                    c.SERVING_NAMESPACE,
                    "ExpertBalancedness",
                    dims,
                    "Average",
                    "(1 = even)",
                    fail_below=p.expert_balancedness_min,
                )
            )
    specs += [
        _Spec(
            "router_errors", "router 5xx share", c.SERVING_NAMESPACE, "RouterErrorRatio", cluster, "Average", "ratio", ROUTER_ERROR_RATIO
        ),
        _Spec("gpu_util", "GPU utilization (cluster average)", c.CONTAINER_INSIGHTS, "node_gpu_utilization", cluster, "Average", "%"),
        _Spec("efa_drops", "EFA receive drops/s (all nodes)", c.CONTAINER_INSIGHTS, "node_efa_rx_dropped", cluster, "Sum", "/s", 0),
    ]
    return specs


def queries(plan: Plan) -> list[dict[str, Any]]:
    """GetMetricData MetricDataQueries for every headline figure (one metric each, 1-minute points)."""
    return [
        {
            "Id": s.id,
            "MetricStat": {
                "Metric": {"Namespace": s.namespace, "MetricName": s.metric, "Dimensions": [{"Name": k, "Value": v} for k, v in s.dims]},
                "Period": PERIOD,
                "Stat": s.stat,
            },
            "ReturnData": True,
        }
        for s in _specs(plan)
    ]


def headline(plan: Plan, results: Iterable[dict[str, Any]]) -> list[Figure]:
    """One Figure per query, in query order, from GetMetricData's MetricDataResults (latest point wins)."""
    latest = {r["Id"]: _latest(r) for r in results}
    out = []
    for s in _specs(plan):
        value = latest.get(s.id)
        if value is None:
            out.append(Figure(s.item, "WAIT", "no data in the last 10 minutes", None))
            continue
        failed = (s.fail_above is not None and value > s.fail_above) or (s.fail_below is not None and value < s.fail_below)
        limit = (
            f" (limit {s.fail_above:g})" if s.fail_above is not None else (f" (limit {s.fail_below:g})" if s.fail_below is not None else "")
        )
        out.append(Figure(s.item, "FAIL" if failed else "OK", f"{_fmt(value)} {s.unit}{limit if failed else ''}", value))
    return out


def _latest(result: dict[str, Any]) -> float | None:
    points = sorted(zip(result.get("Timestamps", []), result.get("Values", []), strict=False), key=lambda p: p[0])
    return float(points[-1][1]) if points else None


def _fmt(value: float) -> str:
    if value.is_integer():
        return f"{int(value):,}"
    return f"{value:.3f}" if abs(value) < 1 else f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"
