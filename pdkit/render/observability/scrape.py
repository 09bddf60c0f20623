"""The managed collector's scrape configuration, rendered from the plan.

Two jobs, both by Kubernetes pod discovery in the serving namespace:
- `sglang`: every pod labelled pdkit/role=<prefill|decode>, on SGLang's HTTP port. Leaders serve the
  tokenizer histograms (TTFT, ITL, e2e); workers answer /metrics too (SGLang's health server on the
  other node ranks), so a missing rank shows as `up == 0` rather than as silence.
- `router`: every pod exposing the router's Prometheus port.

Labels: `role`, `replica` (LeaderWorkerSet group index), `node_rank` (LWS worker index), `pod`,
`node`, and `address` (the target's host:port). SGLang's own scheduler labels (`tp_rank`, `pp_rank`,
`moe_ep_rank`, and `dp_rank` under attention DP) pass through untouched: the per-DP-rank figures
group by `dp_rank`, so no relabelling may drop or rename it. The router discovers workers by label
and reports each as `worker="http://<pod IP>:<port>"`; its series get that host:port as `address`, and
figures join them to SGLang's series on it to learn the worker's role and replica.

Managed-collector limits honoured here (AMP user guide, "Scraper configuration"): only
kubernetes_sd_configs, interval >= 30 s, no DNS names other than the API server.
https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-collector-how-to.html
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from pdkit.model.plan import ROLE_LABEL, Plan
from pdkit.render.observability import catalog as c
from pdkit.render.pod import PlainDumper

SCRAPE_INTERVAL = "30s"  # the managed collector's minimum
SCRAPE_TIMEOUT = "10s"


def meta_label(kubernetes_label: str) -> str:
    """Prometheus' discovery label for a pod label: every character outside [a-zA-Z0-9_] becomes '_'."""
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", kubernetes_label)


# The address inside the router's worker URL (smg: http://<pod IP>:<port>; https when TLS is on).
WORKER_URL_ADDRESS = r"https?://([^/]+)/?"


def config(plan: Plan) -> dict[str, Any]:
    namespace = plan.namespace
    discovery = [{"role": "pod", "namespaces": {"names": [namespace]}}]
    roles = "|".join(sorted(plan.roles))
    common = [
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": c.POD},
        {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": c.NODE},
    ]
    sglang = {
        "job_name": c.SGLANG_JOB,
        "metrics_path": c.METRICS_PATH,
        "kubernetes_sd_configs": discovery,
        "relabel_configs": [
            {"source_labels": [meta_label(ROLE_LABEL)], "regex": f"({roles})", "action": "keep"},
            # One target per pod: the port SGLang serves on (a pod lists several container ports).
            {"source_labels": ["__meta_kubernetes_pod_container_port_number"], "regex": str(c.SGLANG_PORT), "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Running", "action": "keep"},
            {"source_labels": [meta_label(ROLE_LABEL)], "target_label": c.ROLE},
            {"source_labels": [meta_label(c.LWS_GROUP_INDEX_LABEL)], "target_label": c.REPLICA},
            {"source_labels": [meta_label(c.LWS_WORKER_INDEX_LABEL)], "target_label": c.NODE_RANK},
            {"source_labels": ["__address__"], "target_label": c.ADDRESS},
            *common,
        ],
        # Pin one name form: `sglang_x` (underscore escaping) becomes `sglang:x` again.
        "metric_relabel_configs": [
            {
                "source_labels": ["__name__"],
                "regex": f"{c.SGLANG_ESCAPED_PREFIX}(.+)",
                "target_label": "__name__",
                "replacement": f"{c.SGLANG_PREFIX}$1",
            }
        ],
    }
    router = {
        "job_name": c.ROUTER_JOB,
        "metrics_path": c.METRICS_PATH,
        "kubernetes_sd_configs": discovery,
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_pod_container_port_number"], "regex": str(c.ROUTER_METRICS_PORT), "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Running", "action": "keep"},
            *common,
        ],
        "metric_relabel_configs": [
            {"source_labels": ["worker"], "regex": WORKER_URL_ADDRESS, "target_label": c.ADDRESS, "replacement": "$1"},
        ],
    }
    return {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": SCRAPE_TIMEOUT,
            "external_labels": {"cluster": plan.cluster_name},
        },
        "scrape_configs": [sglang, router],
    }


def render(plan: Plan) -> str:
    """The YAML the collector takes (base64-encoded by the stack)."""
    return yaml.dump(config(plan), Dumper=PlainDumper, sort_keys=False, default_flow_style=False)
