"""bench_serving's JSONL and printed summary are read as SGLang 0.5.23 writes them (fixtures: SYNTHETIC)."""

from __future__ import annotations

import json
import shutil

import pytest

from pdkit.errors import KitError
from pdkit.ops.bench import results
from pdkit.pods import bench_compact as compact
from tests.fixtures.fabric.fakes import BENCH, bench_record


def test_record_metrics_and_max_itl_from_the_per_request_itls():
    """The JSONL has no max ITL field: it comes from the --output-details itls (seconds -> ms)."""
    rec = bench_record(64)
    level = results.from_record(rec)
    assert level.concurrency == 64
    assert level.completed == 16
    assert level.prompts == 16
    assert level.metrics["mean_tpot_ms"] == pytest.approx(rec["mean_tpot_ms"])
    assert level.metrics["p99_itl_ms"] == pytest.approx(rec["p99_itl_ms"])
    assert len(level.itls_ms) == 16 * 31
    assert level.max_itl_ms == pytest.approx(95.3)
    assert (level.input_len, level.output_len, level.range_ratio) == (2048, 32, 1.0)


def test_max_itl_matches_the_printed_summary():
    """The two formats agree: the JSONL's itls give the same max as the summary's 'Max ITL (ms)'."""
    blocks = results.parse_summaries((BENCH / "sweep" / "bench.log").read_text())
    printed = {int(b["max_request_concurrency"]): b["max_itl_ms"] for b in blocks}
    for c in (1, 4, 16, 64):
        assert results.from_record(bench_record(c)).max_itl_ms == pytest.approx(printed[c], abs=0.01)


def test_summary_keys():
    block = results.parse_summaries((BENCH / "sweep" / "bench.log").read_text())[0]
    assert block["backend"] == "sglang"
    assert block["successful_requests"] == 16
    for key in ("mean_ttft_ms", "p99_tpot_ms", "median_itl_ms", "max_itl_ms", "mean_e2e_latency_ms", "output_token_throughput"):
        assert isinstance(block[key], float), key


def test_record_without_the_fields_is_refused():
    with pytest.raises(KitError, match="not bench_serving output"):
        results.from_record({"hello": 1}, "x.jsonl:1")


def test_failed_requests_are_kept():
    rec = bench_record(4)
    rec["errors"] = ["", "HTTP 503: no decode worker"]
    assert results.from_record(rec).errors == ("HTTP 503: no decode worker",)


def test_load_dir_sorts_levels_and_reads_failures(tmp_path):
    shutil.copytree(BENCH / "sweep", tmp_path / "s")
    (tmp_path / "s" / "failed.json").write_text('{"128": "bench_serving exited 1: boom"}')
    sweep = results.load_dir(tmp_path / "s")
    assert [lv.concurrency for lv in sweep.levels] == [1, 4, 16, 64]
    assert sweep.failed == {128: "bench_serving exited 1: boom"}
    assert sweep.level(16) is not None
    assert sweep.level(16).itls_ms


def test_load_dir_last_record_per_level_wins(tmp_path):
    first, second = bench_record(4), bench_record(4)
    second["mean_tpot_ms"] = 99.0
    (tmp_path / "a.jsonl").write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    assert results.load_dir(tmp_path).level(4).get("mean_tpot_ms") == 99.0


def test_load_dir_from_printed_summaries_only():
    sweep = results.load_dir(BENCH / "summary-only")
    assert [lv.concurrency for lv in sweep.levels] == [1, 4, 16, 64]
    assert all(lv.itls_ms == () for lv in sweep.levels)
    assert sweep.level(64).max_itl_ms == pytest.approx(95.3, abs=0.01)
    assert sweep.level(1).get("mean_tpot_ms") is not None


def test_summary_fills_max_itl_when_jsonl_has_no_details(tmp_path):
    rec = bench_record(64)
    for key in ("itls", "ttfts", "generated_texts", "errors", "input_lens", "output_lens"):
        rec.pop(key)
    (tmp_path / "c64.jsonl").write_text(json.dumps(rec) + "\n")
    shutil.copy(BENCH / "sweep" / "bench.log", tmp_path / "bench.log")
    level = results.load_dir(tmp_path).level(64)
    assert level.itls_ms == ()
    assert level.max_itl_ms == pytest.approx(95.3, abs=0.01)


def test_load_dir_errors(tmp_path):
    with pytest.raises(KitError, match="is not a directory"):
        results.load_dir(tmp_path / "missing")
    with pytest.raises(KitError, match="no bench_serving results"):
        results.load_dir(tmp_path)
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    with pytest.raises(KitError, match=r"Skipped: bad\.jsonl:1: not JSON"):
        results.load_dir(tmp_path)


def test_compact_block_round_trip_drops_texts_and_keeps_latencies():
    rec = bench_record(16)
    text = "noise\n" + compact.encode_block([rec], 16, 0) + "\nmore noise\n"
    blocks = compact.decode_blocks(text)
    status, records = blocks[16]
    assert status == 0
    assert "generated_texts" not in records[0]
    assert records[0]["itls"][0][0] == pytest.approx(rec["itls"][0][0], abs=1e-6)
    assert records[0]["mean_tpot_ms"] == rec["mean_tpot_ms"]
    assert results.levels_from_log(text)[16][1][0].concurrency == 16


def test_compact_failed_level_and_incomplete_block():
    text = compact.encode_block([], 4, 1) + "\n" + compact.encode_block([bench_record(1)], 1, 0).rsplit("\n", 1)[0]
    blocks = compact.decode_blocks(text)
    assert blocks == {4: (1, [])}  # the second block has no end marker yet


def test_compact_main_reads_the_results_file(tmp_path, capsys):
    path = tmp_path / "bench-c4.jsonl"
    path.write_text(json.dumps(bench_record(4)) + "\n")
    assert compact.main([str(path), "4", "0"]) == 0
    assert compact.decode_blocks(capsys.readouterr().out)[4][1][0]["max_concurrency"] == 4
    assert compact.main([str(tmp_path / "missing.jsonl"), "8", "2"]) == 0
    assert compact.decode_blocks(capsys.readouterr().out) == {8: (2, [])}
    assert compact.main(["only-one"]) == 2
