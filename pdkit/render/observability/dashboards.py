"""CloudWatch dashboard bodies, rendered from the plan: serving and infrastructure.

Plain dicts in the CloudWatch dashboard body format
(https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/CloudWatch-Dashboard-Body-Structure.html).
Per-node panels use SEARCH, because node names and instance ids exist only while a block runs.
Every metric a panel names comes from the catalog; tests parse these bodies and check that.
"""

from __future__ import annotations

from typing import Any

from pdkit.model.plan import Plan
from pdkit.render.observability import catalog as c
from pdkit.render.observability.alarms import Alarm, alarms
from pdkit.render.observability.figures import FIGURES_BY_METRIC

Widget = dict[str, Any]
WIDTH = 12
HEIGHT = 6

MAX_ITL_NOTE = (
    "**Max ITL is not on this dashboard.** Histograms keep bucket counts, not the single worst gap, so a "
    "maximum cannot be derived from them; the seed's max-ITL comparison (EFA ~117 ms vs RoCE ~434 ms) comes "
    "from the benchmark report, which measures every inter-token gap at the client."
)


def dashboard_names(plan: Plan) -> dict[str, str]:
    return {"serving": f"{plan.name}-serving", "infrastructure": f"{plan.name}-infrastructure"}


def serving(plan: Plan, *, alarm_arn_prefix: str) -> dict[str, Any]:
    p = plan.alarms
    roles = list(plan.roles)
    widgets = [
        _text(
            f"# {plan.name}: serving\n"
            f"{', '.join(f'{r.name} {r.replicas} x {r.nodes_per_replica} nodes' for r in plan.roles.values())}; "
            f"router x {plan.router.replicas}. Figures: SGLang and router metrics in Prometheus, "
            f"quantiles over the last 5 minutes, published each minute. Decode TTFT is what clients see "
            f"(it includes prefill and the KV transfer).\n\n{MAX_ITL_NOTE}",
            height=3,
            width=24,
        ),
        _figure_graph(plan, "Time to first token (ms)", ["TtftP50Ms", "TtftP99Ms"], roles, hlines=[("ttft_p99_ms alarm", p.ttft_p99_ms)]),
        _figure_graph(
            plan, "Time per output token / ITL (ms)", ["TpotP50Ms", "TpotP99Ms"], ["decode"], hlines=[("tpot_p99_ms alarm", p.tpot_p99_ms)]
        ),
        _graph(
            plan,
            "Output tokens/s (decode) and prompt tokens/s (prefill)",
            _role_metrics(plan, ["OutputTokensPerSecond"], ["decode"]) + _role_metrics(plan, ["PromptTokensPerSecond"], ["prefill"]),
        ),
        _figure_graph(plan, "Finished requests/s", ["RequestsPerSecond"], roles),
        _figure_graph(plan, "Running and queued requests", ["RunningRequests", "QueuedRequests"], roles),
        _figure_graph(plan, "KV-cache pool usage (0..1)", ["KvCacheUsage"], roles, stat="Maximum"),
        _figure_graph(plan, "KV transfer latency prefill -> decode (ms)", ["KvTransferP50Ms", "KvTransferP99Ms"], ["prefill"]),
        _figure_graph(
            plan, "KV transfer and bootstrap failures per minute", ["KvTransferFailuresPerMinute", "KvBootstrapFailuresPerMinute"], roles
        ),
        _figure_graph(
            plan,
            "Healthy replicas at the router (of planned)",
            ["HealthyWorkers"],
            roles,
            stat="Minimum",
            hlines=[(f"{r.name} planned", r.replicas) for r in plan.roles.values()],
        ),
        _figure_graph(plan, "Router requests/s and errors/s", ["RouterRequestsPerSecond", "RouterErrorsPerSecond"], None),
        _figure_graph(plan, "Router 5xx share (0..1)", ["RouterErrorRatio"], None, hlines=[("alarm", _threshold(plan, "router-errors"))]),
        _figure_graph(plan, "End-to-end latency p99 (ms)", ["E2eP99Ms"], roles),
        *_rank_load(plan),
        *_expert_balance(plan),
        _alarm_status(plan, alarm_arn_prefix, [a for a in alarms(plan) if a.area == "serving"]),
    ]
    return {"start": "-PT3H", "periodOverride": "inherit", "widgets": _layout(widgets)}


