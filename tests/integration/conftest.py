"""Fixtures of the integration tests."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell


@pytest.fixture(scope="module")
def shell():
    """A real (in-process, terminal-style) IPython shell with mwnotebook loaded; its cluster is
    stopped at the end of the module."""
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "mwnotebook")
    yield ip
    ip.run_line_magic("mwcluster", "stop")
