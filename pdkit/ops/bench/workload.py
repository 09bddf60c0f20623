"""What a benchmark run ran, read from its own records: bench_serving's per-level records first (what
the client did), then `run.json` (what `pdkit bench` asked for). Never from the profile: results from
another deployment, an older profile or a hand-run bench_serving must not borrow today's settings.
Where neither record says, the value is "unknown".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pdkit.ops.bench.results import Sweep

UNKNOWN = "unknown"


@dataclass(frozen=True)
class Workload:
    deployment: str | None
    profile: str | None
    dataset: str
    input_len: str
    output_len: str
    range_ratio: str
    prompts_per_level: str
    warmup_requests: str
    concurrency: str
    request_rate: str = UNKNOWN

    def line(self) -> str:
        return (
            f"{self.dataset} dataset, input {self.input_len} / output {self.output_len} tokens (range ratio {self.range_ratio}), "
            f"{self.prompts_per_level} prompts per level after {self.warmup_requests} warm-up requests, concurrency {self.concurrency}, "
            f"request rate {self.request_rate}"
        )


def _said(values: Iterable[Any]) -> str | None:
    """The value the records agree on; several when they differ by level; None when none says."""
    seen = sorted({v for v in values if v is not None}, key=str)
    if not seen:
        return None
    if len(seen) == 1:
        return f"{seen[0]:g}" if isinstance(seen[0], float) else str(seen[0])
    return " / ".join(str(v) for v in seen) + " (differs by level)"


def _first(*said: str | None) -> str:
    return next((s for s in said if s is not None), UNKNOWN)


def from_run(sweep: Sweep, meta: Mapping[str, Any] | None) -> Workload:
    meta = meta or {}
    levels = sweep.levels
    limits = {lv.concurrency for lv in levels if lv.concurrency is not None} | set(sweep.failed)
    ran: Sequence[str] = [str(c) for c in sorted(limits)] + (["not set"] if any(lv.concurrency is None for lv in levels) else [])
    # Records without a request_rate (summaries of very old versions) say nothing; None from a record means inf.
    rates = sorted({lv.request_rate for lv in levels if lv.request_rate is not None})
    rate = ", ".join(f"{r:g}/s" for r in rates) + (", all at once" if any(lv.request_rate is None for lv in levels) else "")
    return Workload(
        deployment=str(meta["plan"]) if meta.get("plan") else None,
        profile=str(meta["profile"]) if meta.get("profile") else None,
        # The records' dataset_name first; `pdkit bench` always runs the random dataset (pdkit/render/bench.py).
        dataset=_first(_said(lv.dataset for lv in levels), "random" if meta.get("kind") == "pdkit-bench" else None),
        input_len=_first(_said(lv.input_len for lv in levels), _said([meta.get("input_len")])),
        output_len=_first(_said(lv.output_len for lv in levels), _said([meta.get("output_len")])),
        range_ratio=_first(_said(lv.range_ratio for lv in levels)),
        prompts_per_level=_first(_said(lv.prompts for lv in levels), _said([meta.get("prompts_per_level")])),
        warmup_requests=_first(_said([meta.get("warmup_requests")])),
        concurrency=", ".join(ran) if ran else _first(_said([", ".join(map(str, meta.get("levels") or [])) or None])),
        request_rate=rate.removeprefix(", ") if levels else UNKNOWN,
    )


def deployment_warning(workload: Workload, deployment: str) -> str | None:
    """One line when the results come from another deployment than the profile the report is built for."""
    if workload.deployment is None or workload.deployment == deployment:
        return None
    fix = f"--profile {workload.profile}" if workload.profile else f"--profile with the profile of deployment {workload.deployment!r}"
    return (
        f"these results were recorded by deployment {workload.deployment!r}, but --profile is deployment {deployment!r}: the report's "
        f"layout, model and latency model would be {deployment!r}'s. Fix: pass {fix}"
    )
