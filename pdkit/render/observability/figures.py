"""The serving figures: PromQL over what the collector stores in Prometheus, evaluated once a minute
by the serving-metrics function and published as CloudWatch metrics (namespace PDKit/Serving).

CloudWatch cannot read Prometheus, and the operator needs GPUs, EFA, the block clock and serving on
one dashboard with one alarm path; so these few figures cross over, the raw series stay in the
Prometheus workspace for ad-hoc PromQL. Standard library only (shipped inside the function).

Latency figures are quantiles of SGLang's histograms over the last 5 minutes: a p99 from buckets is
an estimate (linear within a bucket), and a maximum cannot be derived at all. Max ITL belongs to the
benchmark report, which sees every inter-token gap at the client.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pdkit.render.observability import catalog as c

WINDOW = "5m"
_METRIC_TOKEN = re.compile(r"(?<![A-Za-z0-9_:])([A-Za-z_:][A-Za-z0-9_:]*)\s*(?=[{\[])")


@dataclass(frozen=True)
class Figure:
    metric: str  # CloudWatch metric name in PDKit/Serving
    promql: str  # instant query; by_role results carry the `role` label
    unit: str  # CloudWatch unit
    by_role: bool
    meaning: str
    # Counters and health series that do not exist yet mean zero (SGLang creates a failure counter on
    # its first failure; a router that is not running reports no worker health at all).
    absent_is_zero: bool = False
    # One point per attention-DP rank: results also carry `replica` and `dp_rank`.
    per_rank: bool = False

    @property
    def series(self) -> tuple[str, ...]:
        """Every Prometheus series this query reads."""
        return tuple(dict.fromkeys(_METRIC_TOKEN.findall(self.promql)))

    @property
    def dimensions(self) -> tuple[str, ...]:
        if self.per_rank:
            return c.RANK_DIMS
        return c.ROLE_DIMS if self.by_role else c.CLUSTER_DIMS


def _quantile(q: float, histogram: str, scale: float = 1.0) -> str:
    by = f'sum by ({c.ROLE}, le) (rate({histogram}_bucket{{job="{c.SGLANG_JOB}"}}[{WINDOW}]))'
    expr = f"histogram_quantile({q}, {by})"
    return f"{scale:g} * {expr}" if scale != 1.0 else expr


def _rate(counter: str, scale: float = 1.0) -> str:
    expr = f'sum by ({c.ROLE}) (rate({counter}{{job="{c.SGLANG_JOB}"}}[{WINDOW}]))'
    return f"{scale:g} * {expr}" if scale != 1.0 else expr


def _gauge(gauge: str) -> str:
    return f'sum by ({c.ROLE}) ({gauge}{{job="{c.SGLANG_JOB}"}})'


def _per_rank(gauge: str) -> str:
    # Within one DP rank only its attn_tp_rank 0 / attn_cp_rank 0 scheduler records (SGLang 0.5.23), but
    # pipeline stages may each report the same requests: one value per rank, not a sum.
    return f'max by ({c.ROLE}, {c.REPLICA}, {c.DP_RANK}) ({gauge}{{job="{c.SGLANG_JOB}",{c.DP_RANK}!=""}})'


def _mean(summary_or_histogram: str) -> str:
    """Mean of the observations over the window: rate of _sum over rate of _count."""
    rates = [f'sum by ({c.ROLE}) (rate({summary_or_histogram}_{part}{{job="{c.SGLANG_JOB}"}}[{WINDOW}]))' for part in ("sum", "count")]
    return " / ".join(rates)


_ROUTER = f'job="{c.ROUTER_JOB}"'

FIGURES: tuple[Figure, ...] = (
    Figure("TtftP50Ms", _quantile(0.5, "sglang:time_to_first_token_seconds", 1000), "Milliseconds", True, "time to first token, p50"),
    Figure("TtftP99Ms", _quantile(0.99, "sglang:time_to_first_token_seconds", 1000), "Milliseconds", True, "time to first token, p99"),
    Figure(
        "TpotP50Ms", _quantile(0.5, "sglang:inter_token_latency_seconds", 1000), "Milliseconds", True, "time per output token (ITL), p50"
    ),
    Figure(
        "TpotP99Ms", _quantile(0.99, "sglang:inter_token_latency_seconds", 1000), "Milliseconds", True, "time per output token (ITL), p99"
    ),
    Figure(
        "E2eP99Ms", _quantile(0.99, "sglang:e2e_request_latency_seconds", 1000), "Milliseconds", True, "end-to-end request latency, p99"
    ),
    Figure("RequestsPerSecond", _rate("sglang:num_requests_total"), "Count/Second", True, "finished requests per second"),
    Figure("PromptTokensPerSecond", _rate("sglang:prompt_tokens_total"), "Count/Second", True, "prompt tokens per second"),
    Figure("OutputTokensPerSecond", _rate("sglang:generation_tokens_total"), "Count/Second", True, "output tokens per second"),
    Figure("RunningRequests", _gauge("sglang:num_running_reqs"), "Count", True, "requests in the running batches"),
    Figure("QueuedRequests", _gauge("sglang:num_queue_reqs"), "Count", True, "requests waiting in the scheduler queues"),
    Figure("KvCacheUsage", f'max by ({c.ROLE}) (sglang:token_usage{{job="{c.SGLANG_JOB}"}})', "None", True, "KV-cache pool usage, 0..1"),
    Figure("KvTransferP50Ms", _quantile(0.5, "sglang:kv_transfer_latency_ms"), "Milliseconds", True, "KV-cache transfer latency, p50"),
    Figure("KvTransferP99Ms", _quantile(0.99, "sglang:kv_transfer_latency_ms"), "Milliseconds", True, "KV-cache transfer latency, p99"),
    Figure(
        "KvTransferFailuresPerMinute",
        _rate("sglang:num_transfer_failed_reqs_total", 60),
        "Count",
        True,
        "requests whose KV transfer failed, per minute",
        absent_is_zero=True,
    ),
    Figure(
        "KvBootstrapFailuresPerMinute",
        _rate("sglang:num_bootstrap_failed_reqs_total", 60),
        "Count",
        True,
        "requests whose prefill/decode bootstrap failed, per minute",
        absent_is_zero=True,
    ),
    Figure("RankRunningRequests", _per_rank("sglang:num_running_reqs"), "Count", True, "requests running on one DP rank", per_rank=True),
    Figure("RankQueuedRequests", _per_rank("sglang:num_queue_reqs"), "Count", True, "requests queued on one DP rank", per_rank=True),
    Figure("RankKvCacheUsage", _per_rank("sglang:token_usage"), "None", True, "KV-cache pool usage of one DP rank, 0..1", per_rank=True),
    Figure(
        "BusiestRankRunningRequests",
        f"max by ({c.ROLE}) ({_per_rank('sglang:num_running_reqs')})",
        "Count",
        True,
        "requests running on the busiest DP rank",
    ),
    Figure(
        "DpTokenImbalance",
        _mean("sglang:dp_attention_token_imbalance_ratio"),
        "None",
        True,
        "mean over steps of max/mean tokens across the DP ranks (1 = balanced)",
    ),
    Figure(
        "ExpertBalancedness",
        _mean("sglang:eplb_balancedness"),
        "None",
        True,
        "mean over forward passes of SGLang's expert balancedness, mean/max tokens per EP rank (1 = balanced)",
    ),
    Figure(
        "MetricsTargetsUp",
        f'sum by ({c.ROLE}) (up{{job="{c.SGLANG_JOB}"}})',
        "Count",
        True,
        "SGLang pods the collector scraped successfully",
        absent_is_zero=True,
    ),
    Figure(
        "HealthyWorkers",
        # Every router replica reports every worker: one verdict per worker address, given the role and
        # replica of the SGLang pod at that address (scrape.py), then one per replica, counted per role.
        f"sum by ({c.ROLE}) (max by ({c.ROLE}, {c.REPLICA}) ("
        f"max by ({c.ADDRESS}) (smg_worker_health{{{_ROUTER}}}) * on ({c.ADDRESS}) group_left ({c.ROLE}, {c.REPLICA}) "
        f'max by ({c.ADDRESS}, {c.ROLE}, {c.REPLICA}) (0 * up{{job="{c.SGLANG_JOB}"}} + 1)))',
        "Count",
        True,
        "replicas (LeaderWorkerSet groups) whose health check passes at the router",
        absent_is_zero=True,
    ),
    Figure(
        "RouterRequestsPerSecond",
        f"sum(rate(smg_http_requests_total{{{_ROUTER}}}[{WINDOW}]))",
        "Count/Second",
        False,
        "requests at the router",
    ),
    Figure(
        "RouterErrorRatio",
        f'sum(rate(smg_http_responses_total{{{_ROUTER},status_code=~"5.."}}[{WINDOW}])) / sum(rate(smg_http_responses_total{{{_ROUTER}}}[{WINDOW}]))',
        "None",
        False,
        "share of router responses that are 5xx, 0..1",
    ),
    Figure(
        "RouterErrorsPerSecond",
        f"sum(rate(smg_router_request_errors_total{{{_ROUTER}}}[{WINDOW}]))",
        "Count/Second",
        False,
        "router-side request errors per second",
    ),
)
FIGURES_BY_METRIC = {f.metric: f for f in FIGURES}

SERVING_METRICS: tuple[c.CloudWatchMetric, ...] = tuple(
    c.CloudWatchMetric(c.SERVING_NAMESPACE, f.metric, (f.dimensions,), f.unit, f.meaning, "pdkit") for f in FIGURES
)


def cloudwatch_metrics() -> dict[tuple[str, str], c.CloudWatchMetric]:
    """Every CloudWatch metric the kit collects, by (namespace, name)."""
    every = (*c.CONTAINER_INSIGHTS_METRICS, *c.BLOCK_METRICS, *c.LAMBDA_METRICS, *SERVING_METRICS)
    return {(m.namespace, m.name): m for m in every}