def _rank_load(plan: Plan) -> list[Widget]:
    """One line per attention-DP rank (SEARCH: ranks exist only while the role serves), per role with DP."""
    out = []
    for role in (r for r in plan.roles.values() if r.attn_dp > 1):
        ranks = f"{role.replicas} x {role.attn_dp} DP ranks"
        for metric, title, stat in (
            ("RankRunningRequests", "running requests", "Average"),
            ("RankQueuedRequests", "queued requests", "Average"),
            ("RankKvCacheUsage", "KV-cache usage (0..1)", "Maximum"),
        ):
            query = _search(c.SERVING_NAMESPACE, c.RANK_DIMS, metric, {"ClusterName": plan.cluster_name, "Role": role.name}, stat, metric)
            out.append(_graph(plan, f"{role.name}: {title} per DP rank ({ranks})", [query], stat=stat))
        out.append(
            _figure_graph(
                plan,
                f"{role.name}: DP load imbalance, busiest over mean tokens per step (1 = even, {role.attn_dp} = one rank busy)",
                ["DpTokenImbalance"],
                [role.name],
                hlines=[("even", 1)],
            )
        )
    return out


def _expert_balance(plan: Plan) -> list[Widget]:
    roles = [r.name for r in plan.roles.values() if r.reports_expert_balancedness]
    if not roles:
        return []
    floor = plan.alarms.expert_balancedness_min
    return [
        _figure_graph(
            plan,
            "Expert balancedness, mean/max tokens per EP rank (1 = even)",
            ["ExpertBalancedness"],
            roles,
            hlines=[("expert_balancedness_min alarm", floor)],
        )
    ]


def infrastructure(plan: Plan, *, alarm_arn_prefix: str) -> dict[str, Any]:
    gpus, efa = plan.instance.gpus, plan.efa_devices_per_node
    namespace = plan.namespace
    widgets = [_text(f"# {plan.name}: infrastructure\n{_capacity_line(plan)}", height=2, width=24), *_block_widgets(plan)]
    widgets += [
        _search_graph(plan, "GPU utilization per node (%)", "node_gpu_utilization", "Average"),
        _search_graph(plan, "GPU memory used per node (bytes)", "node_gpu_memory_used", "Average"),
        _search_graph(plan, "EFA received bytes/s per node", "node_efa_rx_bytes", "Average"),
        _search_graph(plan, "EFA sent bytes/s per node", "node_efa_tx_bytes", "Average"),
        _search_graph(plan, "EFA received-and-dropped packets/s per node", "node_efa_rx_dropped", "Sum", hlines=[("alarm above", 0)]),
        _search_graph(plan, "EFA retransmit timeouts/s per node", "node_efa_retrans_timeout_events", "Sum"),
        _search_graph(plan, "Node Ready (1) per node", "node_status_condition_ready", "Minimum"),
        _search_graph(plan, f"GPUs advertised per node (plan: {gpus})", "node_gpu_limit", "Minimum", hlines=[("planned", gpus)]),
        _search_graph(plan, f"EFA devices advertised per node (plan: {efa})", "node_efa_limit", "Minimum", hlines=[("planned", efa)]),
        _graph(
            plan,
            "Cluster nodes (all groups) and failed nodes",
            [
                _metric(c.CONTAINER_INSIGHTS, "cluster_node_count", {"ClusterName": plan.cluster_name}, label="nodes"),
                _metric(c.CONTAINER_INSIGHTS, "cluster_failed_node_count", {"ClusterName": plan.cluster_name}, label="failed"),
            ],
            stat="Maximum",
            hlines=[("GPU nodes planned", plan.instance_count)],
        ),
        _graph(
            plan,
            f"Serving pods Ready in {namespace} (a LeaderWorkerSet group is ready when all its pods are)",
            [
                _search(
                    c.CONTAINER_INSIGHTS,
                    c.POD_DIMS,
                    "pod_status_ready",
                    {"ClusterName": plan.cluster_name, "Namespace": namespace},
                    "Minimum",
                    "pods",
                )
            ],
            stat="Minimum",
        ),
        _figure_graph(
            plan,
            "LeaderWorkerSet groups healthy at the router, and SGLang pods scraped, per role",
            ["HealthyWorkers", "MetricsTargetsUp"],
            list(plan.roles),
            stat="Minimum",
        ),
        _alarm_status(plan, alarm_arn_prefix, [a for a in alarms(plan) if a.area != "serving"]),
    ]
    return {"start": "-PT6H", "periodOverride": "inherit", "widgets": _layout(widgets)}


# ---- widgets ----


def _text(markdown: str, *, height: int, width: int = WIDTH) -> Widget:
    return {"type": "text", "width": width, "height": height, "properties": {"markdown": markdown}}


def _metric(namespace: str, name: str, dims: dict[str, str], **options: Any) -> list[Any]:
    entry: list[Any] = [namespace, name]
    for key, value in dims.items():
        entry += [key, value]
    return [*entry, options] if options else entry


def _search(namespace: str, schema: tuple[str, ...], name: str, equals: dict[str, str], stat: str, ident: str) -> dict[str, Any]:
    terms = " ".join(f'{k}="{v}"' for k, v in equals.items())
    expression = f"SEARCH('{{{namespace},{','.join(schema)}}} MetricName=\"{name}\" {terms}', '{stat}', 60)"
    return {"expression": expression, "id": ident, "label": ""}


