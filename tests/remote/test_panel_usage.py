"""The clusters panel shows remote workers' CPU and memory: a cluster on the two SSH test hosts,
owned by this test process, published in a real JupyterLab server's runtime directory
(testbed/jupyter_lab.py). While a cell runs, its REST API (server/service.py ``_view``) lists each
worker with the figures the notebook's side read on the worker's host (the status table's poll, every
2 s: registry/publication.py), and after ``Cluster.usage()`` those figures: resident memory within
5 % of /proc read in the host's namespace, the host's MemTotal as the limit. Then the panel in
headless Chromium shows them in each worker's row. Here, not in tests/panel: the SSH hosts are
this tier's session fixture (tests/_plugins/run_groups.py). One cluster, one server; ~40 s."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mwnotebook import Cluster
from testbed import netns_hosts
from testbed.jupyter_lab import CHROMIUM, CHROMIUM_ARGS, Lab, artifacts_path, serve
from tests._shared.waits import wait_for

#: Hang bounds only, generous for a loaded 2-core machine.
pytestmark = [pytest.mark.remote, pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

HOLD = "held = b'x' * 300_000_000  # 300 MB, written: resident\nimport time\ntime.sleep(8)\n"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from serve(tmp_path_factory, "lab", "usage-")


def _resident(host: netns_hosts.TestHost, pid: int) -> int:
    return int(host.exec("cat", f"/proc/{pid}/statm").stdout.split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _memtotal(host: netns_hosts.TestHost) -> int:
    line = next(x for x in host.exec("cat", "/proc/meminfo").stdout.splitlines() if x.startswith("MemTotal:"))
    return int(line.split()[1]) * 1024


def _workers(lab: Lab) -> list[dict[str, Any]]:
    listed = lab.api("/mwnotebook/api/clusters")
    assert isinstance(listed, dict)
    clusters = listed["clusters"]
    return list(clusters[0]["workers"]) if len(clusters) == 1 else []


def _all(workers: list[dict[str, Any]], check: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """``workers`` when there are two and each passes ``check``, else []."""
    return workers if len(workers) == 2 and all(check(w) for w in workers) else []


def test_remote_workers_figures_in_the_rest_api_and_the_panel(
        ssh_home: netns_hosts.TestNet, lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(lab.root / ".runtime"))  # where the server reads
    h0, h1 = ssh_home.hosts
    with Cluster(hosts=(h0.alias, h1.alias), cpu=True) as cluster:
        cluster.start()
        cell = threading.Thread(target=cluster.run, args=(HOLD,), kwargs={"timeout": 300}, daemon=True)
        cell.start()
        # while the cell runs: the status table's poll, published; nothing asked of the cluster here
        polled = wait_for(lambda: _all(_workers(lab), lambda w: (w["memory_bytes"] or 0) > 300e6),
                          120, 0.5, "the polled figures")
        assert all(not w["local"] and w["usage_age"] is not None and w["usage_age"] < 30 for w in polled), polled
        cell.join(300)
        assert not cell.is_alive()
        usages = cluster.usage()  # %mwcluster status's reading: published too
        shown = wait_for(lambda: _all(_workers(lab), lambda w: w["usage_age"] is not None and w["usage_age"] < 5
                                      and w["cpu_percent"] is not None), 30, 0.5, "the status reading's figures")
        for worker, host, usage in zip(shown, (h0, h1), usages):
            rss = _resident(host, worker["pid"])
            assert worker["host"] == host.alias and worker["pid"] == usage.pid, (worker, usage)
            assert abs(worker["memory_bytes"] - rss) <= 0.05 * rss, (worker, rss)
            assert worker["memory_limit"] == _memtotal(host) and worker["near_limit"] is False, worker

        from playwright.sync_api import sync_playwright
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(f"{lab.url}/lab?reset&token={lab.token}")
                page.locator(".jp-SideBar .lm-TabBar-tab[data-id='mwnotebook-clusters']").click(timeout=90_000)
                page.locator(".mw-cluster-head").first.click(timeout=60_000)
                rows = page.locator(".mw-worker")
                rows.nth(1).wait_for(timeout=30_000)
                texts = [rows.nth(i).inner_text() for i in range(2)]
                page.screenshot(path=str(artifacts_path() / "panel_remote_usage.png"))
            finally:
                browser.close()
        started = time.monotonic()
        for text, host, worker in zip(texts, (h0, h1), shown):
            mb = f"{worker['memory_bytes'] / 2**20:.0f} MB of {worker['memory_limit'] / 2**20:.0f} MB"
            assert host.alias in text and "CPU " in text and mb in text, (text, mb, time.monotonic() - started)
