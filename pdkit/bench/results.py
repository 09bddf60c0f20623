"""bench_serving's results, read from what it writes (SGLang 0.5.23, `sglang/benchmark/serving.py`).

Two formats, both parsed:
- the JSONL of `--output-file`: one object per run with `max_concurrency`, `completed`, the
  mean/median/std/p90/p95/p99 of `*_ttft_ms`, `*_tpot_ms`, `*_itl_ms`, `*_e2e_latency_ms`,
  throughputs and, with `--output-details`, per-request `ttfts` (s) and `itls` (lists of s). It has
  no max ITL field: the max comes from the `itls` lists.
- the printed summary (`============ Serving Benchmark Result ============` then `Mean TTFT (ms):
  12.34` lines, including `Max ITL (ms):`), used when no JSONL is at hand and to cross-check.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pdkit.bench import compact
from pdkit.errors import KitError

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
    "output_throughput",
    "total_throughput",
)
_SUMMARY_HEADER = re.compile(r"=+ Serving Benchmark Result =+")
_SUMMARY_LINE = re.compile(r"^(?P<label>[A-Za-z0-9 ()/.,%-]+?):\s+(?P<value>\S+)\s*$")


@dataclass(frozen=True)
class Level:
    """One concurrency level of a sweep."""

    concurrency: int
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

    def get(self, metric: str) -> float | None:
        return self.metrics.get(metric)


@dataclass
class Sweep:
    levels: list[Level] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)

    def level(self, concurrency: int) -> Level | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)


def from_record(record: dict[str, Any], source: str = "") -> Level:
    """One JSONL object as a Level."""
    if "max_concurrency" not in record or "mean_tpot_ms" not in record:
        raise KitError(
            f"{source or 'a record'} is not bench_serving output (no max_concurrency / mean_tpot_ms). Fix: pass bench_serving's --output-file JSONL"
        )
    itls = [x * 1000 for request in record.get("itls") or [] if isinstance(request, list) for x in request]
    ttfts = record.get("ttfts")
    errors = tuple(str(e) for e in record.get("errors") or [] if e)
    concurrency = record["max_concurrency"] or record.get("max_concurrent_requests") or 0
    return Level(
        concurrency=int(concurrency),
        completed=int(record.get("completed", 0)),
        prompts=len(ttfts) if isinstance(ttfts, list) else None,
        metrics={k: float(record[k]) for k in METRICS if isinstance(record.get(k), int | float)},
        itls_ms=tuple(itls),
        max_itl_ms=max(itls) if itls else None,
        input_len=record.get("random_input_len"),
        output_len=record.get("random_output_len"),
        range_ratio=record.get("random_range_ratio"),
        errors=errors,
        source=source,
    )


def _key(label: str) -> str:
    """'Mean TTFT (ms)' -> 'mean_ttft_ms', 'Max request concurrency' -> 'max_request_concurrency'."""
    label = (
        label.replace("E2E Latency", "e2e_latency").replace("(ms)", "ms").replace("(s)", "s").replace("(req/s)", "").replace("(tok/s)", "")
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
    "output_token_throughput": "output_throughput",
    "total_token_throughput": "total_throughput",
}


def from_summary(block: dict[str, float | str], source: str = "") -> Level:
    concurrency = block.get("max_request_concurrency")
    if not isinstance(concurrency, float):
        raise KitError(f"{source}: a summary without 'Max request concurrency'. Fix: run bench_serving with --max-concurrency")
    metrics = {m: float(v) for k, m in _SUMMARY_TO_METRIC.items() if isinstance(v := block.get(k), float)}
    max_itl = block.get("max_itl_ms")
    completed = block.get("successful_requests")
    return Level(
        concurrency=int(concurrency),
        completed=int(completed) if isinstance(completed, float) else 0,
        prompts=None,
        metrics=metrics,
        max_itl_ms=float(max_itl) if isinstance(max_itl, float) else None,
        source=source,
    )


def load_dir(path: Path) -> Sweep:
    """A directory of results: `*.jsonl` from --output-file (the last record per concurrency wins), and
    printed summaries in `*.log` / `*.txt` for levels without JSONL (and for max ITL when the JSONL
    has no per-request ITLs)."""
    if not path.is_dir():
        raise KitError(
            f"{path} is not a directory. Fix: pass the --out directory of `pdkit bench` (or a folder of bench_serving JSONL files)"
        )
    by_level: dict[int, Level] = {}
    for file in sorted(path.glob("*.jsonl")):
        for n, line in enumerate(file.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise KitError(f"{file}:{n} is not JSON. Fix: pass bench_serving's --output-file JSONL unchanged") from None
            level = from_record(record, f"{file.name}:{n}")
            by_level[level.concurrency] = level
    summaries: dict[int, Level] = {}
    for file in sorted([*path.glob("*.log"), *path.glob("*.txt")]):
        for block in parse_summaries(file.read_text(errors="replace")):
            try:
                level = from_summary(block, file.name)
            except KitError:
                continue
            summaries[level.concurrency] = level
    for c, summary in summaries.items():
        if c not in by_level:
            by_level[c] = summary
        elif by_level[c].max_itl_ms is None and summary.max_itl_ms is not None:
            by_level[c] = replace(by_level[c], max_itl_ms=summary.max_itl_ms)
    failed = {}
    status_file = path / "failed.json"
    if status_file.is_file():
        failed = {int(k): str(v) for k, v in json.loads(status_file.read_text()).items()}
    if not by_level and not failed:
        raise KitError(
            f"no bench_serving results in {path} (*.jsonl, or *.log with a printed summary). Fix: run `pdkit bench --out {path}` first"
        )
    return Sweep(levels=[by_level[c] for c in sorted(by_level)], failed=failed)


def levels_from_log(text: str) -> dict[int, tuple[int, list[Level]]]:
    """The result blocks the benchmark pod printed: concurrency -> (exit status, levels)."""
    return {
        c: (status, [from_record(r, f"pod log c={c}") for r in records]) for c, (status, records) in compact.decode_blocks(text).items()
    }
