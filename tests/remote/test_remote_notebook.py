"""notebooks/04_remote_hosts.ipynb, executed headless against the two sshd test hosts."""

from __future__ import annotations

import sys

import pytest

from tests._shared import netns_hosts
from tests._shared.lessons import execute_lesson, text_of
from tests._shared.seed_cell import expected_line

pytestmark = [pytest.mark.remote, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(600)]


def test_remote_hosts_notebook(ssh_home: netns_hosts.TestNet, monkeypatch: pytest.MonkeyPatch) -> None:
    h0, h1 = ssh_home.hosts
    monkeypatch.setenv("MWNOTEBOOK_HOSTS", f"{h0.alias},{h1.alias}")
    monkeypatch.setenv("MWNOTEBOOK_PYTHON", sys.executable)
    nb = execute_lesson("04_remote_hosts", timeout=500)

    code = [c for c in nb.cells if c.cell_type == "code"]
    train = next(c for c in code if c.source.startswith("%%mwtrain"))
    lines = text_of(train).splitlines()
    for i in range(2):
        assert f"[worker {i}] {expected_line(i)}" in lines, text_of(train)[-3000:]
    status = text_of(next(c for c in code if c.source.strip() == "%mwcluster status"))
    assert h0.address in status and h1.address in status
    # ssh_home checks that %mwcluster stop left nothing running on either host.
