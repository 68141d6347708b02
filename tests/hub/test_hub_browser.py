"""A student's JupyterLab under the hub, in headless Chromium: the clusters panel (the lab extension
the wheel carries) is in the side bar at the hub's base URL, and lists the cluster the student's
notebook kernel runs, through ``/user/NAME/mwnotebook/api/clusters``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testbed.hub import Hub, Student
from testbed.jupyter_lab import CHROMIUM, CHROMIUM_ARGS
from testbed.modules import require

pytestmark = [pytest.mark.hub, pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("no Chromium: apt-get install -y chromium")
    require("playwright.sync_api", "pip install -e '.[test]'")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def test_the_clusters_panel_under_the_hub_lists_the_students_cluster(
        hub: Hub, students: list[Student], browser: Any) -> None:
    student = students[1]
    hub.start_server(student)
    kernel = hub.kernel(student)
    page = browser.new_page()
    try:
        assert kernel.execute("%load_ext mwnotebook", timeout=120).status == "ok"
        ran = kernel.execute("%%mwtrain --workers 2 --no-dashboard\nprint('ready')", timeout=300)
        assert ran.status == "ok" and "[worker 1] ready" in ran.lines, ran.text[-3000:]
        # the hub's login form (the dummy authenticator takes any password), then the OAuth hand-over
        page.goto(f"{hub.url}/hub/login?next=/user/{student.name}/lab", timeout=120_000)
        page.fill("#username_input", student.name)
        page.fill("#password_input", "any")
        page.click("#login_submit")
        try:  # a hang bound, not a timing
            page.wait_for_selector(".jp-SideBar", timeout=120_000)
        except Exception:  # say where the login went instead
            raise AssertionError(f"no JupyterLab at {page.url}: {page.inner_text('body')[:1000]}") from None
        tab = page.locator(".jp-SideBar .lm-TabBar-tab[data-id='mwnotebook-clusters']")
        tab.wait_for(timeout=60_000)
        tab.click()
        page.wait_for_selector(".mw-clusters h2", timeout=60_000)
        rows = page.locator(".mw-cluster")
        rows.first.wait_for(timeout=60_000)
        assert rows.count() == 1
    finally:
        page.close()
        kernel.close()
