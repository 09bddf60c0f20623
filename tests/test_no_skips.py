"""On CI a skip is a failure (tests/no_skips.py), so a clean `make test` provably runs every test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pytest(tmp_path: Path, ci: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_skipping.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.skipif(True, reason='no venv')\n"
        "def test_needs_a_venv():\n    pass\n\n"
        "def test_runs():\n    pytest.skip('not built')\n\n"
        "@pytest.mark.xfail(reason='known', strict=True)\n"
        "def test_expected_failure():\n    assert False\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci is not None else {})
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.no_skips",
            "--rootdir",
            str(tmp_path),
            *args,
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )


def test_a_skip_fails_on_ci(tmp_path):
    result = _pytest(tmp_path, "true")
    assert result.returncode == 1, result.stdout
    # A skipif fires in setup (an error), pytest.skip() in the call (a failure); the xfail stays an xfail.
    assert "1 failed, 1 xfailed, 1 error" in result.stdout
    assert "test_needs_a_venv skipped on CI (Skipped: no venv)" in result.stdout
    assert "test_runs skipped on CI (Skipped: not built)" in result.stdout


def test_a_skip_fails_on_ci_in_xdist_workers_too(tmp_path):
    """`make test` runs pytest on xdist workers: the hook runs in the worker, and the controller reports the
    report the worker changed (pytest-xdist serializes reports after pytest_runtest_makereport)."""
    result = _pytest(tmp_path, "true", "--numprocesses", "2")
    assert result.returncode == 1, result.stdout
    # Were the hook's change lost between worker and controller, this would read "2 skipped, 1 xfailed".
    assert "1 failed, 1 xfailed, 1 error" in result.stdout
    assert "test_runs skipped on CI (Skipped: not built)" in result.stdout


def test_make_test_installs_everything_once_before_the_first_check():
    """GNU make's own dry run of `make test` (-B: as on a clean clone). Recursive $(MAKE) lines run even under
    -n (https://www.gnu.org/software/make/manual/html_node/MAKE-Variable.html), so this is the real order: both
    virtualenvs in one parallel step, then lint, types, pytest on its workers and the conformance run, one at a
    time, with nothing installed twice (-B reaches the second make through MAKEFLAGS; its -o keeps the installs
    done), and .venv-sglang made from a fresh shell's python3, not from the kit venv being built beside it."""
    # Nothing from the make this test may run under: its flags, TEST_JOBS/PYTHON3 given on its command line
    # (make exports those to recipes), and the kit venv's bin it put first on PATH.
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHON3", "TEST_JOBS", "MAKEFLAGS", "MAKELEVEL", "MFLAGS"}}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p and not Path(p).resolve().is_relative_to(ROOT))
    lines = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", "test"], capture_output=True, text=True, env=env, cwd=ROOT, check=True
    ).stdout.splitlines()
    stamps = [".venv/.installed", "node_modules/.installed", ".venv-sglang/.installed"]
    assert lines[0].split()[1:] == ["--no-print-directory", "--jobs=2", "--output-sync=target", *stamps]
    first_check = next(i for i, line in enumerate(lines) if line.startswith("make ") and i > 0)
    installs, checks = lines[:first_check], lines[first_check:]
    assert any("-r requirements-dev.txt" in line for line in installs)
    assert any("npm ci" in line for line in installs)
    assert any("--no-compile --require-hashes -r conformance/requirements-sglang.txt" in line for line in installs)
    assert checks[0].split()[1:] == [
        "--no-print-directory",
        "--jobs=1",
        *(x for s in stamps for x in ("-o", s)),
        "lint",
        "typecheck",
        "unit",
        "conformance",
    ]
    assert [line for line in checks if "pip install" in line or "npm ci" in line or "-m venv" in line] == []
    assert "pytest --numprocesses 2" in checks
    venv = next(line for line in installs if line.endswith("-m venv .venv-sglang"))
    assert not Path(venv.split()[0]).resolve().is_relative_to(ROOT)


def test_a_skip_stays_a_skip_on_a_developer_machine(tmp_path):
    result = _pytest(tmp_path, None)
    assert result.returncode == 0, result.stdout
    assert "2 skipped, 1 xfailed" in result.stdout
