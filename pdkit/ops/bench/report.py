"""`pdkit report`: a Markdown report and PNG plots from saved benchmark results, set beside the seed's
EFA and RoCE figures and the plan's latency model. Offline: files in, files out, no cluster.

Plots (matplotlib, headless Agg backend):
- `itl_distribution.png`: for each concurrency, the share of inter-token gaps longer than x (log-log),
  with the seed's worst gaps on EFA (117 ms) and RoCE (434 ms) marked;
- `tpot_vs_concurrency.png`: mean and p99 TPOT, the seed's EFA and RoCE mean TPOT, and what the
  latency model expects the same run to give on an IBGDA fabric (measured - 150 x 28 us);
- `ttft_vs_concurrency.png`: mean, median and p99 TTFT (the seed published only "TTFT 仅差 9%": 9% apart, no direction).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pdkit.model.plan import Plan
from pdkit.model.seed import Seed
from pdkit.ops.bench import workload
from pdkit.ops.bench.model import LatencyModel
from pdkit.ops.bench.results import CACHE_HIT_METRIC, Level, Sweep

ITL_PLOT = "itl_distribution.png"
TPOT_PLOT = "tpot_vs_concurrency.png"
TTFT_PLOT = "ttft_vs_concurrency.png"
REPORT = "report.md"
# Within this of the seed's EFA mean TPOT, a level "matches the seed".
MATCH_TOLERANCE = 0.10
DPI = 120


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None, reference: float) -> str:
    if value is None or reference <= 0:
        return "-"
    return f"{(value / reference - 1) * 100:+.0f}%"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return out


# --- plots ---------------------------------------------------------------------------------------------


@contextmanager
def _plot(path: Path, *, grid: Literal["major", "both"] = "major") -> Iterator[Any]:
    """The axes of one figure; then its grid and legend, and the figure saved to `path` and closed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    yield ax
    ax.grid(True, which=grid, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _x_axis(ax: Any, levels: Sequence[Level]) -> list[float]:
    """x positions of the levels: their concurrency on a log2 axis when every level has a distinct one,
    else one slot per level labelled with its (request rate, concurrency), as in a request-rate sweep."""
    limits = [lv.concurrency for lv in levels]
    if levels and None not in limits and len(set(limits)) == len(limits):
        xs = [float(c or 0) for c in limits]
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(c) for c in limits])
        return xs
    xs = [float(i) for i in range(len(levels))]
    if levels:
        ax.set_xticks(xs, [lv.label for lv in levels], rotation=20)
    return xs


def plot_itl(sweep: Sweep, seed: Seed, path: Path) -> Path:
    with _plot(path, grid="both") as ax:
        drawn = False
        for level in sweep.levels:
            if not level.itls_ms:
                continue
            values = sorted(level.itls_ms)
            n = len(values)
            share = [1 - i / n for i in range(n)]
            ax.step(values, share, where="post", label=f"{level.label} (max {max(values):.0f} ms)")
            drawn = True
        if not drawn:
            # Printed summaries only: no per-request gaps, so show what the summary has.
            xs = _x_axis(ax, sweep.levels)
            ax.plot(xs, [lv.get("p99_itl_ms") or 0 for lv in sweep.levels], "o-", label="p99 ITL")
            ax.plot(xs, [lv.max_itl_ms or 0 for lv in sweep.levels], "s--", label="max ITL")
            ax.set_xlabel("concurrency")
            ax.set_ylabel("ITL (ms)")
            ax.set_title("Inter-token latency (summary only: no per-request ITLs saved)")
        else:
            from matplotlib.ticker import ScalarFormatter

            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.set_xlabel("inter-token latency (ms)")
            ax.set_ylabel("share of gaps longer than x")
            ax.set_title("Inter-token latency distribution")
        # The seed's max ITL: a level on the summary's ITL axis, a position on the distribution's.
        mark = ax.axvline if drawn else ax.axhline
        mark(seed.efa_max_itl_ms, color="tab:green", linestyle=":", label=f"seed EFA max ITL {seed.efa_max_itl_ms:.0f} ms")
        mark(seed.roce_max_itl_ms, color="tab:red", linestyle=":", label=f"seed RoCE max ITL {seed.roce_max_itl_ms:.0f} ms")
    return path


