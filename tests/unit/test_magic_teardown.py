"""``%%mwtrain`` always ends its live view, even when a second Ctrl-C cuts the run short."""

from __future__ import annotations

from typing import Any

import pytest

from mwnotebook.errors import WorkerError, WorkerFailure
from mwnotebook.frontend.notebook import magics


class FakeDashboard:
    def __init__(self) -> None:
        self.finished = 0

    def __call__(self, event: Any) -> None:
        pass

    def finish(self) -> None:
        self.finished += 1

    def show_now(self) -> None:
        pass

    def snapshot(self) -> None:  # what the run history keeps of the chart (frontend/chart/earlier.py)
        return None


class FakeCluster:
    """Started already; ``run`` raises what the test says (as Cluster.run does after a 2nd Ctrl-C)."""

    started = True

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def run(self, code: str, on_event: Any = None, timeout: float | None = None, max_restarts: int | None = None) -> Any:
        raise self.error


class FakeSession(magics.NotebookSession):
    def __init__(self, cluster: FakeCluster) -> None:
        super().__init__()
        self.fake = cluster

    def cluster_for(self, spec: Any) -> Any:
        return self.fake

    def announce(self, cluster: Any) -> None:
        pass


@pytest.mark.parametrize("error", [KeyboardInterrupt(), WorkerError([WorkerFailure(0, "error", "E", "x")], False)],
                         ids=["second ctrl-c", "worker error"])
def test_the_live_dashboard_is_finished_however_the_run_ends(error: BaseException,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    dashboard = FakeDashboard()
    monkeypatch.setattr(magics, "ChartOnFirstMetric", lambda workers, **options: dashboard)
    cell = magics.MWMagics(None, session=FakeSession(FakeCluster(error)))
    with pytest.raises(type(error)):
        cell.mwtrain("--workers 2 --cpu", "print(1)")
    assert dashboard.finished == 1
