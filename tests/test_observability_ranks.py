"""Per-DP-rank load and expert balancedness: SGLang flags, catalog, figures, dashboard, alarm, status."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs

import pytest
from botocore.credentials import Credentials

from pdkit.cli import context
from pdkit.errors import ProfileError
from pdkit.functions import serving_metrics
from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.ops import status_metrics
from pdkit.render.observability import alarms, catalog, dashboards
from pdkit.render.observability.figures import FIGURES_BY_METRIC
from pdkit.render.serving.sglang_args import launch_argv

PLAN = context.load_plan(None)
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ARN = "arn:aws:cloudwatch:eu-south-2:111122223333:alarm:"
ROLES = ["prefill", "decode"]


# ---- SGLang flags ----


def opted_in(raw_with, *changes):
    """The default profile with decode's expert-balancedness report on (prefill, with pp 2, may not: test below)."""
    return plan_mod.build(profile_files.parse(raw_with("roles.decode.expert_balance_report", True, *changes)), profile_path="<t>")


def test_no_role_reports_expert_balancedness_by_default():
    """The recorder behind --expert-balancedness-report-mode ends every forward with torch.distributed.reduce on WORLD
    (sglang 0.5.23 srt/eplb/expert_distribution.py, _append_utilization_rate; the recorder starts itself when the mode is
    set, ExpertDistributionRecorder.__init__): a hang with prefill's PP2 (the PP scheduler's send waits on that forward,
    srt/managers/scheduler_pp_mixin.py) and a cross-node collective per decode step. So no role renders it by default."""
    for role, r in PLAN.roles.items():
        assert r.ep > 1
        assert "--expert-balancedness-report-mode" not in launch_argv(PLAN, role)


def test_a_role_that_opts_in_exports_expert_balancedness_to_prometheus(raw_with):
    """SGLang 0.5.23 creates `sglang:eplb_balancedness` only when --expert-balancedness-report-mode is
    prometheus or both (python/sglang/srt/observability/metrics_collector.py, SchedulerMetricsCollector;
    choices in conformance/help/sglang-0.5.23-launch_server.txt); the default `off` exports nothing."""
    plan = opted_in(raw_with)
    argv = launch_argv(plan, "decode")
    assert argv[argv.index("--expert-balancedness-report-mode") + 1] == "prometheus"
    assert "--expert-balancedness-report-mode" not in launch_argv(plan, "prefill")


def test_the_report_is_refused_with_pipeline_parallelism(raw_with):
    with pytest.raises(ProfileError) as info:
        plan_mod.build(profile_files.parse(raw_with("roles.prefill.expert_balance_report", True)), profile_path="<t>")
    assert info.value.field == "roles.prefill.expert_balance_report"
    assert "pipeline stages wait on each other at the first batch" in str(info.value)
    assert "runbooks/02-serve.md, Expert balance" in str(info.value)


def test_per_rank_series_need_no_all_schedulers_flag(raw_with):
    """SGLang 0.5.23 records scheduler metrics where attn_tp_rank == 0 and attn_cp_rank == 0
    (SchedulerMetricsCollector.init_new), i.e. once per attention-DP rank, labelled dp_rank. The
    all-schedulers flag would add prefill's 8 context-parallel ranks, which run the same requests,
    and multiply its running/queued figures 8-fold. The expert flag proves this test reads the argv."""
    plan = opted_in(raw_with)
    for role in plan.roles:
        assert "--enable-metrics-for-all-schedulers" not in launch_argv(plan, role)
    assert "--expert-balancedness-report-mode" in launch_argv(plan, "decode")


# ---- catalog and figures ----


def test_balancedness_and_dp_imbalance_are_catalogued_with_their_real_series():
    """`sglang:eplb_balancedness` is a prometheus_client Summary (no quantiles: only _sum and _count) and
    `sglang:dp_attention_token_imbalance_ratio` a Histogram (metrics_collector.py, SGLang 0.5.23)."""
    assert catalog.PROMETHEUS_BY_NAME["sglang:eplb_balancedness"].series == (
        "sglang:eplb_balancedness_sum",
        "sglang:eplb_balancedness_count",
    )
    assert catalog.PROMETHEUS_BY_NAME["sglang:dp_attention_token_imbalance_ratio"].kind == "histogram"


