"""`pdkit bench --workload shared-prefix` and the prefix cache hit rate in `pdkit report` (item 3 of issue 16).

The records here are the sweep fixture plus the `cache_report` object SGLang 0.5.23's bench_serving writes
into each --output-file record when run with --cache-report (sglang/benchmark/serving.py:
`result["cache_report"] = {"total_prompt_tokens", "total_cached_tokens", "cache_hit_rate_pct", ...}`).
"""

from __future__ import annotations

import json
import re
import shlex

import pytest
import yaml

from pdkit.cli.main import main
from pdkit.ops.bench import report, results
from pdkit.ops.bench import run as bench_run
from pdkit.render import bench as manifests
from tests.conftest import plan_of
from tests.fixtures.fabric import fakes
from tests.fixtures.fabric.fakes import BENCH, Clock, FakeCluster, bench_pod_log, bench_record, sweep_copy

IMAGE = "registry.example/sglang-efa:v1"


@pytest.fixture(scope="module")
def plan():
    return plan_of("glm51-fp8-4p4d")


def _argv(plan, workload):
    objs = manifests.render(plan, image=IMAGE, run_id="r1", levels=(4,), deadline_s=600, workload=workload)
    script = objs[1]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    return next(shlex.split(line) for line in script.splitlines() if "sglang.bench_serving" in line)