def plot_tpot(sweep: Sweep, seed: Seed, model: LatencyModel, path: Path) -> Path:
    with _plot(path) as ax:
        levels = [lv for lv in sweep.levels if lv.get("mean_tpot_ms") is not None]
        xs = _x_axis(ax, levels)
        mean = [lv.get("mean_tpot_ms") or 0.0 for lv in levels]
        ax.plot(xs, mean, "o-", label="mean TPOT (this run)")
        p99 = [lv.get("p99_tpot_ms") for lv in levels]
        if all(v is not None for v in p99):
            ax.plot(xs, [v or 0.0 for v in p99], "s--", label="p99 TPOT (this run)")
        if model.messages_per_token:
            ibgda = [model.ibgda_equivalent_tpot_ms(m) for m in mean]
            ax.plot(xs, ibgda, "^:", color="tab:purple", label=f"model: same run on IBGDA (- {model.formula})")
        ax.axhline(seed.efa_mean_tpot_ms, color="tab:green", linestyle="-.", label=f"seed EFA mean TPOT {seed.efa_mean_tpot_ms:.1f} ms")
        ax.axhline(seed.roce_mean_tpot_ms, color="tab:red", linestyle="-.", label=f"seed RoCE mean TPOT {seed.roce_mean_tpot_ms:.1f} ms")
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel("time per output token (ms)")
        ax.set_title("TPOT against concurrency")
    return path


def plot_ttft(sweep: Sweep, seed: Seed, path: Path) -> Path:
    with _plot(path) as ax:
        xs = _x_axis(ax, sweep.levels)
        for metric, style, label in (("mean_ttft_ms", "o-", "mean"), ("median_ttft_ms", "d-", "median"), ("p99_ttft_ms", "s--", "p99")):
            values = [lv.get(metric) for lv in sweep.levels]
            if values and all(v is not None for v in values):
                ax.plot(xs, [v or 0.0 for v in values], style, label=f"{label} TTFT (this run)")
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel("time to first token (ms)")
        ax.set_title(f"TTFT against concurrency (seed: EFA and RoCE {seed.ttft_difference_pct:.0f}% apart, no absolute value published)")
    return path


# --- markdown -------------------------------------------------------------------------------------------


def _layout(plan: Plan) -> str:
    p, d = plan.prefill, plan.decode
    prefill = f"prefill {p.replicas} x {p.nodes_per_replica} nodes (TP{p.tp} PP{p.pp}, attention CP{p.attn_cp}, EP{p.ep})"
    decode = f"decode {d.replicas} x {d.nodes_per_replica} nodes (TP{d.tp}, attention DP{d.attn_dp}, EP{d.ep})"
    return f"{prefill}; {decode}; {plan.instance_count} x {plan.instance.name}, {plan.efa_devices_per_node} EFA devices per node"


def comparison_rows(levels: Sequence[Level], seed: Seed, model: LatencyModel) -> list[list[str]]:
    def each(fn: Any) -> list[str]:
        return [fn(lv) for lv in levels]

    return [
        [
            "mean TPOT (ms)",
            _f(seed.roce_mean_tpot_ms),
            _f(seed.efa_mean_tpot_ms),
            *each(lambda lv: f"{_f(lv.get('mean_tpot_ms'), 2)} ({_pct(lv.get('mean_tpot_ms'), seed.efa_mean_tpot_ms)})"),
        ],
        [
            f"model: on IBGDA, mean TPOT - {model.tpot_overhead_ms:.1f} ms",
            _f(seed.roce_mean_tpot_ms),
            _f(model.ibgda_equivalent_tpot_ms(seed.efa_mean_tpot_ms)),
            *each(lambda lv: _f(model.ibgda_equivalent_tpot_ms(lv.get("mean_tpot_ms") or 0.0), 2) if lv.get("mean_tpot_ms") else "-"),
        ],
        ["p99 TPOT (ms)", "not published", "not published", *each(lambda lv: _f(lv.get("p99_tpot_ms"), 2))],
        [
            "max ITL (ms)",
            _f(seed.roce_max_itl_ms, 0),
            _f(seed.efa_max_itl_ms, 0),
            *each(lambda lv: f"{_f(lv.max_itl_ms, 0)} ({_pct(lv.max_itl_ms, seed.efa_max_itl_ms)})" if lv.max_itl_ms else "-"),
        ],
        ["p99 ITL (ms)", "not published", "not published", *each(lambda lv: _f(lv.get("p99_itl_ms"), 2))],
        [
            "mean TTFT (ms)",
            "not published",
            seed.ttft_published,
            *each(lambda lv: _f(lv.get("mean_ttft_ms"), 0)),
        ],
    ]


