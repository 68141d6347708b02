"""The CI rule of tests/_plugins/no_skips.py, run in a child pytest: with MWNOTEBOOK_NO_SKIPS=1 a
skip (in a test, a ``skipif`` mark, a module-level optional import) fails the run; without it the
same run passes with the skips reported. testbed/modules.py skips only for an absent module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SKIPPING = '''
import pytest
from testbed.modules import require

def test_skips_inside():
    pytest.skip("no tool here")

@pytest.mark.skipif(True, reason="never here")
def test_skipif():
    pass

def test_absent_module():
    require("mwnotebook_no_such_module", "pip install nothing")

@pytest.mark.xfail(reason="expected failures are not skips", strict=True)
def test_expected_failure():
    assert False
'''

MODULE_SKIP = '''
from testbed.modules import require
require("mwnotebook_no_such_module", "pip install nothing")

def test_never_collected():
    pass
'''


def _run(tmp_path: Path, files: dict[str, str], no_skips: bool) -> subprocess.CompletedProcess[str]:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    # No third-party plugins: the rule under test is the only one the child pytest needs (and each
    # autoloaded plugin costs the child seconds of imports).
    env = {**os.environ, "PYTHONPATH": str(REPO), "MWNOTEBOOK_NO_SKIPS": "1" if no_skips else "",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests._plugins.no_skips", "-p", "no:cacheprovider",
                           "-q", "-rA", "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
                           *files], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("files", [{"test_a.py": SKIPPING}, {"test_b.py": MODULE_SKIP, "test_ok.py": "def test_ok():\n    pass\n"}], ids=["in-test", "module"])
def test_a_skip_passes_locally_and_fails_on_ci(tmp_path: Path, files: dict[str, str]) -> None:
    local = _run(tmp_path, files, no_skips=False)
    assert local.returncode == 0, local.stdout + local.stderr
    assert "skipped" in local.stdout and " failed" not in local.stdout, local.stdout
    ci = _run(tmp_path, files, no_skips=True)
    assert ci.returncode != 0, ci.stdout
    assert "MWNOTEBOOK_NO_SKIPS=1 makes every skip a failure" in ci.stdout, ci.stdout
    assert "skipped" not in ci.stdout.splitlines()[-1], ci.stdout


def test_every_skip_in_a_test_file_fails_on_ci_but_an_xfail_stays(tmp_path: Path) -> None:
    ci = _run(tmp_path, {"test_a.py": SKIPPING}, no_skips=True)
    # A skipif mark is applied at setup, so that skip becomes an error rather than a failure.
    assert ci.stdout.splitlines()[-1].startswith("2 failed, 1 xfailed, 1 error"), ci.stdout


def test_a_broken_module_fails_instead_of_skipping(tmp_path: Path) -> None:
    (tmp_path / "mwnotebook_broken_probe.py").write_text("import mwnotebook_its_missing_dependency\n")
    files = {"test_c.py": "from testbed.modules import require\n\n"
                          "def test_broken():\n    require('mwnotebook_broken_probe', 'x')\n"}
    run = _run(tmp_path, files, no_skips=False)
    assert run.returncode == 1, run.stdout
    assert "ModuleNotFoundError: No module named 'mwnotebook_its_missing_dependency'" in run.stdout, run.stdout
