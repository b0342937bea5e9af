"""The test suite's CI policy, a pytest plugin (tests/conftest.py loads it): under CI (``CI=true``) a test that skips
for a reason CI can remove fails, naming the reason. CI has the data folder beside the checkout, installs every test
dependency (``scripts/setup.sh --test``) and imports every project module; only skips that say something about the
machine itself (it has CUDA; root can make no read-only mount) are accepted there."""

from __future__ import annotations

import os

import pytest

#: The start of each skip reason CI accepts: facts about the machine, not about what CI installs or lays out.
MACHINE_SKIPS = ("this machine has CUDA", "running as root, and no read-only mount can be made here")


def _reason(report) -> str:
    return report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


def _enforce(report) -> None:
    if os.environ.get("CI") != "true" or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _reason(report).removeprefix("Skipped: ")
    if not reason.startswith(MACHINE_SKIPS):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, where nothing may skip that CI can provide: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _enforce(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _enforce(outcome.get_result())
