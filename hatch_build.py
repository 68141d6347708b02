"""Hatchling build hook: builds the live chart's JavaScript (``js/``) and the clusters panel's
JupyterLab extension (``labextension/``) into the package.

``pip install -e .`` and ``pip wheel .`` run ``npm ci && npm run build`` in ``js/``, which bundles
``js/src`` with uPlot (from the npm registry, pinned by ``js/package-lock.json``) into
``mwnotebook/frontend/chart/static/live_chart.js`` (git-ignored, shipped in the wheel). No third-party
JavaScript is committed. Without Node.js/npm the build stops with a message that says what to
install (``MWNOTEBOOK_SKIP_JS=1`` builds without the bundle: the live chart then falls back to a
picture).

The clusters panel is a prebuilt (federated) JupyterLab 4 extension: ``npm ci && npm run build`` in
``labextension/`` (``@jupyterlab/builder``, with the core's shared packages read from the
``jupyterlab`` build requirement) writes ``mwnotebook/server/labextension/`` (git-ignored), which the
wheel installs as ``share/jupyter/labextensions/mwnotebook-clusters`` (pyproject.toml's shared-data),
where JupyterLab and Notebook 7 find it. ``MWNOTEBOOK_SKIP_JS=1`` skips it too (no panel; the
server's API still works).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

log = logging.getLogger(__name__)

BUNDLE = "mwnotebook/frontend/chart/static/live_chart.js"
LABEXTENSION = "mwnotebook/server/labextension"


class JavaScriptBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        js = root / "js"
        bundle = root / BUNDLE
        if self.target_name == "sdist" or not (js / "package.json").exists():
            return  # an sdist carries js/ itself; a wheel built from it runs this hook again
        if os.environ.get("MWNOTEBOOK_SKIP_JS") == "1":
            self.app.display_warning("MWNOTEBOOK_SKIP_JS=1: the live chart widget's JavaScript is not built")
        else:
            build_bundle(js)
            if (root / "labextension" / "package.json").exists():
                build_labextension(root / "labextension")
        if bundle.exists():
            build_data["artifacts"].append(BUNDLE)
        if (root / LABEXTENSION / "package.json").exists():
            build_data["artifacts"].append(LABEXTENSION)


def build_bundle(js: Path) -> None:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise RuntimeError(
            "mwnotebook's live chart is built with Node.js and npm, which were not found on PATH.\n"
            "Install Node.js 18 or newer (Debian/Ubuntu: apt-get install -y nodejs npm; or "
            "https://nodejs.org), then run the install again. To install without the live chart "
            "widget, set MWNOTEBOOK_SKIP_JS=1.")
    for args in ([npm, "ci", "--no-audit", "--no-fund"], [npm, "run", "build"]):
        done = subprocess.run(args, cwd=js, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building the live chart failed: {' '.join(args[1:])} in {js}:\n"
                               f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def build_labextension(source: Path) -> None:
    """``npm ci && npm run build`` in ``labextension/``; this interpreter's jupyterlab gives the core's packages."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise RuntimeError("mwnotebook's clusters panel is built with Node.js and npm, which were not found on "
                           "PATH (see the live chart's message above; MWNOTEBOOK_SKIP_JS=1 skips both).")
    env = {**os.environ, "PYTHON": sys.executable}
    for args in ([npm, "ci", "--no-audit", "--no-fund"], [npm, "run", "build"]):
        done = subprocess.run(args, cwd=source, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"building the clusters panel failed: {' '.join(args[1:])} in {source}:\n"
                               f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
