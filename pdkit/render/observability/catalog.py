"""Every metric the kit collects, by name, with where it comes from.

Dashboards, alarms and `pdkit status` may only name metrics listed here (tests/test_observability_*
check every panel, alarm and figure against this catalog). Standard library only: the Lambda
functions ship this module as it is.

Sources, read 2026-11-30 (re-check when bumping a pin):
- Container Insights (namespace ContainerInsights): metric names and dimension sets from
  aws/amazon-cloudwatch-agent translator/translate/otel/exporter/awsemf/kubernetes.go at ab55b8d
  (2026-08-07); the EKS add-on amazon-cloudwatch-observability v6.4.0 (Helm chart 6.4.0) runs agent
  1.300070.0, which has node_efa_limit (agent >= 1.300059) and the EFA retransmit counters.
  GPU and EFA metrics need enhanced_container_insights and accelerated_compute_metrics (both on by
  default in the add-on); node_gpu_limit and node_efa_limit are emitted only for nodes that have
  the resource, so system nodes never report 0 GPUs.
- SGLang 0.5.23 `--enable-metrics` (python/sglang/srt/observability/metrics_collector.py): served on
  the HTTP port's /metrics in the `sglang:` form. Scheduler series carry `tp_rank`, `pp_rank`,
  `moe_ep_rank` and, under attention DP, `dp_rank` (`SchedulerMetricsCollector.init_new`). Each
  scheduler with attn_tp_rank == 0 and attn_cp_rank == 0 records them, so with attention DP every
  DP rank reports its own load without `--enable-metrics-for-all-schedulers` (that flag would add
  the other TP/CP ranks of a group, which repeat the same requests). `sglang:eplb_balancedness`
  exists only with `--expert-balancedness-report-mode prometheus|both`, on the MoE EP rank 0
  scheduler (metrics_collector.py; scheduler_components/metrics_reporter.py).
- The router, smg 1.13.0 (model_gateway/src/observability/metrics.rs; names checked at smg v1.9.0
  and main f8daa88, 2026-08-22): Prometheus on port 29000.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# ---- Prometheus side (scraped by the Amazon Managed Service for Prometheus collector) ----

# SGLang names its metrics `sglang:<name>`; prometheus_client rewrites them to `sglang_<name>` when a
# scraper negotiates underscore escaping. The scrape configuration relabels that form back, so the
# workspace only ever holds this one (pdkit/render/observability/scrape.py).
SGLANG_PREFIX = "sglang:"
SGLANG_ESCAPED_PREFIX = "sglang_"

SGLANG_JOB = "sglang"
ROUTER_JOB = "router"
# SGLang serves /metrics on its HTTP port (--port); the router's Prometheus listens on 29000
# (--prometheus-port). Agreed with pdkit/render/serving by value; a test cross-checks both.
SGLANG_PORT = 30000
ROUTER_METRICS_PORT = 29000
METRICS_PATH = "/metrics"
# Kubernetes pod labels the scrape configuration reads (LeaderWorkerSet sets its own on every pod).
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
# Labels the scrape configuration puts on every series; dashboards and figures group by them.
ROLE = "role"  # prefill | decode (from the pods' pdkit/role label)
REPLICA = "replica"  # LeaderWorkerSet group index = SGLang replica of the role
NODE_RANK = "node_rank"  # LeaderWorkerSet worker index = SGLang --node-rank (0 is the leader)
DP_RANK = "dp_rank"  # SGLang's own label: the attention-DP rank of the scheduler (absent without attention DP)
POD = "pod"
# host:port of a worker: the SGLang target's address, and on router series the address in the worker URL.
# smg's Kubernetes discovery registers a pod as http://<pod IP>:<port> (service_discovery.rs,
# PodInfo::worker_url), so router series are joined to SGLang's on it to learn role and replica.
ADDRESS = "address"
NODE = "node"

PromKind = Literal["counter", "gauge", "histogram", "summary"]


@dataclass(frozen=True)
class PromMetric:
    name: str
    kind: PromKind
    source: Literal["sglang", "router", "scraper"]
    meaning: str

    @property
    def series(self) -> tuple[str, ...]:
        """The series names a query may use (a histogram is stored as _bucket, _sum and _count)."""
        if self.kind == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        if self.kind == "summary":  # prometheus_client's Summary exports no quantiles, only these two
            return (f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)


PROMETHEUS: tuple[PromMetric, ...] = (
    PromMetric("sglang:time_to_first_token_seconds", "histogram", "sglang", "time to first token, per request"),
    PromMetric(
        "sglang:inter_token_latency_seconds",
        "histogram",
        "sglang",
        "time per output token: each streamed chunk's interval divided by its tokens, observed once per token",
    ),
    PromMetric("sglang:e2e_request_latency_seconds", "histogram", "sglang", "end-to-end request latency"),
    PromMetric("sglang:num_requests_total", "counter", "sglang", "finished requests"),
    PromMetric("sglang:prompt_tokens_total", "counter", "sglang", "prompt tokens processed"),
    PromMetric("sglang:generation_tokens_total", "counter", "sglang", "output tokens generated"),
    PromMetric("sglang:num_running_reqs", "gauge", "sglang", "requests in the running batch (TP rank 0's scheduler)"),
    PromMetric("sglang:num_queue_reqs", "gauge", "sglang", "requests waiting in the scheduler queue"),
    PromMetric("sglang:token_usage", "gauge", "sglang", "KV-cache pool usage, 0..1"),
    PromMetric("sglang:gen_throughput", "gauge", "sglang", "generation throughput seen by the scheduler (tokens/s)"),
    PromMetric("sglang:kv_transfer_latency_ms", "histogram", "sglang", "KV-cache transfer latency prefill -> decode (prefill side)"),
    PromMetric("sglang:kv_transfer_speed_gb_s", "histogram", "sglang", "KV-cache transfer speed (prefill side)"),
    PromMetric("sglang:num_transfer_failed_reqs_total", "counter", "sglang", "requests whose KV transfer failed"),
    PromMetric("sglang:num_bootstrap_failed_reqs_total", "counter", "sglang", "requests whose prefill/decode bootstrap failed"),
    PromMetric("sglang:num_decode_transfer_queue_reqs", "gauge", "sglang", "decode requests waiting for their KV cache"),
    PromMetric(
        "sglang:dp_attention_token_imbalance_ratio",
        "histogram",
        "sglang",
        "per MLP-sync step, max over mean tokens across the DP ranks (1 = balanced); DP rank 0 reports it",
    ),
    PromMetric(
        "sglang:eplb_balancedness",
        "summary",
        "sglang",
        "per forward pass, mean/max of the tokens the EP ranks' experts took, averaged over MoE layers (1 = balanced); EP rank 0 reports it",
    ),
    PromMetric("smg_http_requests_total", "counter", "router", "HTTP requests received by the router"),
    PromMetric("smg_http_responses_total", "counter", "router", "HTTP responses by status_code"),
    PromMetric("smg_router_request_errors_total", "counter", "router", "router-side request errors by error_type"),
    PromMetric("smg_worker_health", "gauge", "router", "1 when the router's health check of a worker (URL) passes"),
    PromMetric("up", "gauge", "scraper", "1 when the collector scraped the target"),
)
PROMETHEUS_BY_NAME = {m.name: m for m in PROMETHEUS}
PROMETHEUS_SERIES = frozenset(s for m in PROMETHEUS for s in m.series)


# ---- CloudWatch side ----

CONTAINER_INSIGHTS = "ContainerInsights"
SERVING_NAMESPACE = "PDKit/Serving"  # figures the serving-metrics function publishes (figures.py)
BLOCK_NAMESPACE = "PDKit/CapacityBlock"  # the block clock (pdkit/functions/block_clock.py)
LAMBDA_NAMESPACE = "AWS/Lambda"

CLUSTER_DIMS = ("ClusterName",)
NODE_DIMS = ("ClusterName", "InstanceId", "NodeName")
GPU_DEVICE_DIMS = ("ClusterName", "GpuDevice", "InstanceId", "InstanceType", "NodeName")
EFA_DEVICE_DIMS = ("ClusterName", "InstanceId", "InstanceType", "NetworkInterfaceId", "NodeName")
POD_DIMS = ("ClusterName", "FullPodName", "Namespace", "PodName")
ROLE_DIMS = ("ClusterName", "Role")
RANK_DIMS = ("ClusterName", "DpRank", "Replica", "Role")
BLOCK_DIMS = ("CapacityReservationId", "ClusterName")


@dataclass(frozen=True)
class CloudWatchMetric:
    namespace: str
    name: str
    dimension_sets: tuple[tuple[str, ...], ...]
    unit: str
    meaning: str
    source: Literal["container-insights", "pdkit", "lambda"] = field(default="container-insights")

    def has_dimensions(self, names: tuple[str, ...] | list[str]) -> bool:
        return tuple(sorted(names)) in {tuple(sorted(d)) for d in self.dimension_sets}


def _ci(name: str, dims: tuple[tuple[str, ...], ...], unit: str, meaning: str) -> CloudWatchMetric:
    return CloudWatchMetric(CONTAINER_INSIGHTS, name, dims, unit, meaning)


_NODE_LEVEL = (NODE_DIMS, CLUSTER_DIMS)
_GPU_LEVEL = (CLUSTER_DIMS, NODE_DIMS, GPU_DEVICE_DIMS)
_EFA_LEVEL = (CLUSTER_DIMS, NODE_DIMS, EFA_DEVICE_DIMS)

CONTAINER_INSIGHTS_METRICS: tuple[CloudWatchMetric, ...] = (
    _ci("node_status_condition_ready", _NODE_LEVEL, "Count", "1 while the node's Ready condition is True"),
    _ci("node_gpu_limit", _NODE_LEVEL, "Count", "nvidia.com/gpu capacity the NVIDIA device plugin advertises"),
    _ci("node_efa_limit", _NODE_LEVEL, "Count", "vpc.amazonaws.com/efa capacity the EFA device plugin advertises"),
    _ci("node_gpu_utilization", _GPU_LEVEL, "Percent", "GPU utilization (DCGM_FI_DEV_GPU_UTIL)"),
    _ci("node_gpu_memory_utilization", _GPU_LEVEL, "Percent", "GPU framebuffer used, percent"),
    _ci("node_gpu_memory_used", _GPU_LEVEL, "Bytes", "GPU framebuffer used"),
    _ci("node_gpu_memory_total", _GPU_LEVEL, "Bytes", "GPU framebuffer size"),
    _ci("node_efa_rx_bytes", _EFA_LEVEL, "Bytes/Second", "bytes received on the node's EFA devices"),
    _ci("node_efa_tx_bytes", _EFA_LEVEL, "Bytes/Second", "bytes sent on the node's EFA devices"),
    _ci("node_efa_rx_dropped", _EFA_LEVEL, "Count/Second", "packets the EFA devices received and dropped"),
    _ci("node_efa_retrans_timeout_events", _EFA_LEVEL, "Count/Second", "SRD retransmit timeouts"),
    _ci("cluster_node_count", (CLUSTER_DIMS,), "Count", "nodes in the cluster"),
    _ci("cluster_failed_node_count", (CLUSTER_DIMS,), "Count", "nodes with a failing condition"),
    _ci(
        "pod_status_ready",
        (POD_DIMS, ("ClusterName", "Namespace", "PodName"), ("ClusterName", "Namespace", "Service"), CLUSTER_DIMS),
        "Count",
        "1 while the pod is Ready",
    ),
)

BLOCK_ACTIVE = "BlockActive"
BLOCK_MINUTES_LEFT = "BlockMinutesLeft"
BLOCK_MINUTES_ELAPSED = "BlockMinutesElapsed"
BLOCK_METRICS: tuple[CloudWatchMetric, ...] = (
    CloudWatchMetric(BLOCK_NAMESPACE, BLOCK_ACTIVE, (BLOCK_DIMS,), "Count", "1 while the Capacity Block is active", "pdkit"),
    CloudWatchMetric(
        BLOCK_NAMESPACE, BLOCK_MINUTES_LEFT, (BLOCK_DIMS,), "None", "minutes until the block's current end date (active only)", "pdkit"
    ),
    CloudWatchMetric(
        BLOCK_NAMESPACE, BLOCK_MINUTES_ELAPSED, (BLOCK_DIMS,), "None", "minutes since the block started (active only)", "pdkit"
    ),
)

LAMBDA_METRICS: tuple[CloudWatchMetric, ...] = (
    CloudWatchMetric(LAMBDA_NAMESPACE, "Errors", (("FunctionName",),), "Count", "failed invocations", "lambda"),
)
