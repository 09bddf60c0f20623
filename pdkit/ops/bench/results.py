"""bench_serving's results, read from what it writes: SGLang's `bench_serving` (`python/sglang/bench_serving.py`,
since 0.5.x `sglang/benchmark/serving.py`) since 0.4, and vLLM-style summaries that operators paste beside them.

Two formats, both parsed:
- the JSONL of `--output-file`: one object per run. What each generation carries (only what the kit reads):
  - all: `completed`, `duration`, `output_throughput`, `random_input_len` / `random_output_len` /
    `random_range_ratio`, `median_ttft_ms`, `median_itl_ms`, `mean_e2e_latency_ms`;
  - the early record (SGLang's `benchmark/lora/lora_bench.py` still writes it): `backend`,
    `request_rate`, median-only TTFT/ITL, no `max_concurrency`, no TPOT;
  - 0.4.x: adds `dataset_name`, `max_concurrency` (null when `--max-concurrency` was not given),
    mean/median/std/p99 of `*_ttft_ms`, `*_tpot_ms`, `*_itl_ms`, `*_e2e_latency_ms`, `concurrency`
    (the observed average in flight);
  - 0.5.x: adds p90/p95 percentiles, `max_concurrent_requests` (the observed peak, NOT the limit: never a
    level key), and with `--output-details` per-request `ttfts` (s) and `itls` (lists of s). No max ITL
    field: the max comes from the `itls` lists.
  A record is accepted when it carries a TTFT and an ITL or TPOT figure.
- the printed summary (`============ Serving Benchmark Result ============` then `Mean TTFT (ms):
  12.34` lines, including `Max ITL (ms):`, `Traffic request rate:` and, when set, `Max request
  concurrency:`), used when no JSONL is at hand and to cross-check.

Levels are keyed by (request rate, concurrency): a request-rate sweep without a concurrency limit keeps
every rate. Duplicates, impossible values (zero TTFT/ITL: sgl-project/sglang#9585, #12389) and files
that cannot be read become warnings in the report, never a silent drop or an abort.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pdkit.errors import KitError
from pdkit.pods import bench_compact as compact

METRICS = (
    "mean_ttft_ms",
    "median_ttft_ms",
    "p90_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p90_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p90_itl_ms",
    "p95_itl_ms",
    "p99_itl_ms",
    "mean_e2e_latency_ms",
    "p99_e2e_latency_ms",
    "request_throughput",
    # Prefill's figure: AWS's p5en DeepEP vs UCCL-EP prefill comparison is in input tokens/s.
    "input_throughput",
    "output_throughput",
    "total_throughput",
)
_SUMMARY_HEADER = re.compile(r"=+ Serving Benchmark Result =+")
_SUMMARY_LINE = re.compile(r"^(?P<label>[A-Za-z0-9 ()/.,%-]+?):\s+(?P<value>\S+)\s*$")


@dataclass(frozen=True)
class Level:
    """One level of a sweep: a concurrency limit (None: not set), a request rate (None: all at once)."""

    concurrency: int | None
    completed: int
    prompts: int | None
    metrics: dict[str, float]
    itls_ms: tuple[float, ...] = ()
    max_itl_ms: float | None = None
    input_len: int | None = None
    output_len: int | None = None
    range_ratio: float | None = None
    errors: tuple[str, ...] = ()
    source: str = ""
    request_rate: float | None = None
    dataset: str | None = None

    def get(self, metric: str) -> float | None:
        return self.metrics.get(metric)

    @property
    def key(self) -> tuple[float, int]:
        """(request rate, concurrency) for sorting and duplicates: unlimited sorts last."""
        return (math.inf if self.request_rate is None else self.request_rate, self.concurrency or 0)

    @property
    def label(self) -> str:
        rate = "" if self.request_rate is None else f"rate {self.request_rate:g}/s"
        conc = "" if self.concurrency is None else f"c={self.concurrency}"
        return ", ".join(x for x in (rate, conc) if x) or "c=unlimited"

    def impossible(self) -> list[str]:
        """Figures no real run gives: zero TTFT/ITL with completed requests (a known SGLang bug when the
        first token and the rest arrive in one chunk: sgl-project/sglang#9585, #12389), or negatives."""
        found = []
        if self.completed > 0:
            for name in ("mean_ttft_ms", "median_ttft_ms", "mean_itl_ms", "median_itl_ms"):
                value = self.metrics.get(name)
                if value is not None and value <= 0:
                    found.append(f"{name} = {value:g}")
        found += [f"{k} = {v:g}" for k, v in self.metrics.items() if v < 0 and f"{k} = {v:g}" not in found]
        return found


@dataclass
class Sweep:
    levels: list[Level] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    # What was left out and why ("file: reason"), and what was kept but looks wrong.
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def level(self, concurrency: int) -> Level | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)


