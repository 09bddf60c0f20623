"""What the kit collects, and that every panel, alarm and figure names only that.

A dashboard panel or alarm on a metric nobody collects shows "no data" forever and never pages;
these tests parse every rendered panel, alarm and status query and check each metric (and its
dimension set) against pdkit/render/observability/catalog.py.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.model.plan import ROLE_LABEL
from pdkit.ops import status_metrics
from pdkit.render.observability import alarms, catalog, dashboards, figures, scrape
from tests.conftest import plan_of

PLAN = plan_of()
ARN = "arn:aws:cloudwatch:eu-south-2:111122223333:alarm:"
SEARCH = re.compile(r"""SEARCH\('\{([^}]*)\} MetricName="([^"]+)"(.*?)',""")
INSIGHTS = re.compile(r'SELECT (\w+)\((\w+)\) FROM SCHEMA\("([^"]+)", ([^)]*)\)')


# ---- checkers (each with a test that it fires) ----


def _cloudwatch_problem(namespace: str, name: str, dims: list[str]) -> str | None:
    known = figures.cloudwatch_metrics().get((namespace, name))
    if known is None:
        return f"{namespace}/{name} is not collected"
    if not known.has_dimensions(dims):
        return f"{namespace}/{name} has no dimension set {sorted(dims)} (collected: {known.dimension_sets})"
    return None


def _dashboard_problems(body: dict[str, Any]) -> list[str]:
    problems = []
    for widget in body["widgets"]:
        for entry in widget.get("properties", {}).get("metrics", []):
            if isinstance(entry, list):
                plain = [x for x in entry if not isinstance(x, dict)]
                problems.append(_cloudwatch_problem(plain[0], plain[1], plain[2::2]))
            elif entry.get("expression", "").startswith("SEARCH("):
                found = SEARCH.match(entry["expression"])
                if not found:
                    problems.append(f"unparsed SEARCH {entry['expression']}")
                    continue
                namespace, *dims = found.group(1).split(",")
                problems.append(_cloudwatch_problem(namespace, found.group(2), dims))
            else:
                problems.append(f"unchecked expression {entry}")
    return [p for p in problems if p]


def _alarm_problems(alarm: alarms.Alarm) -> list[str]:
    problems = []
    for q in alarm.queries:
        if q.metric is not None:
            assert q.namespace is not None
            problems.append(_cloudwatch_problem(q.namespace, q.metric, [k for k, _ in q.dimensions]))
        elif q.expression and q.expression.startswith("SELECT"):
            found = INSIGHTS.match(q.expression)
            if not found:
                problems.append(f"unparsed Metrics Insights query {q.expression}")
                continue
            dims = [d.strip() for d in found.group(4).split(",")]
            problems.append(_cloudwatch_problem(found.group(3), found.group(2), dims))
    return [p for p in problems if p]


def test_checkers_fire_on_uncollected_metrics_and_wrong_dimensions():
    """The harness is live: a made-up metric, a made-up dimension and an unknown SEARCH are reported."""
    bad = {
        "widgets": [
            {"properties": {"metrics": [["ContainerInsights", "node_gpu_bogus", "ClusterName", "x"]]}},
            {"properties": {"metrics": [["ContainerInsights", "node_gpu_utilization", "PodName", "x"]]}},
            {"properties": {"metrics": [{"expression": "SEARCH('{ContainerInsights,ClusterName} MetricName=\"nope\"', 'Average', 60)"}]}},
        ]
    }
    assert len(_dashboard_problems(bad)) == 3
    wrong = alarms.Alarm(
        "x",
        "x",
        "serving",
        "s",
        "f",
        (alarms.Query("q", expression='SELECT MIN(nope) FROM SCHEMA("ContainerInsights", ClusterName)'),),
        "LessThanThreshold",
        1,
        1,
    )
    assert _alarm_problems(wrong) == ["ContainerInsights/nope is not collected"]


# ---- the catalog itself ----


def test_one_sglang_name_form_everywhere():
    """Dashboards written for `sglang_` would be empty if the store holds `sglang:` (and vice versa)."""
    sglang = [m for m in catalog.PROMETHEUS if m.source == "sglang"]
    assert sglang
    assert all(m.name.startswith(catalog.SGLANG_PREFIX) for m in sglang)
    for figure in figures.FIGURES:
        assert catalog.SGLANG_ESCAPED_PREFIX not in figure.promql


def test_every_figure_reads_only_collected_series():
    for figure in figures.FIGURES:
        assert figure.series, figure.metric
        unknown = [s for s in figure.series if s not in catalog.PROMETHEUS_SERIES]
        assert unknown == [], f"{figure.metric} reads {unknown}"


def test_histogram_quantiles_read_buckets_of_histograms():
    """histogram_quantile over a counter or a gauge is silently wrong."""
    for figure in figures.FIGURES:
        if "histogram_quantile" in figure.promql:
            (series,) = figure.series
            assert series.endswith("_bucket")
            assert catalog.PROMETHEUS_BY_NAME[series.removesuffix("_bucket")].kind == "histogram"


def test_series_parser_sees_every_metric_in_a_query():
    f = figures.Figure("X", 'sum(rate(sglang:a_total{job="sglang"}[5m])) / sum(up{job="router"})', "None", False, "x")
    assert f.series == ("sglang:a_total", "up")


def test_by_role_figures_group_by_role():
    for figure in figures.FIGURES:
        assert (f"by ({catalog.ROLE}" in figure.promql) == figure.by_role, figure.metric


# ---- scrape configuration ----


def _scrape() -> dict[str, Any]:
    return yaml.safe_load(scrape.render(PLAN))


def _job(name: str) -> dict[str, Any]:
    return next(j for j in _scrape()["scrape_configs"] if j["job_name"] == name)


def _prometheus_replace(rule: dict[str, Any], value: str) -> str | None:
    """Prometheus relabel `replace` semantics: the regex is anchored; $1 expands from it."""
    found = re.fullmatch(rule["regex"], value)
    return found.expand(rule["replacement"].replace("$", "\\")) if found else None


def test_scrape_configuration_stays_inside_the_managed_collector_limits():
    config = _scrape()
    assert int(config["global"]["scrape_interval"].rstrip("s")) >= 30
    for job in config["scrape_configs"]:
        sd = [k for k in job if k.endswith("_sd_configs") or k == "static_configs"]
        assert sd == ["kubernetes_sd_configs"], job["job_name"]
        assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == [PLAN.namespace]


def test_sglang_job_keeps_only_role_pods_on_the_sglang_port():
    rules = _job(catalog.SGLANG_JOB)["relabel_configs"]
    keep_role = next(r for r in rules if r.get("action") == "keep" and r["source_labels"] == [scrape.meta_label(ROLE_LABEL)])
    assert all(re.fullmatch(keep_role["regex"], role) for role in PLAN.roles)
    assert not re.fullmatch(keep_role["regex"], "router")
    keep_port = next(r for r in rules if r["source_labels"] == ["__meta_kubernetes_pod_container_port_number"])
    assert keep_port["regex"] == str(catalog.SGLANG_PORT)


def test_role_replica_and_rank_labels_come_from_the_pod_labels():
    targets = {r["target_label"]: r["source_labels"] for r in _job(catalog.SGLANG_JOB)["relabel_configs"] if "target_label" in r}
    assert targets[catalog.ROLE] == ["__meta_kubernetes_pod_label_pdkit_role"]
    assert targets[catalog.REPLICA] == ["__meta_kubernetes_pod_label_leaderworkerset_sigs_k8s_io_group_index"]
    assert targets[catalog.NODE_RANK] == ["__meta_kubernetes_pod_label_leaderworkerset_sigs_k8s_io_worker_index"]


def test_escaped_sglang_names_are_relabelled_to_the_pinned_form():
    (rule,) = _job(catalog.SGLANG_JOB)["metric_relabel_configs"]
    assert rule["source_labels"] == ["__name__"]
    assert rule["target_label"] == "__name__"
    assert _prometheus_replace(rule, "sglang_time_to_first_token_seconds_bucket") == "sglang:time_to_first_token_seconds_bucket"
    assert _prometheus_replace(rule, "sglang:num_running_reqs") is None  # already pinned: untouched


def test_router_series_carry_the_address_of_the_worker_they_describe():
    """smg's Kubernetes discovery registers each pod as http://<pod IP>:<port> (service_discovery.rs,
    PodInfo::worker_url), the URL its worker series carry; that host:port is the SGLang target's address."""
    (rule,) = _job(catalog.ROUTER_JOB)["metric_relabel_configs"]
    assert (rule["source_labels"], rule["target_label"]) == (["worker"], catalog.ADDRESS)
    assert _prometheus_replace(rule, f"http://10.1.2.3:{catalog.SGLANG_PORT}") == f"10.1.2.3:{catalog.SGLANG_PORT}"
    sglang = {r["target_label"]: r["source_labels"] for r in _job(catalog.SGLANG_JOB)["relabel_configs"] if "target_label" in r}
    assert sglang[catalog.ADDRESS] == ["__address__"]


