"""`pdkit report` works offline on saved files: Markdown with the seed comparison and the latency model, PNG plots."""

from __future__ import annotations

import json

import pytest

from pdkit.cli.main import main
from pdkit.model import seed
from pdkit.ops.bench import model, report, results
from tests.conftest import plan_of
from tests.fixtures.fabric import fakes
from tests.fixtures.fabric.fakes import BENCH, GOOD_LOGS, FakeCluster, bench_pod_log, fixture, sweep_copy

PNG = b"\x89PNG\r\n\x1a\n"


def _report(plan, bench_dir, *out, **kw):
    """The report of the bench results in `bench_dir` against the seed and the plan's latency model: its Markdown,
    or with `out` the files report.write leaves there."""
    the_seed = seed.load()
    write = report.write if out else report.markdown
    return write(results.load_dir(bench_dir), *out, plan=plan, seed=the_seed, model=model.from_plan(plan, the_seed), **kw)


@pytest.fixture(scope="module")
def written(plan, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    return out, _report(plan, BENCH / "sweep", out, run_meta=json.loads((BENCH / "sweep" / "run.json").read_text()))


def test_seed_figures_are_derived_from_the_stated_ones():
    s = seed.load()
    assert s.roce_mean_tpot_ms == pytest.approx(13.71, abs=0.01)  # 4.25 / 0.31
    assert s.efa_mean_tpot_ms == pytest.approx(17.96, abs=0.01)
    assert s.efa_max_itl_ms == pytest.approx(117.2, abs=0.1)  # 434 x (1 - 0.73)
    assert s.max_itl_ratio == pytest.approx(3.7, abs=0.05)
    assert s.per_message_overhead_us == 28
    assert s.moe_messages_per_token == 150
    assert s.mean_tpot_gap_ms / s.moe_messages_per_token * 1000 == pytest.approx(28.3, abs=0.1)


def test_latency_model_predicts_150_x_28_us(plan):
    m = model.from_plan(plan, seed.load())
    assert m.messages_per_token == plan.decode.cross_node_moe_messages_per_token == 150
    assert m.tpot_overhead_ms == pytest.approx(4.2)
    assert m.formula == "150 messages x 28 us = 4.2 ms"
    assert m.ibgda_equivalent_tpot_ms(18.0) == pytest.approx(13.8)
    assert m.ibgda_equivalent_tpot_ms(1.0) == 0.0
    assert m.proxy_share(21.0) == pytest.approx(0.2)


def test_no_cross_node_messages_means_no_overhead():
    assert model.LatencyModel(0, 28).tpot_overhead_ms == 0


def test_plots_are_written_as_non_empty_pngs(written):
    out, files = written
    for name in (report.ITL_PLOT, report.TPOT_PLOT, report.TTFT_PLOT):
        data = (out / name).read_bytes()
        assert data.startswith(PNG), name
        assert len(data) > 10_000, name
    assert out / report.REPORT in files


def test_markdown_has_the_comparison_table_with_the_seed(written):
    text = (written[0] / report.REPORT).read_text()
    header = next(line for line in text.splitlines() if line.startswith("| metric |"))
    assert header == "| metric | seed RoCE | seed EFA | c=1 | c=4 | c=16 | c=64 |"
    tpot = next(line for line in text.splitlines() if line.startswith("| mean TPOT (ms) |"))
    assert tpot.startswith("| mean TPOT (ms) | 13.7 | 18.0 | ")
    max_itl = next(line for line in text.splitlines() if line.startswith("| max ITL (ms) |"))
    assert max_itl.startswith("| max ITL (ms) | 434 | 117 | ")
    assert "| 95 (-19%) |" in max_itl  # the c=64 spike against the seed's EFA 117 ms


def test_seed_ttft_cell_quotes_a_difference_without_a_direction(written):
    """The seed's only TTFT statement is "EFA 在 Prefill 中只承担低频 PP send/recv，TTFT 仅差 9%" (AWS China Blog,
    2026-06-12, archived as seed document 000_138a252962c90c4a): "only 9% apart", with no sign. A cell that
    says "RoCE +9%" (or EFA +9%) claims a direction the source never states."""
    text = (written[0] / report.REPORT).read_text()
    ttft = next(line for line in text.splitlines() if line.startswith("| mean TTFT (ms) |"))
    assert ttft.startswith("| mean TTFT (ms) | not published | 9% apart, direction not stated (“TTFT 仅差 9%”) | 249 |")
    assert "+9%" not in text
    assert seed.load().ttft_published == "9% apart, direction not stated (“TTFT 仅差 9%”)"


def test_markdown_states_the_models_predicted_overhead(written):
    text = (written[0] / report.REPORT).read_text()
    assert "**150 messages x 28 us = 4.2 ms**" in text
    assert "4.25 ms" in text
    model_row = next(line for line in text.splitlines() if line.startswith("| model: on IBGDA, mean TPOT - 4.2 ms |"))
    assert "| 13.7 | 13.8 |" in model_row


def test_markdown_places_each_level(written):
    text = (written[0] / report.REPORT).read_text()
    assert "- c=1: mean TPOT 17.25 ms matches the seed's EFA figure (18.0 ms, -4%)" in text
    assert "4.2 ms (24%) of it on the CPU-proxy path" in text
    assert "![Inter-token latency distribution](itl_distribution.png)" in text
    assert "glm51-2p2d-bench-synthetic" in text  # from run.json
    assert "not published" in text


def test_report_from_printed_summaries_only(plan, tmp_path):
    _report(plan, BENCH / "summary-only", tmp_path)
    assert (tmp_path / report.ITL_PLOT).read_bytes().startswith(PNG)
    assert "| max ITL (ms) | 434 | 117 |" in (tmp_path / report.REPORT).read_text()


def test_failed_levels_and_request_errors_are_listed(plan, tmp_path):
    src = sweep_copy(tmp_path / "in")
    (src / "failed.json").write_text('{"128": "bench_serving exited 1: Server is not ready"}')
    rec = json.loads((src / "bench-c4.jsonl").read_text())
    rec["errors"][0] = "HTTP 503 from the router"
    (src / "bench-c4.jsonl").write_text(json.dumps(rec) + "\n")
    text = _report(plan, src)
    assert "- c=128: bench_serving exited 1: Server is not ready" in text
    assert "- c=4: HTTP 503 from the router" in text


def test_validation_results_are_included(plan, tmp_path):
    from pdkit.ops.fabric import validate

    logs = {**GOOD_LOGS, "nccl": {0: fixture("nccl-socket.log")}}
    outcome = validate.run(plan, FakeCluster(logs=logs), image="i", waiting=lambda _p: fakes.waiting(fakes.Clock()), run_id="v1")
    outcome.save(tmp_path / "v.json")
    text = _report(plan, BENCH / "sweep", validation=validate.load(tmp_path / "v.json"))
    assert "## Fabric validation" in text
    assert "check(s) failed: the numbers above may reflect the fabric" in text
    assert "| FAIL | all_reduce_perf network |" in text
    assert "#nccl-on-sockets" in text


def test_cli_report(capsys, tmp_path):
    out = tmp_path / "r"
    assert main(["report", "--bench", str(BENCH / "sweep"), "--out", str(out)]) == 0
    assert f"wrote {out / report.REPORT}" in capsys.readouterr().out
    assert (out / report.TPOT_PLOT).read_bytes().startswith(PNG)


def test_cli_report_without_results_is_one_line(capsys, tmp_path):
    assert main(["report", "--bench", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "no bench_serving results" in err
    assert err.count("\n") == 1


def test_cli_report_rejects_a_non_validation_file(capsys, tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    assert main(["report", "--bench", str(BENCH / "sweep"), "--validate", str(bad), "--out", str(tmp_path / "r")]) == 2
    assert "not a `pdkit validate` result" in capsys.readouterr().err


# --- the workload comes from the run's records -----------------------------------------------------------


def _workload_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("- Workload"))


def test_workload_is_read_from_the_records_not_the_profile(plan, tmp_path):
    """bench_serving writes the lengths it ran with into each --output-file record ("random_input_len",
    "random_output_len", "random_range_ratio" in the result dict of sglang/bench_serving.py) and, with
    --output-details, one TTFT per request. Those say what ran; the profile (output 512, 200 prompts, 16
    warm-up) says what the next run would do. The dataset is the records' "dataset_name". Nothing in the
    records names the warm-up: unknown."""
    src = sweep_copy(tmp_path / "in")
    (src / "run.json").unlink()
    assert (plan.bench.output_len, plan.bench.prompts_per_level) != (32, 16), "the fixture must differ from the profile"
    text = _report(plan, src)
    assert _workload_line(text) == (
        "- Workload (from the run's records): random dataset, input 2048 / output 32 tokens (range ratio 1), "
        "16 prompts per level after unknown warm-up requests, concurrency 1, 4, 16, 64, request rate all at once."
    )


def test_workload_from_run_json_names_the_warm_up(written):
    """`pdkit bench` records what it asked bench_serving for in run.json (pdkit/ops/bench/run.py), warm-up included;
    its deployment (glm51-2p2d) is the default profile's, so nothing is flagged."""
    text = (written[0] / report.REPORT).read_text()
    assert "Warning" not in text
    line = _workload_line(text)
    assert line == (
        "- Workload (from the run's records): random dataset, input 2048 / output 32 tokens (range ratio 1), "
        "16 prompts per level after 4 warm-up requests, concurrency 1, 4, 16, 64, request rate all at once."
    )


def test_printed_summaries_say_nothing_of_the_workload(plan, tmp_path):
    """bench_serving's printed "Serving Benchmark Result" block has no input/output length, prompt count or
    warm-up line (sglang/bench_serving.py prints concurrency, counts, throughputs and latencies), so a
    report from summaries alone cannot know them."""
    text = _report(plan, BENCH / "summary-only")
    assert _workload_line(text) == (
        "- Workload (from the run's records): unknown dataset, input unknown / output unknown tokens (range ratio unknown), "
        "unknown prompts per level after unknown warm-up requests, concurrency 1, 4, 16, 64, request rate all at once."
    )


def test_a_run_of_another_deployment_is_flagged(plan, tmp_path, capsys):
    """run.json names the deployment that ran (`plan`); a report built with another --profile would set
    that run beside the wrong layout and latency model."""
    src = sweep_copy(tmp_path / "in")
    meta = json.loads((src / "run.json").read_text()) | {"plan": "other-2p2d", "profile": "config/other.yaml"}
    (src / "run.json").write_text(json.dumps(meta))
    text = _report(plan, src, run_meta=meta)
    assert "> **Warning:** these results were recorded by deployment 'other-2p2d', but --profile is deployment 'glm51-2p2d'" in text
    assert main(["report", "--bench", str(src), "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert err.startswith("pdkit: warning: these results were recorded by deployment 'other-2p2d'")
    assert "Fix: pass --profile config/other.yaml" in err


@pytest.mark.parametrize("content", ["{bad", "[1, 2]"])
def test_a_broken_run_record_is_one_line(capsys, tmp_path, content):
    """run.json is the run's record of its workload; one that is not a JSON object (json.loads raises
    JSONDecodeError, or yields a list) gets one line with the fix, not a traceback."""
    src = sweep_copy(tmp_path / "in")
    (src / "run.json").write_text(content)
    assert main(["report", "--bench", str(src), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("pdkit: error: ")
    assert "Fix: restore the run.json" in err


# --- A/B: two runs side by side, labelled by the backend each role ran ------------------------------------


def _ab_run(tmp_path, name, roles, *, ttft_scale=1.0):
    """A copy of the sweep fixture as `pdkit bench` leaves it, with run.json's per-role backends and TTFT scaled
    (bench_serving writes mean_ttft_ms / p99_ttft_ms / input_throughput per level in each --output-file record)."""

    def edit(record):
        for key in ("mean_ttft_ms", "p99_ttft_ms"):
            record[key] *= ttft_scale
        record["input_throughput"] /= ttft_scale

    return sweep_copy(tmp_path / name, meta={"roles": roles}, edit=edit)


UCCL_BOTH = {
    "prefill": {"moe_a2a_backend": "uccl-ep", "deepep_mode": "normal", "image": "sglang-efa-x"},
    "decode": {"moe_a2a_backend": "uccl-ep", "deepep_mode": "low_latency", "image": "sglang-efa-x"},
}
DEEPEP_PREFILL = UCCL_BOTH | {"prefill": {"moe_a2a_backend": "deepep", "deepep_mode": "normal", "image": "sglang-deepep-x"}}


def test_compare_sets_two_runs_side_by_side_labelled_by_their_backends(capsys, tmp_path):
    """`pdkit report --bench A --compare B` writes compare.md: per concurrency, TTFT/TPOT/ITL/throughput of both runs,
    each run labelled with the per-role backend from its own run.json (what `pdkit bench` recorded), not the profile's."""
    a = _ab_run(tmp_path, "a", UCCL_BOTH)
    b = _ab_run(tmp_path, "b", DEEPEP_PREFILL, ttft_scale=0.5)
    out = tmp_path / "r"
    assert main(["report", "--bench", str(a), "--compare", str(b), "--out", str(out)]) == 0
    assert f"wrote {out / report.COMPARE_REPORT}" in capsys.readouterr().out
    text = (out / report.COMPARE_REPORT).read_text()
    assert f"- A: {a} (prefill uccl-ep normal, decode uccl-ep low_latency)" in text
    assert f"- B: {b} (prefill deepep normal, decode uccl-ep low_latency)" in text
    a_c4 = next(lv for lv in results.load_dir(a).levels if lv.concurrency == 4)
    ttft = a_c4.get("mean_ttft_ms")
    assert f"| c=4 | mean TTFT (ms) | {ttft:.0f} | {ttft * 0.5:.0f} | -50% (B better) |" in text
    assert f"| c=4 | input tok/s | {a_c4.get('input_throughput'):.0f} | {a_c4.get('input_throughput') * 2:.0f} | +100% (B better) |" in text
    for metric in ("mean TPOT (ms)", "p99 ITL (ms)", "output tok/s"):
        assert f"| c=64 | {metric} |" in text
    assert "Warning" not in text


def test_compare_warns_when_a_run_did_not_record_its_backends(capsys, tmp_path):
    """A run without per-role backends in run.json (older `pdkit bench`, or bare bench_serving files) cannot be labelled."""
    a = _ab_run(tmp_path, "a", UCCL_BOTH)
    b = sweep_copy(tmp_path / "b")
    assert main(["report", "--bench", str(a), "--compare", str(b), "--out", str(tmp_path / "r")]) == 0
    text = (tmp_path / "r" / report.COMPARE_REPORT).read_text()
    assert f"- B: {b} (backend not recorded)" in text
    assert "**Warning:** B has no per-role backend in its run.json" in text


def test_bench_records_each_roles_backend_in_run_json(tmp_path):
    """run.json's "roles" is what the comparison reads: each role's backend, DeepEP mode and image tag, from the plan
    of the profile that ran (here the A/B partner profile: upstream DeepEP on prefill, UCCL-EP on decode)."""
    from pdkit.ops.bench import run as bench_run
    from tests.fixtures.fabric.fakes import Clock

    ab = plan_of("config/glm51-fp8-2p2d-deepep-prefill.yaml")
    cluster = FakeCluster(logs={"bench": {0: bench_pod_log()}})
    bench_run.run(ab, cluster, image="img", out_dir=tmp_path, levels=(1, 4), waiting=fakes.waiting(Clock()), run_id="r1")
    roles = json.loads((tmp_path / "run.json").read_text())["roles"]
    assert roles == {
        "prefill": {"moe_a2a_backend": "deepep", "deepep_mode": "normal", "image": ab.images["sglang-deepep"].tag},
        "decode": {"moe_a2a_backend": "uccl-ep", "deepep_mode": "low_latency", "image": ab.images["sglang-efa"].tag},
    }
    assert report.backend_label(json.loads((tmp_path / "run.json").read_text())) == "prefill deepep normal, decode uccl-ep low_latency"