def test_balancedness_figure_is_the_window_mean_of_the_summary():
    figure = FIGURES_BY_METRIC["ExpertBalancedness"]
    assert figure.series == ("sglang:eplb_balancedness_sum", "sglang:eplb_balancedness_count")
    assert figure.promql.index("_sum") < figure.promql.index(" / ") < figure.promql.index("_count")


def test_per_rank_figures_group_by_role_replica_and_dp_rank():
    """SGLang's own label is `dp_rank` (SchedulerMetricsCollector.init_new adds it under attention DP)."""
    for name in ("RankRunningRequests", "RankQueuedRequests", "RankKvCacheUsage"):
        figure = FIGURES_BY_METRIC[name]
        assert figure.per_rank
        assert f"by ({catalog.ROLE}, {catalog.REPLICA}, {catalog.DP_RANK})" in figure.promql
        assert figure.dimensions == catalog.RANK_DIMS


# ---- the serving-metrics function, against the workspace's real answer shape ----


def _workspace(answers):
    """A query function over canned workspace answers, in the shape of AMP's QueryMetrics response: the
    Prometheus HTTP API envelope {"status": "success", "data": {"resultType": "vector", "result":
    [{"metric": {labels}, "value": [unix_time, "string value"]}]}}
    (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-APIReference-QueryMetrics.html,
    https://prometheus.io/docs/prometheus/latest/querying/api/#instant-vectors)."""

    def opener(request, timeout):
        (promql,) = parse_qs(request.data.decode())["query"]
        result = answers.get(promql, [])
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return io.BytesIO(json.dumps(body).encode())

    return serving_metrics.signed_query(
        "https://aps-workspaces.eu-south-2.amazonaws.com/workspaces/ws-1/", "eu-south-2", credentials=Credentials("A", "S"), opener=opener
    )


def test_function_publishes_expert_balancedness_per_role():
    figure = FIGURES_BY_METRIC["ExpertBalancedness"]
    answers = {figure.promql: [{"metric": {"role": "decode"}, "value": [1764590400.123, "0.4375"]}]}
    data, failed = serving_metrics.datums([figure], _workspace(answers), cluster="c", roles=ROLES)
    assert failed == []
    assert data == [
        {
            "MetricName": "ExpertBalancedness",
            "Dimensions": [{"Name": "ClusterName", "Value": "c"}, {"Name": "Role", "Value": "decode"}],
            "Value": 0.4375,
            "Unit": "None",
        }
    ]


def test_function_publishes_one_point_per_dp_rank():
    """Series without a dp_rank (no attention DP) cannot be placed on a rank and are skipped."""
    figure = FIGURES_BY_METRIC["RankRunningRequests"]
    answers = {
        figure.promql: [
            {"metric": {"role": "decode", "replica": "0", "dp_rank": "15"}, "value": [1764590400, "7"]},
            {"metric": {"role": "decode", "replica": "0", "dp_rank": "3"}, "value": [1764590400, "2"]},
            {"metric": {"role": "decode", "replica": "0"}, "value": [1764590400, "9"]},
        ]
    }
    data, _ = serving_metrics.datums([figure], _workspace(answers), cluster="c", roles=ROLES)
    assert [(d["Dimensions"], d["Value"]) for d in data] == [
        (
            [
                {"Name": "ClusterName", "Value": "c"},
                {"Name": "DpRank", "Value": rank},
                {"Name": "Replica", "Value": "0"},
                {"Name": "Role", "Value": "decode"},
            ],
            value,
        )
        for rank, value in (("15", 7.0), ("3", 2.0))
    ]


# ---- dashboard ----


def _serving_body(plan=PLAN):
    return dashboards.serving(plan, alarm_arn_prefix=ARN)