def test_healthy_workers_get_role_and_replica_from_the_sglang_pod_at_that_address():
    promql = figures.FIGURES_BY_METRIC["HealthyWorkers"].promql
    assert f"on ({catalog.ADDRESS}) group_left ({catalog.ROLE}, {catalog.REPLICA})" in promql
    assert figures.FIGURES_BY_METRIC["HealthyWorkers"].series == ("smg_worker_health", "up")


def test_scrape_names_agree_with_the_serving_manifests():
    """Coordinated by value with pdkit/render/serving: the ports the pods and the router's discovery use."""
    sglang_args = pytest.importorskip("pdkit.render.serving.sglang_args")
    router_args = pytest.importorskip("pdkit.render.serving.router_args")
    assert sglang_args.SGLANG_PORT == catalog.SGLANG_PORT
    assert router_args.ROUTER_METRICS_PORT == catalog.ROUTER_METRICS_PORT
    argv = router_args.router_argv(PLAN)
    assert argv[argv.index("--service-discovery-port") + 1] == str(catalog.SGLANG_PORT)


# ---- dashboards ----


def _bodies(plan: plan_mod.Plan = PLAN) -> dict[str, dict[str, Any]]:
    return {
        "serving": dashboards.serving(plan, alarm_arn_prefix=ARN),
        "infrastructure": dashboards.infrastructure(plan, alarm_arn_prefix=ARN),
    }


