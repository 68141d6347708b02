"""JupyterLab 4 or Notebook 7 on loopback, for the tests that drive it with Debian's headless
Chromium through Playwright (tests/browser, tests/panel/test_panel_browser.py, tools/screenshots.py).

Playwright's own browser download cannot work on these machines, so the browser is the system
``chromium`` (``apt-get install -y chromium``). Everything started here is stopped at the end:
the server is asked to shut down (which stops its kernels, and a notebook kernel's workers die
with it), then anything of its process tree still alive is killed. Each tier's fixtures are module
fixtures built on :func:`serve`, so no server is shared between test modules.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .modules import require
from .processes import end_processes, tree

#: The browser: $MWNOTEBOOK_CHROMIUM, else the first ``chromium`` / ``chromium-browser`` on PATH
#: (Debian and Ubuntu name the binary differently); None when there is none.
CHROMIUM = os.environ.get("MWNOTEBOOK_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
REPO = Path(__file__).resolve().parents[1]
#: Where the browser tests put their screenshots and measurements.
ARTIFACTS = REPO / "artifacts"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Lab:
    """A running JupyterLab server: where it is and how to reach it."""

    url: str
    token: str
    root: Path
    process: subprocess.Popen
    log_path: Path
    app: str = "lab"  # "lab": JupyterLab 4; "notebook": Notebook 7

    def notebook_url(self, name: str) -> str:
        if self.app == "notebook":
            return f"{self.url}/notebooks/{name}?token={self.token}"
        # ``reset``: a fresh workspace, so the tabs an earlier test opened on this server are not
        # restored beside this notebook (their cells would count among the page's cells)
        return f"{self.url}/lab/tree/{name}?reset&token={self.token}"

    def api(self, path: str, method: str = "GET") -> object:
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


def _stop_tree(process: subprocess.Popen, lab: Lab | None) -> None:
    procs = tree(process.pid)  # listed first: the server's shutdown re-parents what it leaves
    if lab is not None and process.poll() is None:
        try:
            lab.api("/api/shutdown", method="POST")
        except OSError:
            pass
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            pass
    end_processes(procs, grace=0)


def start_lab(root: Path, app: str = "lab") -> Lab:
    """Start JupyterLab (``app="notebook"``: Notebook 7) serving ``root`` on loopback (random port
    and token); wait until it answers. Stop it with :func:`stop_lab`. Raises RuntimeError when it
    does not start."""
    port, token = _free_port(), secrets.token_hex(16)
    settings = root / ".settings"
    news = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True, exist_ok=True)
    news.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))  # no pop-up, no network
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(root / ".config"), JUPYTERLAB_SETTINGS_DIR=str(settings),
               JUPYTER_RUNTIME_DIR=str(root / ".runtime"), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "jupyterlab" if app == "lab" else "notebook", "--no-browser", "--ip=127.0.0.1",
           f"--port={port}", f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}",
           "--LabServerApp.announcements_url=", "--ServerApp.shutdown_no_activity_timeout=900"]
    if app == "lab":
        cmd += [f"--LabApp.workspaces_dir={root / '.workspaces'}", "--LabApp.extension_manager=readonly"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log_path = root / "lab.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(cmd, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    server = Lab(f"http://127.0.0.1:{port}", token, root, process, log_path, app)
    deadline = time.monotonic() + 90
    while True:
        try:
            server.api("/api/status")
            return server
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                stop_lab(server)
                raise RuntimeError(f"JupyterLab did not start:\n{server.log_tail()}") from None
            time.sleep(0.3)


def stop_lab(server: Lab) -> None:
    _stop_tree(server.process, server)


def serve(tmp_path_factory: pytest.TempPathFactory, app: str, prefix: str = "") -> Iterator[Lab]:
    """The body of a module fixture: a server of ``app`` ("lab" or "notebook") in a fresh temporary
    directory (named ``prefix + app``) for as long as the fixture lives; skips when Chromium,
    Playwright or the front end is missing, fails when the server does not start."""
    if CHROMIUM is None or not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium ({CHROMIUM or 'chromium is not on PATH'}): apt-get install -y chromium, "
                    "or set MWNOTEBOOK_CHROMIUM to the browser's path")
    require("playwright.sync_api", "pip install -e '.[test]'")
    require("jupyterlab" if app == "lab" else "notebook", "pip install -e '.[test]'")
    try:
        server = start_lab(tmp_path_factory.mktemp(prefix + app), app)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield server
    finally:
        stop_lab(server)


def artifacts_path() -> Path:
    """``artifacts/`` of the repository, made if missing."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