_TTFT_KEYS = ("mean_ttft_ms", "median_ttft_ms")
_DECODE_KEYS = ("mean_tpot_ms", "median_tpot_ms", "mean_itl_ms", "median_itl_ms")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _rate(value: Any) -> float | None:
    """`request_rate`: a number, or inf (JSON `Infinity`, or the string "inf" in a summary) for all at once."""
    rate = _number(value)
    if rate is None and isinstance(value, str):
        try:
            rate = float(value)
        except ValueError:
            return None
    return None if rate is None or math.isinf(rate) else rate


# bench_serving --cache-report (SGLang 0.5.23 sglang/benchmark/serving.py) writes
# `cache_report: {total_prompt_tokens, total_cached_tokens, cache_hit_rate_pct, ...}` into the record:
# the answers' meta_info.cached_tokens (the prefix prefill found in its radix cache) over their prompt tokens.
CACHE_HIT_METRIC = "cache_hit_rate_pct"


def _cache_hit(record: dict[str, Any]) -> dict[str, float]:
    report = record.get("cache_report")
    value = _number(report.get(CACHE_HIT_METRIC)) if isinstance(report, dict) else None
    return {} if value is None else {CACHE_HIT_METRIC: value}


def from_record(record: dict[str, Any], source: str = "") -> Level:
    """One JSONL object as a Level."""
    if not isinstance(record, dict) or not any(k in record for k in _TTFT_KEYS) or not any(k in record for k in _DECODE_KEYS):
        raise KitError(
            f"{source or 'a record'} is not bench_serving output (no TTFT and TPOT/ITL figures). Fix: pass bench_serving's --output-file JSONL"
        )
    itls = [x * 1000 for request in record.get("itls") or [] if isinstance(request, list) for x in request]
    ttfts = record.get("ttfts")
    errors = tuple(str(e) for e in record.get("errors") or [] if e)
    # `max_concurrency` is the --max-concurrency limit (null: not set). `max_concurrent_requests` in newer
    # records is the peak observed in flight: a measurement, not the level, so it is never used as the key.
    limit = _number(record.get("max_concurrency"))
    dataset = record.get("dataset_name")
    random_lengths = dataset in (None, "random", "random-ids")
    return Level(
        concurrency=int(limit) if limit is not None else None,
        completed=int(record.get("completed", 0)),
        prompts=len(ttfts) if isinstance(ttfts, list) else None,
        metrics={k: v for k in METRICS if (v := _number(record.get(k))) is not None} | _cache_hit(record),
        itls_ms=tuple(itls),
        max_itl_ms=max(itls) if itls else None,
        # bench_serving writes its --random-* values (defaults included) whatever the dataset: lengths only for random ones.
        input_len=record.get("random_input_len") if random_lengths else None,
        output_len=record.get("random_output_len") if random_lengths else None,
        range_ratio=record.get("random_range_ratio") if random_lengths else None,
        errors=errors,
        source=source,
        request_rate=_rate(record.get("request_rate")),
        dataset=str(dataset) if dataset else None,
    )


