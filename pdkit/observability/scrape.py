"""The managed collector's scrape configuration, rendered from the plan.

Two jobs, both by Kubernetes pod discovery in the serving namespace:
- `sglang`: every pod labelled pdkit/role=<prefill|decode>, on SGLang's HTTP port. Leaders serve the
  tokenizer histograms (TTFT, ITL, e2e); workers answer /metrics too (SGLang's health server on the
  other node ranks), so a missing rank shows as `up == 0` rather than as silence.
- `router`: every pod exposing the router's Prometheus port.

Labels: `role`, `replica` (LeaderWorkerSet group index), `node_rank` (LWS worker index), `pod`,
`node`. Router series about a worker (`worker="http://<lws>-<replica>.<lws>.<ns>.svc:<port>"`) get
`role` and `replica` from that URL, so the router's view and SGLang's own series line up.

Managed-collector limits honoured here (AMP user guide, "Scraper configuration"): only
kubernetes_sd_configs, interval >= 30 s, no DNS names other than the API server.
https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-collector-how-to.html
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from pdkit.observability import catalog as c
from pdkit.plan import ROLE_LABEL, Plan

SCRAPE_INTERVAL = "30s"  # the managed collector's minimum
SCRAPE_TIMEOUT = "10s"


def meta_label(kubernetes_label: str) -> str:
    """Prometheus' discovery label for a pod label: every character outside [a-zA-Z0-9_] becomes '_'."""
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", kubernetes_label)


def worker_url_regex(plan: Plan) -> str:
    """Matches the router's worker URLs (pdkit/serving: http://<name>-<role>-<i>.<name>-<role>.<ns>.svc:<port>)."""
    roles = "|".join(sorted(plan.roles))
    name = re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", plan.name)  # RE2 and Python agree on these escapes
    return rf"https?://{name}-({roles})-([0-9]+)\..*"


def config(plan: Plan) -> dict[str, Any]:
    namespace = plan.profile.serving.namespace
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
            {"source_labels": ["worker"], "regex": worker_url_regex(plan), "target_label": c.ROLE, "replacement": "$1"},
            {"source_labels": ["worker"], "regex": worker_url_regex(plan), "target_label": c.REPLICA, "replacement": "$2"},
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


class _PlainDumper(yaml.SafeDumper):
    """No YAML anchors/aliases for repeated blocks: every job reads on its own."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(plan: Plan) -> str:
    """The YAML the collector takes (base64-encoded by the stack)."""
    return yaml.dump(config(plan), Dumper=_PlainDumper, sort_keys=False, default_flow_style=False)