@pytest.mark.parametrize("profile", profile_files.available_profiles())
def test_every_dashboard_and_alarm_metric_is_collected(profile):
    """Every shipped profile: a panel or alarm on an uncollected metric shows "no data" forever and never pages."""
    plan = plan_of(profile)
    for kind, body in _bodies(plan).items():
        assert _dashboard_problems(body) == [], kind
    for alarm in alarms.alarms(plan):
        assert _alarm_problems(alarm) == [], alarm.key


def test_serving_dashboard_has_the_seed_figures_per_role():
    names = {e[1] for w in _bodies()["serving"]["widgets"] for e in w.get("properties", {}).get("metrics", []) if isinstance(e, list)}
    for figure in ("TtftP99Ms", "TtftP50Ms", "TpotP99Ms", "TpotP50Ms", "OutputTokensPerSecond", "RequestsPerSecond", "RunningRequests"):
        assert figure in names
    for figure in ("QueuedRequests", "KvTransferP99Ms", "KvTransferFailuresPerMinute", "HealthyWorkers", "RouterErrorRatio"):
        assert figure in names
    roles = {
        e[5]
        for w in _bodies()["serving"]["widgets"]
        for e in w.get("properties", {}).get("metrics", [])
        if isinstance(e, list) and "Role" in e
    }
    assert roles == set(PLAN.roles)


