"""The browser tier's fixtures: JupyterLab 4 and Notebook 7 on loopback (one server per test module,
``testbed/jupyter_lab.py``) and a page of Debian's headless Chromium through Playwright."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.jupyter_lab import CHROMIUM, CHROMIUM_ARGS, Lab, artifacts_path, serve


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from serve(tmp_path_factory, "lab")


@pytest.fixture(scope="module")
def notebook7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A Notebook 7 server (the same ``Lab`` handle: its URL opens the classic notebook page)."""
    yield from serve(tmp_path_factory, "notebook")


@pytest.fixture
def page(lab: Lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            yield page
        finally:
            browser.close()


@pytest.fixture
def artifacts_dir() -> Path:
    return artifacts_path()