def _key(label: str) -> str:
    """'Mean TTFT (ms)' -> 'mean_ttft_ms', 'Max request concurrency' -> 'max_request_concurrency'."""
    label = (
        label.replace("E2E Latency", "e2e_latency")
        .replace("Maximum request", "Max request")
        .replace("(ms)", "ms")
        .replace("(s)", "s")
        .replace("(req/s)", "")
        .replace("(tok/s)", "")
    )
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


def parse_summaries(text: str) -> list[dict[str, float | str]]:
    """Every printed 'Serving Benchmark Result' block in a log, as {key: value}."""
    blocks: list[dict[str, float | str]] = []
    current: dict[str, float | str] | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if _SUMMARY_HEADER.search(line):
            current = {}
            blocks.append(current)
            continue
        if current is None:
            continue
        if line.startswith("=" * 10):
            current = None
            continue
        m = _SUMMARY_LINE.match(line.strip())
        if m:
            value = m.group("value")
            try:
                current[_key(m.group("label"))] = float(value)
            except ValueError:
                current[_key(m.group("label"))] = value
    return blocks


_SUMMARY_TO_METRIC = {
    "mean_ttft_ms": "mean_ttft_ms",
    "median_ttft_ms": "median_ttft_ms",
    "p90_ttft_ms": "p90_ttft_ms",
    "p99_ttft_ms": "p99_ttft_ms",
    "mean_tpot_ms": "mean_tpot_ms",
    "median_tpot_ms": "median_tpot_ms",
    "p90_tpot_ms": "p90_tpot_ms",
    "p99_tpot_ms": "p99_tpot_ms",
    "mean_itl_ms": "mean_itl_ms",
    "median_itl_ms": "median_itl_ms",
    "p90_itl_ms": "p90_itl_ms",
    "p95_itl_ms": "p95_itl_ms",
    "p99_itl_ms": "p99_itl_ms",
    "mean_e2e_latency_ms": "mean_e2e_latency_ms",
    "p99_e2e_latency_ms": "p99_e2e_latency_ms",
    "request_throughput": "request_throughput",
    "input_token_throughput": "input_throughput",
    "output_token_throughput": "output_throughput",
    "total_token_throughput": "total_throughput",
    # Older SGLang and vLLM print "Total throughput (tok/s)" / "Total Token throughput (tok/s)".
    "total_throughput": "total_throughput",
}


def from_summary(block: dict[str, float | str], source: str = "") -> Level:
    """One printed block as a Level. Older versions print no concurrency line, newer ones print `not set`
    without --max-concurrency: both are a level without a limit, keyed by the traffic rate."""
    if not any(isinstance(block.get(k), float) for k in _TTFT_KEYS) or not any(isinstance(block.get(k), float) for k in _DECODE_KEYS):
        raise KitError(f"{source}: a summary without TTFT and TPOT/ITL lines")
    concurrency = block.get("max_request_concurrency")
    metrics = {m: float(v) for k, m in _SUMMARY_TO_METRIC.items() if isinstance(v := block.get(k), float)}
    max_itl = block.get("max_itl_ms")
    completed = block.get("successful_requests")
    return Level(
        concurrency=int(concurrency) if isinstance(concurrency, float) else None,
        completed=int(completed) if isinstance(completed, float) else 0,
        prompts=None,
        metrics=metrics,
        max_itl_ms=float(max_itl) if isinstance(max_itl, float) else None,
        source=source,
        request_rate=_rate(block.get("traffic_request_rate")),
    )


