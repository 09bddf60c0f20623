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
    metric: str
    dims: tuple[tuple[str, str], ...]
    stat: str
    unit: str  # how to print the value
    fail_above: float | None = None
    fail_below: float | None = None
    namespace: str = c.SERVING_NAMESPACE  # the figures serving_metrics publishes, unless said


def _specs(plan: Plan) -> list[_Spec]:
    p = plan.alarms
    cluster = (("ClusterName", plan.cluster_name),)
    block = (("CapacityReservationId", plan.reservation_id), *cluster)
    decode = (*cluster, ("Role", "decode"))
    # A rehearsal has no block, so no clock: the block lifecycle function publishes nothing for it.
    specs = []
    if plan.market != "on-demand":
        drain, namespace = plan.drain_lead_minutes, c.BLOCK_NAMESPACE
        specs.append(_Spec("block_left", "block minutes left", c.BLOCK_MINUTES_LEFT, block, "Minimum", "min", None, drain, namespace))
    specs += [
        _Spec("ttft_p99", "TTFT p99 (decode)", "TtftP99Ms", decode, "Average", "ms", p.ttft_p99_ms),
        _Spec("tpot_p99", "TPOT p99 (decode)", "TpotP99Ms", decode, "Average", "ms", p.tpot_p99_ms),
        _Spec("output_tps", "output tokens/s", "OutputTokensPerSecond", decode, "Average", "tok/s"),
    ]
    for role in plan.roles.values():
        dims, r = (*cluster, ("Role", role.name)), role.name
        specs += [
            _Spec(
                f"healthy_{r}", f"{r} replicas healthy", "HealthyWorkers", dims, "Minimum", f"of {role.replicas}", fail_below=role.replicas
            ),
            _Spec(f"running_{r}", f"{r} running requests", "RunningRequests", dims, "Average", "req"),
            _Spec(f"queued_{r}", f"{r} queued requests", "QueuedRequests", dims, "Average", "req"),
        ]
        if role.attn_dp > 1:
            imbalance = f"(1 = even, {role.attn_dp} = one rank busy)"
            specs += [
                _Spec(f"busiest_rank_{r}", f"{r} busiest DP rank running requests", "BusiestRankRunningRequests", dims, "Average", "req"),
                _Spec(f"dp_imbalance_{r}", f"{r} DP load imbalance (max/mean tokens)", "DpTokenImbalance", dims, "Average", imbalance),
            ]
        if role.reports_expert_balancedness:
            floor = p.expert_balancedness_min
            specs.append(
                _Spec(
                    f"expert_balance_{r}", f"{r} expert balancedness", "ExpertBalancedness", dims, "Average", "(1 = even)", fail_below=floor
                )
            )
    insights = c.CONTAINER_INSIGHTS
    specs += [
        _Spec("router_errors", "router 5xx share", "RouterErrorRatio", cluster, "Average", "ratio", ROUTER_ERROR_RATIO),
        _Spec("gpu_util", "GPU utilization (cluster average)", "node_gpu_utilization", cluster, "Average", "%", namespace=insights),
        _Spec("efa_drops", "EFA receive drops/s (all nodes)", "node_efa_rx_dropped", cluster, "Sum", "/s", 0, namespace=insights),
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
        limit = f" (limit {s.fail_above if s.fail_above is not None else s.fail_below:g})" if failed else ""
        out.append(Figure(s.item, "FAIL" if failed else "OK", f"{_fmt(value)} {s.unit}{limit}", value))
    return out


def _latest(result: dict[str, Any]) -> float | None:
    points = sorted(zip(result.get("Timestamps", []), result.get("Values", []), strict=False), key=lambda p: p[0])
    return float(points[-1][1]) if points else None


def _fmt(value: float) -> str:
    if value.is_integer():
        return f"{int(value):,}"
    return f"{value:.3f}" if abs(value) < 1 else f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"