def _standing(levels: Sequence[Level], seed: Seed, model: LatencyModel) -> list[str]:
    lines = []
    for lv in levels:
        tpot = lv.get("mean_tpot_ms")
        if tpot is None:
            continue
        ratio = tpot / seed.efa_mean_tpot_ms - 1
        if abs(ratio) <= MATCH_TOLERANCE:
            verdict = "matches the seed's EFA figure"
        elif ratio < 0:
            verdict = "is faster than the seed's EFA figure"
        else:
            verdict = "is slower than the seed's EFA figure"
        share = model.proxy_share(tpot) * 100
        tail = ""
        if lv.max_itl_ms is not None:
            tail = f"; worst gap {lv.max_itl_ms:.0f} ms " + (
                "(below the seed's EFA worst)"
                if lv.max_itl_ms <= seed.efa_max_itl_ms
                else "(above the seed's EFA worst: look at the ITL plot's tail)"
            )
        lines.append(
            f"- {lv.label}: mean TPOT {tpot:.2f} ms {verdict} ({seed.efa_mean_tpot_ms:.1f} ms, {ratio * 100:+.0f}%); "
            f"the model puts {model.tpot_overhead_ms:.1f} ms ({share:.0f}%) of it on the CPU-proxy path{tail}."
        )
    return lines


def header(sweep: Sweep, *, plan: Plan, run_meta: dict[str, Any] | None) -> list[str]:
    """The report's opening: model and layout from the plan, the workload from the run's own records."""
    meta = run_meta or {}
    ran = workload.from_run(sweep, meta)
    lines = [f"# Benchmark report: {plan.name}", ""]
    if warning := workload.deployment_warning(ran, plan.name):
        lines += [f"> **Warning:** {warning}.", ""]
    lines += [f"- Model: {plan.model.id}; layout: {_layout(plan)}.", f"- Workload (from the run's records): {ran.line()}."]
    lines += cache_hit_line(sweep.levels)
    lines += [f"- Skipped {item}." for item in sweep.skipped]
    lines += [f"- **Warning:** {item}." for item in sweep.warnings]
    if meta:
        lines.append(
            f"- Run: {meta.get('job', '-')} of deployment {ran.deployment or workload.UNKNOWN}, image {meta.get('image', '-')}, "
            f"{meta.get('started', '-')} to {meta.get('finished', '-')}."
        )
    return lines


def markdown(
    sweep: Sweep,
    *,
    plan: Plan,
    seed: Seed,
    model: LatencyModel,
    validation: dict[str, Any] | None = None,
    run_meta: dict[str, Any] | None = None,
) -> str:
    levels = sweep.levels
    lines = header(sweep, plan=plan, run_meta=run_meta)
    lines += [
        "",
        "## Where you stand",
        "",
        f"The seed ran the same model and 2P2D layout on EFA and on a self-built RoCE cluster ({seed.citation}). "
        "Each cell of a concurrency column shows this run, and in brackets its difference from the seed's EFA figure.",
        "",
        *_table(
            ["metric", "seed RoCE", "seed EFA", *[lv.label for lv in levels]],
            comparison_rows(levels, seed, model),
        ),
        "",
        *_standing(levels, seed, model),
        "",
        "## Latency model",
        "",
        f"UCCL-EP on EFA routes every dispatch and combine through a CPU proxy thread, a fixed cost per cross-node message that IBGDA on "
        f"RoCE does not pay. Decode sends {model.messages_per_token} cross-node MoE messages per output token (the plan: "
        f"{plan.model.moe_layers} MoE layers x dispatch + combine), so the model predicts a TPOT overhead of "
        f"**{model.formula}** per output token. The seed measured a gap of {seed.mean_tpot_gap_ms:g} ms "
        f"(RoCE {seed.roce_mean_tpot_ms:.1f} ms, EFA {seed.efa_mean_tpot_ms:.1f} ms, {seed.mean_tpot_change_pct:+.0f}%).",
        "",
        f"Its other side: SRD sprays each message over many paths, so congestion on one path does not stall a token; the seed's worst "
        f"gap was {seed.roce_max_itl_ms:.0f} ms on RoCE and {seed.efa_max_itl_ms:.0f} ms on EFA ({seed.max_itl_ratio:.1f}x lower, "
        f"{seed.max_itl_change_pct:+.0f}%).",
        "",
        "## Results by concurrency",
        "",
        *_table(
            [
                "concurrency",
                "completed",
                "output tok/s",
                "TTFT mean / p99 (ms)",
                "TPOT mean / p99 (ms)",
                "ITL mean / p99 / max (ms)",
                "E2E mean (ms)",
                "proxy share of TPOT",
            ],
            [
                [
                    lv.label,
                    f"{lv.completed}" + (f" of {lv.prompts}" if lv.prompts else ""),
                    _f(lv.get("output_throughput"), 0),
                    f"{_f(lv.get('mean_ttft_ms'), 0)} / {_f(lv.get('p99_ttft_ms'), 0)}",
                    f"{_f(lv.get('mean_tpot_ms'), 2)} / {_f(lv.get('p99_tpot_ms'), 2)}",
                    f"{_f(lv.get('mean_itl_ms'), 2)} / {_f(lv.get('p99_itl_ms'), 2)} / {_f(lv.max_itl_ms, 0)}",
                    _f(lv.get("mean_e2e_latency_ms"), 0),
                    f"{model.proxy_share(lv.get('mean_tpot_ms') or 0.0) * 100:.0f}%" if lv.get("mean_tpot_ms") else "-",
                ]
                for lv in levels
            ],
        ),
        "",
    ]
    if sweep.failed:
        lines += ["Levels without results:", ""]
        lines += [f"- c={c}: {reason}" for c, reason in sorted(sweep.failed.items())]
        lines.append("")
    errors = [(lv.label, e) for lv in levels for e in lv.errors[:1]]
    if errors:
        lines += ["Failed requests (first error per level):", ""]
        lines += [f"- {c}: {e[:200]}" for c, e in errors]
        lines.append("")
    lines += [
        "## Plots",
        "",
        f"![Inter-token latency distribution]({ITL_PLOT})",
        "",
        f"![TPOT against concurrency]({TPOT_PLOT})",
        "",
        f"![TTFT against concurrency]({TTFT_PLOT})",
        "",
    ]
    if validation is not None:
        lines += _validation_section(validation)
    lines += [
        "## Read with care",
        "",
        "- The seed did not publish its concurrency, input/output lengths or absolute TTFT; each column is compared with one seed point of "
        "unknown load. Its absolute TPOT values are derived from the published gap and percentage; its EFA worst gap from RoCE's and -73%. "
        "On TTFT it says only that EFA and RoCE differ by 9%, not which is faster.",
        "- bench_serving measures at the client, through the router: TTFT includes prefill, the KV transfer and the first decode step; "
        "ITL includes the router's streaming.",
        "- Max ITL is one sample: rerun before drawing conclusions from it.",
        "",
    ]
    return "\n".join(lines)