def _graph(plan: Plan, title: str, metrics: list[Any], *, stat: str = "Average", hlines: list[tuple[str, float]] | None = None) -> Widget:
    props: dict[str, Any] = {
        "title": title,
        "region": plan.region,
        "view": "timeSeries",
        "stacked": False,
        "stat": stat,
        "period": 60,
        "metrics": metrics,
    }
    if hlines:
        props["annotations"] = {"horizontal": [{"label": label, "value": value} for label, value in hlines]}
    return {"type": "metric", "width": WIDTH, "height": HEIGHT, "properties": props}


def _search_graph(plan: Plan, title: str, metric: str, stat: str, *, hlines: list[tuple[str, float]] | None = None) -> Widget:
    query = _search(c.CONTAINER_INSIGHTS, c.NODE_DIMS, metric, {"ClusterName": plan.cluster_name}, stat, metric)
    return _graph(plan, title, [query], stat=stat, hlines=hlines)


def _role_metrics(plan: Plan, figures: list[str], roles: list[str] | None) -> list[Any]:
    out = []
    for name in figures:
        figure = FIGURES_BY_METRIC[name]
        if figure.by_role:
            for role in roles or []:
                out.append(_metric(c.SERVING_NAMESPACE, name, {"ClusterName": plan.cluster_name, "Role": role}, label=f"{role} {name}"))
        else:
            out.append(_metric(c.SERVING_NAMESPACE, name, {"ClusterName": plan.cluster_name}, label=name))
    return out


def _figure_graph(
    plan: Plan,
    title: str,
    figures: list[str],
    roles: list[str] | None,
    *,
    stat: str = "Average",
    hlines: list[tuple[str, float]] | None = None,
) -> Widget:
    return _graph(plan, title, _role_metrics(plan, figures, roles), stat=stat, hlines=hlines)


def _capacity_line(plan: Plan) -> str:
    per_node = f"{plan.instance.gpus} GPUs and {plan.efa_devices_per_node} EFA devices per node"
    fleet = f"{plan.instance_count} x {plan.instance.name}"
    if plan.market == "on-demand":
        return f"{fleet} on demand in {plan.block_az}, rehearsing {plan.rehearses}; {per_node}. No block, so no block clock."
    return (
        f"{fleet} on Capacity Block {plan.reservation_id} in {plan.block_az}; {per_node}. "
        f"GPU nodes drain {plan.drain_lead_minutes} min before the block ends (EC2 warns at T-40, terminates at T-30)."
    )


def _block_widgets(plan: Plan) -> list[Widget]:
    """The block clock panels; an on-demand rehearsal has no block, and no function publishes its clock."""
    if plan.market == "on-demand":
        return []
    return [
        _block_clock(plan),
        _graph(
            plan,
            "Block active (1) and minutes elapsed",
            [
                _metric(c.BLOCK_NAMESPACE, c.BLOCK_ACTIVE, _block_dims(plan), label="active", yAxis="right"),
                _metric(c.BLOCK_NAMESPACE, c.BLOCK_MINUTES_ELAPSED, _block_dims(plan), label="minutes elapsed"),
            ],
            stat="Maximum",
        ),
    ]


def _block_dims(plan: Plan) -> dict[str, str]:
    return {"CapacityReservationId": plan.reservation_id, "ClusterName": plan.cluster_name}


def _block_clock(plan: Plan) -> Widget:
    widget = _graph(
        plan,
        f"Minutes left in the Capacity Block (GPU nodes drain at {plan.drain_lead_minutes})",
        [_metric(c.BLOCK_NAMESPACE, c.BLOCK_MINUTES_LEFT, _block_dims(plan), label="minutes left")],
        stat="Minimum",
        hlines=[("drain", plan.drain_lead_minutes)],
    )
    widget["properties"]["view"] = "singleValue"
    widget["properties"]["sparkline"] = True
    return widget


def _alarm_status(plan: Plan, arn_prefix: str, chosen: list[Alarm]) -> Widget:
    return {
        "type": "alarm",
        "width": 24,
        "height": 3,
        "properties": {"title": "Alarms", "alarms": [arn_prefix + a.name for a in chosen], "sortBy": "stateUpdatedTimestamp"},
    }


def _threshold(plan: Plan, key: str) -> float:
    return next(a.threshold for a in alarms(plan) if a.key == key)


def _layout(widgets: list[Widget]) -> list[Widget]:
    """Left to right, two half-width panels per row."""
    x = y = row_height = 0
    out = []
    for widget in widgets:
        if x + widget["width"] > 24:
            x, y, row_height = 0, y + row_height, 0
        out.append({**widget, "x": x, "y": y})
        x += widget["width"]
        row_height = max(row_height, widget["height"])
    return out
