"""The clusters panel in a real JupyterLab 4 and a real Notebook 7, driven by headless Chromium.

One server per front end for the whole module. A cluster started by ``%%mwtrain`` in one notebook
shows in the panel opened from another; stopped from the panel, its processes are gone and the
notebook's next ``%%mwtrain`` starts fresh workers. A notebook kernel killed with SIGKILL leaves its
cluster shown as orphaned, then gone, with no process left. Screenshots and the measured latencies
go to artifacts/ (panel_*.png, panel_latency.json).
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import psutil
import pytest

from testbed.jupyter_lab import CHROMIUM, CHROMIUM_ARGS, Lab, artifacts_path, serve
from testbed.widget_page import cell_text, dismiss_dialog, run_cell
from tests._shared.waits import wait_for

pytestmark = pytest.mark.browser

TRAIN = "%%mwtrain --workers {n} --cpu\nimport os\nprint('worker pid', os.getpid())"
KERNEL_PID = "import os\nprint('kernel pid', os.getpid())"
ROW = ".mw-cluster"
LATENCY: dict[str, list[float]] = {}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from serve(tmp_path_factory, "lab", "panel-")


@pytest.fixture(scope="module")
def notebook7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from serve(tmp_path_factory, "notebook", "panel-")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module", autouse=True)
def latency_record(artifacts: Path) -> Iterator[None]:
    yield
    (artifacts / "panel_latency.json").write_text(json.dumps(LATENCY, indent=1))


@pytest.fixture(scope="module")
def artifacts() -> Path:
    return artifacts_path()


def write_notebook(server: Lab, name: str, *cells: str) -> str:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, server.root / name)
    return name


def open_notebook(browser: Any, server: Lab, name: str) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server.notebook_url(name))
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
    return page


def output_ints(page: Any, cell: int, label: str, count: int, timeout: float = 180.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = {int(p) for p in re.findall(rf"{label} (\d+)", cell_text(page, cell))}
        if len(found) >= count:
            return found
        time.sleep(0.3)
    raise AssertionError(f"cell {cell} printed no {count} '{label}' lines: {cell_text(page, cell)!r}")


def start_cluster(page: Any, workers: int) -> set[int]:
    run_cell(page, 0)  # %load_ext mwnotebook
    run_cell(page, 1, retry_s=60)
    return output_ints(page, 1, "worker pid", workers)


def open_panel(page: Any, app: str) -> None:
    if app == "lab":
        page.locator(".jp-SideBar .lm-TabBar-tab[data-id='mwnotebook-clusters']").click()
    else:  # Notebook 7: View > Left Sidebar > Show mwnotebook clusters
        dismiss_dialog(page)
        page.locator(".lm-MenuBar-itemLabel", has_text="View").click()
        page.locator(".lm-Menu-itemLabel", has_text="Left Sidebar").hover()
        page.locator(".lm-Menu-itemLabel", has_text="Show mwnotebook clusters").click()
    page.wait_for_selector(".mw-clusters h2", timeout=30_000)


def state_files(server: Lab) -> list[dict[str, Any]]:
    directory = server.root / ".runtime" / "mwnotebook"
    found = []
    for path in sorted(directory.glob("cluster-*.json")) if directory.exists() else []:
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass
    return found


def running(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.add(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def seen_in_panel(panel: Any, server: Lab, notebook: str, timeout: float = 30.0) -> tuple[Any, float]:
    """The panel's row of ``notebook``'s cluster, and the seconds from its state file's first
    appearance to the row (the file is written when the start begins)."""
    wait_for(lambda: [d for d in state_files(server) if (d["owner"].get("session_name") or "").endswith(notebook)],
             180, what=f"{notebook}'s state file")
    first = time.monotonic()
    row = panel.locator(ROW, has_text=notebook)
    row.wait_for(timeout=timeout * 1000)
    return row, time.monotonic() - first


def stop_from_panel(panel: Any, row: Any) -> None:
    row.locator(".mw-stop").click()
    panel.locator(".jp-Dialog .jp-mod-accept").click()


def check_flow(browser: Any, server: Lab, app: str, artifacts: Path) -> None:
    owner_name = write_notebook(server, f"owner-{app}.ipynb", "%load_ext mwnotebook", TRAIN.format(n=2), KERNEL_PID)
    viewer_name = write_notebook(server, f"viewer-{app}.ipynb", "1 + 1")
    owner = open_notebook(browser, server, owner_name)
    panel = open_notebook(browser, server, viewer_name)
    try:
        open_panel(panel, app)
        run_cell(owner, 0)  # %load_ext mwnotebook
        run_cell(owner, 1, retry_s=60)
        row, seconds = seen_in_panel(panel, server, owner_name)  # while the workers start
        LATENCY.setdefault(f"{app}: start begun (state file) -> panel row (s)", []).append(round(seconds, 3))
        workers = output_ints(owner, 1, "worker pid", 2)
        row.locator(".mw-cluster-head").click()
        wait_for(lambda: {int(t) for t in panel.locator(f"{ROW} .mw-pid").all_inner_texts() if t} == workers,
                 30, what="the workers' pids in the panel")
        assert "TF_CONFIG" in panel.locator(f"{ROW} .mw-workers").inner_text()
        panel.screenshot(path=str(artifacts / f"panel_{app}_running.png"))

        stop_from_panel(panel, row)
        stopped_at = time.monotonic()
        wait_for(lambda: not state_files(server), 60, what="the state file to go")
        file_gone = time.monotonic()
        panel.locator(ROW).wait_for(state="detached", timeout=30_000)
        LATENCY.setdefault(f"{app}: state file removed -> row gone (s)", []).append(round(time.monotonic() - file_gone, 3))
        LATENCY.setdefault(f"{app}: stop clicked -> row gone (s)", []).append(round(time.monotonic() - stopped_at, 3))
        wait_for(lambda: not running(workers), 30, what="the workers to end")
        panel.screenshot(path=str(artifacts / f"panel_{app}_stopped.png"))

        run_cell(owner, 1, retry_s=60)  # the next %%mwtrain: fresh workers
        fresh = wait_for(lambda: {int(p) for p in re.findall(r"worker pid (\d+)", cell_text(owner, 1))} - workers
                         if len(re.findall(r"worker pid (\d+)", cell_text(owner, 1))) >= 2 else None, 180,
                         what="fresh workers' output")
        assert len(fresh) == 2 and not fresh & workers
        row, _ = seen_in_panel(panel, server, owner_name)

        run_cell(owner, 2)
        kernel = output_ints(owner, 2, "kernel pid", 1).pop()
        os.kill(kernel, signal.SIGKILL)
        panel.locator(f"{ROW}[data-state='orphaned']").wait_for(timeout=30_000)
        panel.screenshot(path=str(artifacts / f"panel_{app}_orphaned.png"))
        panel.locator(ROW).wait_for(state="detached", timeout=30_000)
        assert not running(fresh) and not state_files(server)
    finally:
        dismiss_dialog(owner)
        owner.close()
        panel.close()


def test_lab_panel_lists_stops_and_cleans_up(browser: Any, lab: Lab, artifacts: Path) -> None:
    check_flow(browser, lab, "lab", artifacts)


def test_lab_panel_shows_two_clusters_with_their_workers(browser: Any, lab: Lab, artifacts: Path) -> None:
    names = [write_notebook(lab, f"two-{n}.ipynb", "%load_ext mwnotebook", TRAIN.format(n=n)) for n in (2, 1)]
    owners = [open_notebook(browser, lab, name) for name in names]
    panel = open_notebook(browser, lab, write_notebook(lab, "two-viewer.ipynb", "1 + 1"))
    try:
        open_panel(panel, "lab")
        for owner, n in zip(owners, (2, 1)):
            start_cluster(owner, n)
        rows = [seen_in_panel(panel, lab, name)[0] for name in names]
        for row in rows:
            row.locator(".mw-cluster-head").click()
        wait_for(lambda: panel.locator(f"{ROW} .mw-worker").count() == 3, 10, what="three worker rows")
        panel.locator(f"{ROW} .mw-tfconfig-label").first.click()
        panel.locator(f"{ROW} .mw-tfconfig pre").first.wait_for(timeout=5_000)
        assert json.loads(panel.locator(f"{ROW} .mw-tfconfig pre").first.inner_text())["task"]["type"] == "worker"
        panel.screenshot(path=str(artifacts / "panel_lab_two_clusters.png"))
        for row in rows:
            stop_from_panel(panel, row)
            row.wait_for(state="detached", timeout=60_000)
        wait_for(lambda: not state_files(lab), 30, what="no state file")
    finally:
        for page in (*owners, panel):
            page.close()


def test_notebook7_panel_lists_stops_and_cleans_up(browser: Any, notebook7: Lab, artifacts: Path) -> None:
    check_flow(browser, notebook7, "notebook", artifacts)


def test_lab_panel_shows_and_stops_a_cluster_started_in_the_background(browser: Any, lab: Lab, artifacts: Path) -> None:
    """``%mwcluster start`` (the warm cluster a teacher starts before class): the panel lists it with
    its workers and pids once they are ready, and its Stop button ends them."""
    name = write_notebook(lab, "warm.ipynb", "%load_ext mwnotebook", "%mwcluster start --workers 2 --cpu")
    owner = open_notebook(browser, lab, name)
    panel = open_notebook(browser, lab, write_notebook(lab, "warm-viewer.ipynb", "1 + 1"))
    try:
        open_panel(panel, "lab")
        run_cell(owner, 0)
        run_cell(owner, 1, retry_s=60)
        row, _ = seen_in_panel(panel, lab, name)
        ready = wait_for(lambda: [d for d in state_files(lab) if d["state"] == "idle" and len(d["workers"]) == 2
                                    and all(w["pid"] for w in d["workers"])], 180, what="the warm cluster's workers")
        workers = {w["pid"] for w in ready[0]["workers"]}
        assert running(workers) == workers
        row.locator(".mw-cluster-head").click()
        wait_for(lambda: {int(t) for t in panel.locator(f"{ROW} .mw-pid").all_inner_texts() if t} == workers,
                 30, what="the warm cluster's pids in the panel")
        panel.screenshot(path=str(artifacts / "panel_lab_background_start.png"))
        stop_from_panel(panel, row)
        wait_for(lambda: not state_files(lab), 60, what="the state file to go")
        panel.locator(ROW).wait_for(state="detached", timeout=30_000)
        wait_for(lambda: not running(workers), 30, what="the warm cluster's workers to end")
    finally:
        dismiss_dialog(owner)
        owner.close()
        panel.close()
