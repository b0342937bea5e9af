"""tests/ci_policy.py: under CI a skip that CI could remove fails; a machine fact still skips; outside CI both skip."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

SKIPPING = """
import pytest

def test_needs_the_data():
    pytest.skip("the project's data folder is not here (data; set MIRAGE_TEST_DATA)")

def test_needs_a_package():
    pytest.importorskip("a_package_that_is_not_installed_anywhere")

def test_on_a_cuda_machine():
    pytest.skip("this machine has CUDA: bitsandbytes may run")
"""

MODULE_SKIP = """
import pytest
pytest.skip("context-cite is not installed", allow_module_level=True)

def test_never():
    pass
"""


@pytest.mark.parametrize("ci", ["true", None])
def test_removable_skips_fail_under_ci_and_machine_skips_do_not(pytester, monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makepyfile(test_skipping=SKIPPING, test_module_skip=MODULE_SKIP)
    result = pytester.runpytest("-p", "ci_policy", "-rA", "--continue-on-collection-errors")
    if ci:
        result.assert_outcomes(failed=2, skipped=1, errors=1)
        result.stdout.fnmatch_lines(["*skipped under CI*data folder is not here*"])
    else:
        result.assert_outcomes(skipped=4)
