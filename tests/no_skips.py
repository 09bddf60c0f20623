"""pytest plugin: on CI (`CI` set, as .ci/run and every CI service do) a skipped test fails.

A skip on CI means a prerequisite `make test` should have built is missing, and the check it guards silently
stopped running. Loaded by tests/conftest.py; tests/test_no_skips.py checks it.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid} skipped on CI ({reason}): CI runs every test; build its prerequisite in `make test`"
