"""Per-module mutation score from mutmut's results (make mutation).

mutmut 3 leaves one `mutants/<path>.py.meta` per mutated file with the exit code of the tests for each mutant
(1 killed, 0 survived; mutmut.stats.status_by_exit_code). A mutant listed in tests/mutation/equivalent.toml
with its reason is left out of the score; every other survivor is printed with `mutmut show NAME`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
# The modules under mutation and the fast tests that must kill their mutants (the same files are the
# pytest selection of [tool.mutmut] in pyproject.toml; mutmut runs, per mutant, only those that reach it).
MODULES: dict[str, list[str]] = {
    "pdkit.ops.purchase": ["tests/test_purchase_once.py", "tests/test_capacity_purchase.py"],
    "pdkit.model.reservation": ["tests/test_reservation_rules.py", "tests/test_guard_rollback.py"],
    "pdkit.functions.reservation_guard": [
        "tests/test_guard_protocol.py",
        "tests/test_guard_propagation.py",
        "tests/test_guard_rollback.py",
    ],
    "pdkit.functions.block_clock": ["tests/test_block_clock.py", "tests/test_observability_functions.py"],
    "pdkit.model.profile_files": [
        "tests/test_profile_loader_edges.py",
        "tests/test_profile_bounds.py",
        "tests/test_profile_fixes.py",
        "tests/test_profile_errors.py",  # last: its CLI and `cdk synth` runs take seconds each
    ],
    "pdkit.pods.weights_manifest": ["tests/test_weights_verify.py", "tests/test_serving_weights.py", "tests/test_weights_cmd.py"],
    "pdkit.functions.block_lifecycle": ["tests/test_block_drain.py", "tests/test_functions.py"],
    "pdkit.render.serving.drain": ["tests/test_block_drain.py"],
    "pdkit.render.serving.sglang_args": ["tests/test_serving_args.py", "tests/test_observability_ranks.py"],
    "pdkit.render.serving.router_args": ["tests/test_serving_args.py"],
    "pdkit.pods.staging": ["tests/test_staging_mutants.py", "tests/test_serving_weights.py", "tests/test_weights_import.py"],
    # Validation and the network-interface layout only (PLAN_FUNCTIONS in mk/mutation.mk); the rest of the
    # plan (estimates, rendering helpers) is not under mutation and its mutants stay unrun, out of the score.
    "pdkit.model.plan": [
        "tests/test_plan_rules_mutants.py",
        "tests/test_plan.py",
        "tests/test_plan_interfaces.py",
        "tests/test_profile_fixes.py",
        "tests/test_serving_args.py",
        "tests/test_a2a_backend.py",
        "tests/test_rehearsal_profile.py",
        "tests/test_profile_errors.py",
    ],
}
# Modules of the list that a later change puts under mutation (none left).
PENDING: list[str] = []
KILLED = {1, 3}
SURVIVED = {0}


def module_of(mutant: str) -> str:
    """'pdkit.ops.purchase.x_buy__mutmut_3' and 'pdkit.ops.purchase.xǁCls ǁm__mutmut_1' -> 'pdkit.ops.purchase'."""
    parts = mutant.split(".")
    for i, part in enumerate(parts):
        if part.startswith(("x_", "xǁ")):
            return ".".join(parts[:i])
    raise ValueError(f"not a mutmut mutant name: {mutant}")


def equivalents(path: Path) -> dict[str, str]:
    """Name -> reason; an entry lists one `name` or several `names` that share the reason."""
    listed = tomllib.loads(path.read_text()).get("mutant", []) if path.exists() else []
    return {name: m["reason"] for m in listed for name in m.get("names", [m.get("name")]) if name}


def results(mutants_dir: Path) -> tuple[dict[str, int | None], dict[str, float]]:
    """Each mutant's exit code, and how long its test run took (mutmut's durations_by_key, wall seconds)."""
    codes: dict[str, int | None] = {}
    seconds: dict[str, float] = {}
    for meta in mutants_dir.rglob("*.py.meta"):
        data = json.loads(meta.read_text())
        codes.update(data["exit_code_by_key"])
        seconds.update(data.get("durations_by_key", {}))
    return codes, seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mutants", type=Path, default=ROOT / "mutants")
    ap.add_argument("--equivalent", type=Path, default=ROOT / "tests" / "mutation" / "equivalent.toml")
    ap.add_argument("--fail-under", type=float, default=0.0, help="exit 1 when a module scores below this percentage")
    ap.add_argument("--markdown", action="store_true", help="the README table")
    ap.add_argument("--module", action="append", default=[], help="score only this module (repeatable; make mutation MODULE=...)")
    args = ap.parse_args(argv)
    unknown = [m for m in args.module if m not in MODULES]
    if unknown:
        print(f"not a module under mutation: {', '.join(unknown)}; one of: {', '.join(MODULES)}", file=sys.stderr)
        return 2

    selection = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["pytest_add_cli_args_test_selection"]
    killers = {f for files in MODULES.values() for f in files}
    if set(selection) != killers:
        print(f"[tool.mutmut] selects {sorted(set(selection) ^ killers)} differently from MODULES here: make them agree", file=sys.stderr)
        return 2
    codes, seconds = results(args.mutants)
    if not codes:
        print(f"no mutmut results under {args.mutants}: run `make mutation` first", file=sys.stderr)
        return 2
    equivalent = equivalents(args.equivalent)
    stale = sorted(n for n in set(equivalent) - set(codes) if not args.module or module_of(n) in args.module)
    rows = []
    survivors: list[str] = []
    by_module: dict[str, dict[str, int | None]] = defaultdict(dict)
    for name, code in codes.items():
        by_module[module_of(name)][name] = code
    low = False
    for module in args.module or MODULES:
        mine = by_module.get(module, {})
        counted = {n: c for n, c in mine.items() if n not in equivalent}
        killed = sum(c in KILLED for c in counted.values())
        unchecked = sum(c is None for c in counted.values())
        alive = sorted(n for n, c in counted.items() if c is not None and c not in KILLED)
        survivors += alive
        scored = len(counted) - unchecked
        score = 100.0 * killed / scored if scored else 0.0
        low |= scored == 0 or score < args.fail_under
        spent = sum(seconds.get(n, 0.0) for n in mine)
        rows.append((module, len(mine), len(mine) - len(counted), killed, len(alive), unchecked, score, spent))

    if args.markdown:
        print("| module | mutants | equivalent | killed | survived | score |")
        print("|---|---|---|---|---|---|")
        for module, total, eq, killed, alive, _unchecked, score, _spent in rows:
            print(f"| `{module}` | {total} | {eq} | {killed} | {alive} | {score:.1f}% |")
        for module in PENDING:
            print(f"| {module} | pending | | | | |")
        return 0
    # seconds: the module's mutant test runs added up (the wall time is about this over MUTATION_JOBS)
    print(f"{'module':40} {'mutants':>7} {'equiv':>6} {'killed':>6} {'alive':>6} {'unrun':>6} {'score':>7} {'seconds':>8}")
    for module, total, eq, killed, alive, unchecked, score, spent in rows:
        print(f"{module:40} {total:7} {eq:6} {killed:6} {alive:6} {unchecked:6} {score:6.1f}% {spent:8.0f}")
    for name in survivors:
        print(f"survived (or timed out): {name}   -> mutmut show {name}")
    for name in stale:
        print(f"tests/mutation/equivalent.toml lists {name}, which mutmut no longer generates: remove it")
    if low and args.fail_under:
        print(f"a module scores below {args.fail_under:.0f}%: kill its survivors with a sharper test, or list a truly equivalent one")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