def test_serving_dashboard_shows_load_per_dp_rank_of_roles_with_attention_dp():
    text = json.dumps(_serving_body())
    dp_roles = [r.name for r in PLAN.roles.values() if r.attn_dp > 1]
    assert dp_roles == ["decode"]
    for metric in ("RankRunningRequests", "RankQueuedRequests", "RankKvCacheUsage"):
        assert f'{{{catalog.SERVING_NAMESPACE},{",".join(catalog.RANK_DIMS)}}} MetricName=\\"{metric}\\"' in text
    assert 'Role=\\"decode\\"' in text
    assert 'Role=\\"prefill\\"' not in text
    assert "DpTokenImbalance" in text


def test_serving_dashboard_shows_expert_balancedness_against_the_profile_floor(raw_with):
    plan = opted_in(raw_with, "observability.expert_balancedness_min", 0.625)
    (widget,) = [w for w in _serving_body(plan)["widgets"] if "Expert balancedness" in w.get("properties", {}).get("title", "")]
    assert {e[1] for e in widget["properties"]["metrics"]} == {"ExpertBalancedness"}
    assert 0.625 in [a["value"] for a in widget["properties"]["annotations"]["horizontal"]]


# ---- alarm and profile ----


def test_sustained_expert_imbalance_alarms_per_role_that_reports(raw_with):
    plan = opted_in(raw_with, "observability.expert_balancedness_min", 0.55)
    by_key = {a.key: a for a in alarms.alarms(plan)}
    assert "expert-imbalance-prefill" not in by_key
    for role in ("decode",):
        alarm = by_key[f"expert-imbalance-{role}"]
        assert alarm.comparison == "LessThanThreshold"
        assert alarm.threshold == 0.55
        assert alarm.evaluation_periods * alarm.period >= 15 * 60
        (query,) = alarm.queries
        assert (query.metric, dict(query.dimensions)["Role"]) == ("ExpertBalancedness", role)


@pytest.mark.parametrize("value", [0, 1, 1.5])
def test_balancedness_floor_outside_0_1_is_refused(raw_with, value):
    """Balancedness is mean/max per layer (SGLang 0.5.23 eplb/expert_distribution.py,
    compute_utilization_rate): 1 is perfect, so a floor of 1 or more alarms forever and 0 never.
    A floor inside (0, 1) is accepted and reaches the plan."""
    accepted = plan_mod.build(profile_files.parse(raw_with("observability.expert_balancedness_min", 0.7)), profile_path="<t>")
    assert accepted.alarms.expert_balancedness_min == 0.7
    with pytest.raises(ProfileError, match="expert_balancedness_min") as info:
        plan_mod.build(profile_files.parse(raw_with("observability.expert_balancedness_min", value)), profile_path="<t>")
    assert "\n" not in str(info.value).strip()


# ---- pdkit status ----


def _result(ident, value):
    return {"Id": ident, "Label": ident, "Timestamps": [NOW - timedelta(minutes=1)], "Values": [value], "StatusCode": "Complete"}


def test_status_shows_busiest_rank_dp_imbalance_and_expert_balancedness(raw_with):
    plan = plan_mod.build(
        profile_files.parse(
            raw_with(
                "roles.decode.expert_balance_report",
                True,
                "roles.prefill.parallelism.pp",
                1,
                "roles.prefill.parallelism.tp",
                16,
                "roles.prefill.parallelism.attn_cp",
                1,
                "roles.prefill.parallelism.attn_dp",
                16,
                "roles.prefill.expert_balance_report",
                True,
            )
        ),
        profile_path="<t>",
    )
    floor = plan.alarms.expert_balancedness_min
    results = [
        _result("busiest_rank_decode", 12),
        _result("dp_imbalance_decode", 1.8),
        _result("expert_balance_decode", floor / 2),
        _result("expert_balance_prefill", (1 + floor) / 2),
    ]
    by_item = {f.item: f for f in status_metrics.headline(plan, results)}
    assert by_item["decode busiest DP rank running requests"].value == 12
    assert by_item["decode DP load imbalance (max/mean tokens)"].state == "OK"
    assert by_item["decode expert balancedness"].state == "FAIL"
    assert f"limit {floor:g}" in by_item["decode expert balancedness"].detail
    assert by_item["prefill expert balancedness"].state == "OK"
