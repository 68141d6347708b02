"""The students' environment is what a teacher installs on a hub: the wheel built once by
``python -m build``, installed with ``[tensorflow-cpu,lab]`` into a venv of Debian's python3 with
Node.js off PATH (tools/test.sh). It still has the live chart's bundle and the clusters panel's
JupyterLab extension, enabled, and mwnotebook comes from the wheel, not from this checkout."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.hub import HUB_VENV

pytestmark = [pytest.mark.hub]


def venv_env(home: Path) -> dict[str, str]:
    """The venv's bin only on PATH, as when the wheel was installed: no node, no npm."""
    if not (HUB_VENV / "bin" / "python").exists():
        pytest.skip(f"no students' environment at {HUB_VENV}: bash tools/test.sh makes it")
    return {"PATH": str(HUB_VENV / "bin"), "HOME": str(home), "JUPYTER_CONFIG_DIR": str(home / ".jupyter")}


def test_the_wheel_installed_without_nodejs_has_the_panels_lab_extension_enabled(tmp_path: Path) -> None:
    env = venv_env(tmp_path)
    assert shutil.which("node", path=env["PATH"]) is None and shutil.which("npm", path=env["PATH"]) is None
    done = subprocess.run([str(HUB_VENV / "bin" / "jupyter"), "labextension", "list"], env=env,
                          capture_output=True, text=True, timeout=120)
    listed = done.stdout + done.stderr
    panel = [line for line in listed.splitlines() if "mwnotebook-clusters" in line]
    assert len(panel) == 1, listed
    assert "enabled" in panel[0] and "OK" in panel[0], listed


def test_the_wheel_has_the_live_charts_bundle_and_is_not_this_checkout(tmp_path: Path) -> None:
    env = venv_env(tmp_path)
    done = subprocess.run(
        [str(HUB_VENV / "bin" / "python"), "-c",
         "import pathlib, mwnotebook.frontend.chart as chart; p = pathlib.Path(chart.__file__).parent;"
         " print(p); print((p / 'static' / 'live_chart.js').stat().st_size)"],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    where, size = done.stdout.split()
    assert Path(where).is_relative_to(HUB_VENV), where
    assert int(size) > 10_000  # the bundle (uPlot and the chart's code), not a stub
