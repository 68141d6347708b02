"""The CI rule: with ``MWNOTEBOOK_NO_SKIPS=1`` (set by .ci/run) every skip is a failure.

CI runs as root on a machine that has every tool the tests use (tools/test.sh installs them), so a
skip there means a tier did not run while the run still looked green. Locally skips stay allowed and
say why. Both kinds are caught: a skip while a test runs (``pytest.skip`` in a fixture or test,
``skipif`` marks) and a skip while a module is collected (a module-level optional import).
Expected failures (``xfail``) are not skips and are left alone.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

ENV = "MWNOTEBOOK_NO_SKIPS"


def enabled() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def _reason(longrepr: object) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        path, line, message = longrepr
        return f"{message} ({path}:{line})"
    return str(longrepr)


def _message(longrepr: object) -> str:
    return f"skipped, and {ENV}=1 makes every skip a failure: {_reason(longrepr)}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if enabled() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = _message(report.longrepr)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    if enabled() and report.skipped:
        report.outcome = "failed"
        report.longrepr = _message(report.longrepr)
    return report
