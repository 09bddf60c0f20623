"""On CI a skip is a failure (tests/no_skips.py), so a clean `make test` provably runs every test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
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
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.no_skips", "--rootdir", str(tmp_path), str(tmp_path)],
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


def test_a_skip_stays_a_skip_on_a_developer_machine(tmp_path):
    result = _pytest(tmp_path, None)
    assert result.returncode == 0, result.stdout
    assert "2 skipped, 1 xfailed" in result.stdout