def _opts(argv):
    return {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--") and not argv[i + 1].startswith("--")}


def test_shared_prefix_workload_uses_bench_servings_generated_shared_prefix_dataset(plan):
    """bench_serving 0.5.23's generated-shared-prefix dataset sends gsp_num_groups x gsp_prompts_per_group prompts,
    each group sharing a gsp_system_prompt_len-token system prompt (datasets/generated_shared_prefix.py); --cache-report
    makes it record the cached share of prompt tokens."""
    b = plan.bench
    opts = _opts(argv := _argv(plan, "shared-prefix"))
    assert opts["--dataset-name"] == "generated-shared-prefix"
    assert opts["--gsp-num-groups"] == str(b.shared_prefix.groups)
    assert int(opts["--gsp-num-groups"]) * int(opts["--gsp-prompts-per-group"]) == int(opts["--num-prompts"]) >= b.prompts_per_level
    assert opts["--gsp-system-prompt-len"] == str(b.shared_prefix.system_prompt_len)
    assert opts["--gsp-question-len"] == str(b.shared_prefix.question_len)
    assert opts["--gsp-output-len"] == str(b.output_len)
    assert "--cache-report" in argv
    assert "--random-input-len" not in argv
    assert "--pd-separated" in argv


def test_shared_prefix_flags_are_ones_sglang_0_5_23_accepts(plan):
    """Checked against the real `--help` of bench_serving 0.5.23 (tests/fixtures/bench/bench_serving_help.txt)."""
    help_text = (BENCH / "bench_serving_help.txt").read_text()
    known = set(re.findall(r"--[a-z][a-z0-9-]*", help_text))
    flags = {a for a in _argv(plan, "shared-prefix") if a.startswith("--")}
    assert flags <= known, flags - known
    assert "generated-shared-prefix" in help_text


def test_cli_renders_the_shared_prefix_workload(capsys):
    registry = "123456789012.dkr.ecr.eu-south-2.amazonaws.com"
    assert main(["bench", "--render", "--concurrency", "2", "--workload", "shared-prefix", "--registry", registry]) == 0
    script = list(yaml.safe_load_all(capsys.readouterr().out))[1]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "--dataset-name generated-shared-prefix" in script


def test_run_json_records_the_workload_and_the_routers_policies(plan, tmp_path):
    """`pdkit report --compare` labels a cache-aware vs round-robin A/B from each run's own run.json."""
    cluster = FakeCluster(logs={"bench": {0: bench_pod_log()}})
    bench_run.run(
        plan, cluster, image=IMAGE, out_dir=tmp_path, levels=(1, 4), waiting=fakes.waiting(Clock()), run_id="r1", workload="shared-prefix"
    )
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["workload"] == "shared-prefix"
    assert meta["router_policies"] == {"prefill": "cache_aware", "decode": "power_of_two", "dp_aware": True}
    assert "generated-shared-prefix" in meta["command"]
    assert meta["input_len"] == plan.bench.shared_prefix.system_prompt_len + plan.bench.shared_prefix.question_len


def test_random_lengths_of_a_shared_prefix_record_are_not_read_as_its_lengths():
    """bench_serving 0.5.23 writes `random_input_len: args.random_input_len` (default 1024) into every record,
    whatever the dataset (sglang/benchmark/serving.py): for generated-shared-prefix it is not the prompt length."""
    record = bench_record(1) | {"dataset_name": "generated-shared-prefix"}
    level = results.from_record(record)
    assert (level.input_len, level.output_len, level.range_ratio) == (None, None, None)
    assert results.from_record(record | {"dataset_name": "random"}).input_len == record["random_input_len"]


def _with_cache_report(tmp_path, name, hit_pct, *, prefill_policy, ttft_scale=1.0):
    """The sweep fixture with bench_serving's cache_report object per record, and the router policies in run.json."""

    def edit(record):
        prompt = int(record["total_input_tokens"])
        cached = int(prompt * hit_pct / 100)
        record["cache_report"] = {
            "total_prompt_tokens": prompt,
            "total_cached_tokens": cached,
            "cache_hit_rate_pct": round(cached / prompt * 100, 2),
            "device_cached_tokens": None,
            "host_cached_tokens": None,
            "storage_cached_tokens": None,
            "storage_backend": None,
        }
        for key in ("mean_ttft_ms", "p99_ttft_ms"):
            record[key] *= ttft_scale

    policies = {"prefill": prefill_policy, "decode": "power_of_two", "dp_aware": True}
    return sweep_copy(tmp_path / name, meta={"router_policies": policies}, edit=edit)


def test_cache_hit_rate_is_read_from_the_records_cache_report(tmp_path):
    run = _with_cache_report(tmp_path, "a", 62.5, prefill_policy="cache_aware")
    levels = results.load_dir(run).levels
    assert levels
    assert all(lv.get(results.CACHE_HIT_METRIC) == pytest.approx(62.5, abs=0.01) for lv in levels)
    line = report.cache_hit_line(levels)
    assert len(line) == 1
    assert "c=4 62.5%" in line[0]


def test_a_run_without_cache_report_has_no_cache_hit_line():
    """The random workload does not pass --cache-report, so its records carry no cache_report: nothing is invented."""
    levels = results.load_dir(BENCH / "sweep").levels
    assert report.cache_hit_line(levels) == []


def test_report_states_the_cache_hit_rate(capsys, tmp_path):
    run = _with_cache_report(tmp_path, "a", 62.5, prefill_policy="cache_aware")
    assert main(["report", "--bench", str(run), "--out", str(tmp_path / "r")]) == 0
    text = next((tmp_path / "r").glob("*.md")).read_text()
    assert "Prefix cache hit rate" in text
    assert "c=4 62.5%" in text


def test_compare_sets_cache_aware_against_round_robin(capsys, tmp_path):
    """The A/B of item 3: the same shared-prefix workload through a round-robin and a cache-aware prefill policy,
    labelled from each run.json, with the cache hit rate and TTFT side by side."""
    a = _with_cache_report(tmp_path, "rr", 12.5, prefill_policy="round_robin")
    b = _with_cache_report(tmp_path, "ca", 62.5, prefill_policy="cache_aware", ttft_scale=0.5)
    assert main(["report", "--bench", str(a), "--compare", str(b), "--out", str(tmp_path / "r")]) == 0
    text = (tmp_path / "r" / report.COMPARE_REPORT).read_text()
    assert "router prefill round_robin, decode power_of_two, dp-aware)" in text
    assert "router prefill cache_aware, decode power_of_two, dp-aware)" in text
    assert "| c=4 | prefix cache hit rate (%) | 12.5 | 62.5 | +400% (B better) |" in text
    assert re.search(r"\| c=4 \| mean TTFT \(ms\) \| \d+ \| \d+ \| -50% \(B better\) \|", text)