def test_serving_dashboard_says_max_itl_is_not_from_histograms():
    text = " ".join(w["properties"]["markdown"] for w in _bodies()["serving"]["widgets"] if w["type"] == "text")
    assert "Max ITL" in text
    assert "benchmark report" in text


def test_infrastructure_dashboard_covers_gpus_efa_readiness_and_the_block():
    body = str(_bodies()["infrastructure"])
    for metric in ("node_gpu_utilization", "node_gpu_memory_used", "node_efa_rx_bytes", "node_efa_tx_bytes", "node_efa_rx_dropped"):
        assert f'MetricName=\\"{metric}\\"' in body or f'MetricName="{metric}"' in body
    for metric in ("node_status_condition_ready", "pod_status_ready", catalog.BLOCK_MINUTES_LEFT):
        assert metric in body


def test_dashboard_annotations_follow_the_profile(raw_with):
    plan = plan_mod.build(
        profile_files.parse(raw_with("observability.tpot_p99_ms", 23.5, "observability.ttft_p99_ms", 4321)), profile_path="<t>"
    )
    hlines = [
        a["value"]
        for w in _bodies(plan)["serving"]["widgets"]
        for a in w.get("properties", {}).get("annotations", {}).get("horizontal", [])
    ]
    assert 23.5 in hlines
    assert 4321 in hlines


def test_dashboard_panels_fit_the_grid():
    for body in _bodies().values():
        for w in body["widgets"]:
            assert w["x"] >= 0
            assert w["x"] + w["width"] <= 24


# ---- alarms ----


def test_every_status_figure_is_collected():
    for q in status_metrics.queries(PLAN):
        m = q["MetricStat"]["Metric"]
        assert _cloudwatch_problem(m["Namespace"], m["MetricName"], [d["Name"] for d in m["Dimensions"]]) is None


def test_alarm_set_covers_the_issue():
    keys = {a.key for a in alarms.alarms(PLAN)}
    expected = {"node-not-ready", "gpus-missing", "efa-devices-missing", "efa-drops", "router-errors", "tpot-p99", "block-ending"}
    assert expected <= keys
    assert {f"no-healthy-{r}" for r in PLAN.roles} <= keys


def test_alarm_thresholds_come_from_the_plan():
    by_key = {a.key: a for a in alarms.alarms(PLAN)}
    assert by_key["tpot-p99"].threshold == PLAN.alarms.tpot_p99_ms
    assert by_key["ttft-p99"].threshold == PLAN.alarms.ttft_p99_ms
    assert by_key["block-ending"].threshold == PLAN.drain_lead_minutes
    assert by_key["gpus-missing"].threshold == PLAN.instance.gpus
    assert by_key["efa-devices-missing"].threshold == PLAN.efa_devices_per_node


def test_serving_availability_alarms_wait_out_start_up_and_stop_before_the_drain():
    """Outside a block, during model load and while draining, no healthy replicas is expected, not a page."""
    gate = next(a for a in alarms.alarms(PLAN) if a.key == "no-healthy-decode").queries[-1].expression
    assert gate is not None
    assert f"elapsed > {alarms.serving_grace_minutes(PLAN)}" in gate
    assert f"left > {PLAN.drain_lead_minutes}" in gate
    assert alarms.serving_grace_minutes(PLAN) > PLAN.estimates.startup_budget_minutes


def test_alarm_names_and_descriptions_point_at_the_runbook():
    runbook = (profile_files.ROOT / alarms.RUNBOOK).read_text()
    for alarm in alarms.alarms(PLAN):
        assert alarm.name.startswith(PLAN.name)
        assert len(alarm.description) <= 1024  # CloudWatch's limit
        assert f"### {alarm.key}" in runbook, f"runbook has no section for {alarm.key}"
