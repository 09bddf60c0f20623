"""`make bench`: wall-clock numbers for the kit's goals. Prints a table; writes benchmarks/out/bench.json.

Goals: kit synth <= 2x the reference app and <= 20 s median; warm `make test` <= 5 min; `pdkit --help`
within 0.1 s of a bare interpreter start (the same virtualenv's `python -c pass`, timed in the same run,
interleaved, so a loaded machine slows both alike). This is a measurement, not a test: it never fails on a
slow run. `--cli-only` times the CLI alone (seconds instead of minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def timed(cmd: list[str], *, env: dict[str, str] | None = None, findings_ok: bool = False) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, check=False, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    # The reference app acknowledges nothing, so its synth ends "with errors" after doing all the work.
    if done.returncode and not (findings_ok and "Synthesis finished with errors" in done.stderr):
        raise SystemExit(f"bench: {' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return elapsed


def synth_seconds(app: str | None, runs: int) -> list[float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    out = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = ["cdk", "synth", "--quiet", "--no-notices", "-o", tmp] + (["--app", app] if app else [])
            out.append(timed(cmd, env=env, findings_ok=app is not None))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="synth runs per app (median reported)")
    parser.add_argument("--skip-test", action="store_true", help="do not time a warm `make test`")
    parser.add_argument("--cli-only", action="store_true", help="time only `pdkit --help` against a bare interpreter start")
    args = parser.parse_args()

    results: dict[str, Any] = cli_seconds(CLI_RUNS)
    rows = [
        (f"bare python -c pass (median of {CLI_RUNS})", f"{results['bare_python_s']:.3f} s", ""),
        (f"pdkit --help (median of {CLI_RUNS})", f"{results['pdkit_help_s']:.3f} s", ""),
        ("pdkit --help over bare start", f"{results['pdkit_help_over_bare_s']:.3f} s", "<= 0.1 s"),
    ]
    if args.cli_only:
        return report(results, rows)
    kit = synth_seconds(None, args.runs)
    ref = synth_seconds(f"{sys.executable} benchmarks/reference_app/app.py", args.runs)
    results.update(
        {
            "kit_synth_s": statistics.median(kit),
            "reference_synth_s": statistics.median(ref),
            "kit_to_reference": statistics.median(kit) / statistics.median(ref),
        }
    )
    results["runs"] = {**results["runs"], "kit": kit, "reference": ref}
    if not args.skip_test:
        timed(["make", "test"])  # warm-up: venv, node_modules and caches in place
        results["warm_make_test_s"] = timed(["make", "test"])

    rows += [
        ("kit cdk synth (median)", f"{results['kit_synth_s']:.1f} s", "<= 20 s"),
        ("reference cdk synth (median)", f"{results['reference_synth_s']:.1f} s", ""),
        ("kit / reference", f"{results['kit_to_reference']:.2f}x", "<= 2x"),
    ]
    if "warm_make_test_s" in results:
        rows.append(("warm make test", f"{results['warm_make_test_s']:.0f} s", "<= 300 s"))
    return report(results, rows)


CLI_RUNS = 20


def cli_seconds(runs: int) -> dict[str, Any]:
    """`pdkit --help` and a bare start of the same interpreter, alternated so that load falls on both alike."""
    bare: list[float] = []
    cli: list[float] = []
    for _ in range(runs):
        bare.append(timed([str(ROOT / ".venv/bin/python"), "-c", "pass"]))
        cli.append(timed([str(ROOT / ".venv/bin/pdkit"), "--help"]))
    return {
        "bare_python_s": statistics.median(bare),
        "pdkit_help_s": statistics.median(cli),
        "pdkit_help_over_bare_s": statistics.median(c - b for c, b in zip(cli, bare, strict=True)),
        "runs": {"bare_python": bare, "pdkit_help": cli},
    }


def report(results: dict[str, Any], rows: list[tuple[str, str, str]]) -> int:
    for name, value, goal in rows:
        print(f"{name:32} {value:>10}   {goal}")
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "bench.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