def _keep(found: dict[tuple[float, int], Level], level: Level, sweep: Sweep) -> None:
    """Add a level; a second one with the same key replaces the first, with a warning naming both."""
    if (old := found.get(level.key)) is not None:
        same = old.metrics == level.metrics
        sweep.warnings.append(
            f"{level.label} appears twice ({old.source} and {level.source}"
            + (", identical figures)" if same else ", different figures: two runs or two server configurations?)")
            + f"; the report keeps {level.source}"
        )
    found[level.key] = level
    if bad := level.impossible():
        sweep.warnings.append(
            f"{level.source} ({level.label}): impossible values {', '.join(bad)}: bench_serving's known zero TTFT/ITL bug "
            "(https://github.com/sgl-project/sglang/issues/9585); rerun before trusting this level"
        )


def _read(file: Path, sweep: Sweep) -> str | None:
    try:
        return file.read_text()
    except (OSError, UnicodeDecodeError) as err:
        sweep.skipped.append(f"{file.name}: cannot be read ({err.__class__.__name__}: {err})")
        return None


def load_dir(path: Path) -> Sweep:
    """A directory of results: `*.jsonl` from --output-file, and printed summaries in `*.log` / `*.txt`
    for levels without JSONL (and for max ITL when the JSONL has no per-request ITLs). A file or line
    that cannot be read is skipped with the reason in `Sweep.skipped`; the rest is read."""
    if not path.is_dir():
        raise KitError(
            f"{path} is not a directory. Fix: pass the --out directory of `pdkit bench` (or a folder of bench_serving JSONL files)"
        )
    sweep = Sweep()
    by_level: dict[tuple[float, int], Level] = {}
    for file in sorted(path.glob("*.jsonl")):
        text = _read(file, sweep)
        if text is None:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                level = from_record(record, f"{file.name}:{n}")
            except json.JSONDecodeError as err:
                sweep.skipped.append(f"{file.name}:{n}: not JSON ({err.msg})")
                continue
            except KitError:
                keys = ", ".join(sorted(record)[:6]) if isinstance(record, dict) else type(record).__name__
                sweep.skipped.append(f"{file.name}:{n}: no TTFT and TPOT/ITL figures (keys: {keys})")
                continue
            _keep(by_level, level, sweep)
    summaries: dict[tuple[float, int], Level] = {}
    for file in sorted([*path.glob("*.log"), *path.glob("*.txt")]):
        try:
            text = file.read_text(errors="replace")
        except OSError as err:
            sweep.skipped.append(f"{file.name}: cannot be read ({err.__class__.__name__}: {err})")
            continue
        for i, block in enumerate(parse_summaries(text), 1):
            try:
                level = from_summary(block, f"{file.name} block {i}")
            except KitError as err:
                sweep.skipped.append(str(err))
                continue
            if level.key in by_level:
                if by_level[level.key].max_itl_ms is None and level.max_itl_ms is not None:
                    by_level[level.key] = replace(by_level[level.key], max_itl_ms=level.max_itl_ms)
                continue
            _keep(summaries, level, sweep)
    by_level.update(summaries)
    status_file = path / "failed.json"
    if status_file.is_file():
        try:
            sweep.failed = {int(k): str(v) for k, v in json.loads(status_file.read_text()).items()}
        except (ValueError, AttributeError, OSError) as err:
            sweep.skipped.append(f"failed.json: not the `pdkit bench` status file ({err})")
    if not by_level and not sweep.failed:
        why = f" Skipped: {'; '.join(sweep.skipped)}." if sweep.skipped else ""
        raise KitError(
            f"no bench_serving results in {path} (*.jsonl, or *.log with a printed summary).{why} "
            f"Fix: run `pdkit bench --out {path}` first, or pass the directory holding bench_serving's output"
        )
    sweep.levels = [by_level[k] for k in sorted(by_level)]
    return sweep


def levels_from_log(text: str) -> dict[int, tuple[int, list[Level]]]:
    """The result blocks the benchmark pod printed: concurrency -> (exit status, levels)."""
    return {
        c: (status, [from_record(r, f"pod log c={c}") for r in records]) for c, (status, records) in compact.decode_blocks(text).items()
    }
