"""bench_serving output as operators have it from the field: every record and summary layout since 0.4.

Fixtures in tests/fixtures/bench/field/ are BUILT FROM SOURCE (invented numbers in the tools' own layouts,
see the README there). Each test fails on the parser before issue 18.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pdkit.cli.main import main
from pdkit.ops.bench import results, workload
from tests.fixtures.fabric.fakes import BENCH

FIELD = BENCH / "field"


def _dir(tmp_path: Path, *names: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(FIELD / name, tmp_path / name)
    return tmp_path


def test_rate_sweep_without_concurrency_keeps_every_rate(tmp_path):
    """A request-rate sweep with `max_concurrency: null` (the record printed in sgl-project/sglang#9585, limit
    not given) keeps one level per rate; before, all collapsed to concurrency 0 and only the last survived."""
    sweep = results.load_dir(_dir(tmp_path, "sglang-rate-sweep.jsonl"))
    assert [(lv.request_rate, lv.concurrency) for lv in sweep.levels] == [(1.0, None), (2.0, None), (4.0, None)]
    assert [lv.get("mean_tpot_ms") for lv in sweep.levels] == [18.25, 19.5, 22.0]
    assert [lv.label for lv in sweep.levels] == ["rate 1/s", "rate 2/s", "rate 4/s"]
    assert sweep.warnings == []
    assert sweep.skipped == []


def test_observed_peak_is_not_the_level():
    """`max_concurrent_requests` (newer SGLang: the observed peak in flight) must not become the level key."""
    record = json.loads((FIELD / "sglang-rate-sweep.jsonl").read_text().splitlines()[0])
    record["max_concurrent_requests"] = 7
    assert results.from_record(record).concurrency is None


def test_early_median_only_record_is_accepted():
    """The early record layout (sgl-project/sglang benchmark/lora/lora_bench.py: median TTFT/ITL, no
    max_concurrency, no TPOT) carries the latency figures, so it is read, not refused."""
    record = json.loads((FIELD / "sglang-early-median-only.jsonl").read_text())
    level = results.from_record(record, "early")
    assert level.request_rate == 8.0
    assert level.concurrency is None
    assert level.get("median_ttft_ms") == 210.5
    assert level.get("median_itl_ms") == 23.5
    assert level.get("mean_tpot_ms") is None
    assert level.completed == 50


def test_zero_ttft_itl_is_kept_with_a_warning(tmp_path):
    """sgl-project/sglang#9585 / #12389: TTFT and ITL print 0.0 although requests completed; the level is
    reported with a warning that names the bug, not as a clean result."""
    sweep = results.load_dir(_dir(tmp_path, "zero-ttft-itl.jsonl"))
    assert [lv.concurrency for lv in sweep.levels] == [1]
    assert len(sweep.warnings) == 1
    assert "mean_ttft_ms = 0" in sweep.warnings[0]
    assert "mean_itl_ms = 0" in sweep.warnings[0]
    assert "sglang/issues/9585" in sweep.warnings[0]


def test_unreadable_file_is_skipped_and_named(tmp_path):
    """One truncated JSONL does not abort the directory: it is skipped with its name and reason."""
    sweep = results.load_dir(_dir(tmp_path, "truncated.jsonl", "sglang-rate-sweep.jsonl"))
    assert len(sweep.levels) == 3
    assert len(sweep.skipped) == 1
    assert sweep.skipped[0].startswith("truncated.jsonl:1: not JSON")


def test_summaries_without_concurrency_line_are_kept(tmp_path):
    """Older summaries print no 'Max request concurrency' line (lora_bench.py's print layout), newer ones
    print 'not set'; both are levels keyed by the traffic rate, not dropped."""
    sweep = results.load_dir(_dir(tmp_path, "sglang-old-summary.log", "sglang-not-set.log"))
    assert [(lv.request_rate, lv.concurrency) for lv in sweep.levels] == [(2.0, None), (4.0, None), (8.0, None)]
    assert [lv.get("mean_tpot_ms") for lv in sweep.levels] == [19.5, 22.0, 24.5]
    assert sweep.levels[2].get("p99_itl_ms") == pytest.approx(51.98)


def test_two_server_configurations_in_one_log_are_not_silent(tmp_path):
    """Two blocks at the same (rate, concurrency) with different figures: the report says so."""
    sweep = results.load_dir(_dir(tmp_path, "two-servers.log"))
    assert [lv.get("mean_tpot_ms") for lv in sweep.levels] == [33.25]
    assert len(sweep.warnings) == 1
    assert "c=32 appears twice" in sweep.warnings[0]
    assert "two server configurations" in sweep.warnings[0]


def test_workload_line_comes_from_the_records(tmp_path):
    """request_rate, input/output lengths and dataset in the records reach the report's workload line."""
    sweep = results.load_dir(_dir(tmp_path, "sglang-rate-sweep.jsonl"))
    line = workload.from_run(sweep, None).line()
    assert line.startswith("random dataset, input 1024 / output 256 tokens (range ratio 0.5)")
    assert "concurrency not set, request rate 1/s, 2/s, 4/s" in line


def test_pdkit_report_on_a_mixed_directory(capsys, tmp_path):
    """Acceptance of issue 18: a directory mixing a 0.4-style rate sweep (JSONL), old printed summaries, the
    zero-TTFT bug record and a truncated file gives a report whose workload line comes from the records and
    which lists what it skipped and why (stderr says the same)."""

    src = _dir(tmp_path / "in", "sglang-rate-sweep.jsonl", "zero-ttft-itl.jsonl", "truncated.jsonl", "sglang-not-set.log")
    assert main(["report", "--bench", str(src), "--out", str(tmp_path / "r")]) == 0
    text = (tmp_path / "r" / "report.md").read_text()
    workload_line = next(line for line in text.splitlines() if line.startswith("- Workload"))
    assert "random dataset, input 1024 / output 256 tokens (range ratio 0.5)" in workload_line
    assert "concurrency 1, not set, request rate 1/s, 2/s, 4/s, 8/s, all at once" in workload_line
    assert "- Skipped truncated.jsonl:1: not JSON" in text
    assert "impossible values mean_ttft_ms = 0" in text
    assert "| rate 1/s | rate 2/s | rate 4/s | rate 8/s | c=1 |" in text
    assert "pdkit: skipped truncated.jsonl:1: not JSON" in capsys.readouterr().err
