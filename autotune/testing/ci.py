"""Whether the tests run under CI, and the one rule that follows from it: there, a skipped test is a
failed one. CI installs everything the suite needs (Gemma 3 270M, PostgreSQL, Chromium and chromedriver,
objdump, a libllama with the DSpark symbols); a skip would hide that a part never ran."""

from __future__ import annotations

import os

import pytest

CI_ENV = "CI"
#: The values of CI that mean "this is CI" (GitHub Actions and most services set CI=true).
TRUTHY = ("1", "true", "yes", "on")


def under_ci() -> bool:
    """Whether CI is set to a truthy value (case and surrounding spaces ignored)."""
    return os.environ.get(CI_ENV, "").strip().lower() in TRUTHY


def failed_under_ci(report) -> None:
    """Turn a skipped report into a failure naming the skip's reason, under CI; leave it elsewhere
    (an expected failure, reported as skipped by `xfail`, stays what it is)."""
    if not report.skipped or hasattr(report, "wasxfail") or not under_ci():
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under CI ({CI_ENV}={os.environ[CI_ENV]}): {reason}; CI must provide what this test needs"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    failed_under_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    failed_under_ci(outcome.get_result())