# --- A/B: two runs side by side ------------------------------------------------------------------------

COMPARE_REPORT = "compare.md"
# (row label, bench_serving metric, digits, lower is better)
COMPARE_METRICS = (
    ("mean TTFT (ms)", "mean_ttft_ms", 0, True),
    ("p99 TTFT (ms)", "p99_ttft_ms", 0, True),
    ("mean TPOT (ms)", "mean_tpot_ms", 2, True),
    ("p99 TPOT (ms)", "p99_tpot_ms", 2, True),
    ("mean ITL (ms)", "mean_itl_ms", 2, True),
    ("p99 ITL (ms)", "p99_itl_ms", 2, True),
    ("input tok/s", "input_throughput", 0, False),
    ("output tok/s", "output_throughput", 0, False),
    ("prefix cache hit rate (%)", CACHE_HIT_METRIC, 1, False),
)


def backend_label(run_meta: dict[str, Any] | None) -> str:
    """Each role's MoE all-to-all backend as the run recorded it (run.json "roles", written by `pdkit bench`)."""
    roles = (run_meta or {}).get("roles")
    if not isinstance(roles, dict) or not roles:
        return "backend not recorded"
    parts = []
    for name, role in roles.items():
        role = role if isinstance(role, dict) else {}
        mode = f" {role['deepep_mode']}" if role.get("deepep_mode") else ""
        parts.append(f"{name} {role.get('moe_a2a_backend', '?')}{mode}")
    return ", ".join(parts)


def router_label(run_meta: dict[str, Any] | None) -> str:
    """The router's policies as the run recorded them (run.json "router_policies"), or nothing."""
    policies = (run_meta or {}).get("router_policies")
    if not isinstance(policies, dict):
        return ""
    ranks = ", dp-aware" if policies.get("dp_aware") else ""
    return f"; router prefill {policies.get('prefill', '?')}, decode {policies.get('decode', '?')}{ranks}"


def cache_hit_line(levels: Sequence[Level]) -> list[str]:
    """The prefix cache hit rate per level, when the run recorded one (`pdkit bench --workload shared-prefix`)."""
    rates = [(lv.label, rate) for lv in levels if (rate := lv.get(CACHE_HIT_METRIC)) is not None]
    if not rates:
        return []
    each = ", ".join(f"{label} {rate:.1f}%" for label, rate in rates)
    return [f"- Prefix cache hit rate (bench_serving --cache-report: cached prompt tokens over prompt tokens, found on prefill): {each}."]


