"""pytest-jupyter's fixtures (``jp_fetch``, ``jp_serverapp``, ...) for the REST API tests here only."""

from pytest_jupyter.jupyter_server import *  # noqa: F403
