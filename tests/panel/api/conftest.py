"""pytest-jupyter's fixtures (``jp_fetch``, ``jp_serverapp``, ...) for the REST API tests here only: its
autouse event-loop fixtures must not reach the browser tests (Playwright runs its own loop)."""

from pytest_jupyter.jupyter_server import *  # noqa: F403
