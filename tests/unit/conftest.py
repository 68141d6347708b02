"""Unit tests: pure logic in one process, no cluster and no server started. Fakes stand in only
where no real part is at stake (tests/_shared/fakes.py); the tiers around them test the same code
against real kernels, hosts and browsers."""

from __future__ import annotations

import pytest

from mwnotebook.engine.cell import run as cell_run


@pytest.fixture
def fast_cell_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cell policy's waits shortened for fake workers (liveness poll, interrupt grace, settle)."""
    monkeypatch.setattr(cell_run, "LIVENESS_POLL_SECONDS", 0.01)
    monkeypatch.setattr(cell_run, "INTERRUPT_GRACE_SECONDS", 0.2)
    monkeypatch.setattr(cell_run, "SETTLE_SECONDS", 0.05)