def _verdict(a: float | None, b: float | None, lower_is_better: bool) -> str:
    if a is None or b is None or a <= 0:
        return "-"
    change = b / a - 1
    better = change < 0 if lower_is_better else change > 0
    return f"{change * 100:+.0f}%" + ("" if abs(change) < 0.005 else " (B better)" if better else " (A better)")


def compare_markdown(a: Sweep, b: Sweep, *, a_name: str, b_name: str, a_meta: dict[str, Any] | None, b_meta: dict[str, Any] | None) -> str:
    """TTFT, TPOT, ITL and throughput of two runs per concurrency level, each run labelled by its backends."""
    labels = {
        "A": f"{a_name} ({backend_label(a_meta)}{router_label(a_meta)})",
        "B": f"{b_name} ({backend_label(b_meta)}{router_label(b_meta)})",
    }
    lines = ["# A/B benchmark comparison", "", f"- A: {labels['A']}", f"- B: {labels['B']}"]
    for which, meta in (("A", a_meta), ("B", b_meta)):
        if not (meta or {}).get("roles"):
            lines.append(f"- **Warning:** {which} has no per-role backend in its run.json (not a `pdkit bench` run, or an older one).")
    workloads = {which: workload.from_run(sweep, meta).line() for which, sweep, meta in (("A", a, a_meta), ("B", b, b_meta))}
    if workloads["A"] != workloads["B"]:
        lines.append(
            f"- **Warning:** the workloads differ, so the runs are not comparable as they stand: A {workloads['A']}; B {workloads['B']}."
        )
    else:
        lines.append(f"- Workload (both runs' records): {workloads['A']}.")
    by_key = {lv.key: lv for lv in a.levels}, {lv.key: lv for lv in b.levels}
    both = by_key[0] | by_key[1]  # every level of either run, for its label
    rows = []
    for key in sorted(both):
        la, lb = by_key[0].get(key), by_key[1].get(key)
        label = both[key].label
        for name, metric, digits, lower in COMPARE_METRICS:
            va = la.get(metric) if la else None
            vb = lb.get(metric) if lb else None
            if va is None and vb is None:
                continue
            rows.append([label, name, _f(va, digits), _f(vb, digits), _verdict(va, vb, lower)])
    lines += ["", *_table(["level", "metric", "A", "B", "B vs A"], rows), ""]
    only = [lv.label for lv in a.levels if lv.key not in by_key[1]] + [lv.label for lv in b.levels if lv.key not in by_key[0]]
    if only:
        lines += [f"Levels in one run only: {', '.join(only)}.", ""]
    lines += [
        "Read with care: one run per side; TTFT includes prefill, the KV transfer and the first decode step, so a prefill "
        "backend shows in TTFT and input tok/s, a decode backend in TPOT and ITL. Rerun both before deciding.",
        "",
    ]
    return "\n".join(lines)


def _validation_section(data: dict[str, Any]) -> list[str]:
    rows = data.get("checks", [])
    failed = [r for r in rows if r.get("status") == "FAIL"]
    verdict = (
        "all checks passed" if not failed else f"{len(failed)} check(s) failed: the numbers above may reflect the fabric, not the model"
    )
    lines = ["## Fabric validation", "", f"`pdkit validate` run {data.get('run_id', '-')} ({data.get('finished', '-')}): {verdict}.", ""]
    lines += _table(
        ["status", "check", "target", "measured", "threshold", "next step"],
        [
            [
                r.get("status", ""),
                r.get("name", ""),
                r.get("target", ""),
                r.get("measured", ""),
                r.get("threshold", ""),
                r.get("next_step", ""),
            ]
            for r in rows
        ],
    )
    lines.append("")
    return lines


def write(
    sweep: Sweep,
    out_dir: Path,
    *,
    plan: Plan,
    seed: Seed,
    model: LatencyModel,
    validation: dict[str, Any] | None = None,
    run_meta: dict[str, Any] | None = None,
) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = [
        plot_itl(sweep, seed, out_dir / ITL_PLOT),
        plot_tpot(sweep, seed, model, out_dir / TPOT_PLOT),
        plot_ttft(sweep, seed, out_dir / TTFT_PLOT),
    ]
    report = out_dir / REPORT
    report.write_text(markdown(sweep, plan=plan, seed=seed, model=model, validation=validation, run_meta=run_meta))
    return [report, *plots]
