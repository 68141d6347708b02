"""mwnotebook/server/activity.py over real state files: which clusters count as the server's
activity (working, and owned by a live kernel) and what the marker sets. The end-to-end part (a
real JupyterHub's idle culler and a quiet training cell) is tests/hub/test_hub_culler.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mwnotebook.registry import processes, state
from mwnotebook.registry.owner import this_owner
from mwnotebook.server.activity import DEFAULT_INTERVAL, SETTING, ActivityMarker, mark_interval, working_clusters


def publish(directory: Path, cluster_id: str, phase: str, owner: dict[str, Any]) -> None:
    state.write_state(state.state_path(directory, cluster_id),
                      {"version": state.VERSION, "id": cluster_id, "state": phase, "owner": owner, "workers": []})


def dead_owner() -> dict[str, Any]:
    """The owner section of a kernel that has ended (a real process, waited for)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    started = processes.start_time(child.pid)
    child.kill()
    child.wait()
    return {**this_owner(), "pid": child.pid, "start_time": started}


def test_only_a_working_cluster_of_a_live_kernel_is_activity(tmp_path: Path) -> None:
    directory = tmp_path / "mwnotebook"
    state.ensure_dir(directory)
    alive = dict(this_owner())
    publish(directory, "aaaaaaaaaaa1", "running", alive)
    publish(directory, "aaaaaaaaaaa2", "restarting", alive)
    publish(directory, "aaaaaaaaaaa3", "starting", alive)
    publish(directory, "bbbbbbbbbbb1", "idle", alive)
    publish(directory, "bbbbbbbbbbb2", "stopping", alive)
    publish(directory, "bbbbbbbbbbb3", "running", dead_owner())
    assert sorted(working_clusters(directory)) == ["aaaaaaaaaaa1", "aaaaaaaaaaa2", "aaaaaaaaaaa3"]
    assert working_clusters(tmp_path / "none") == []


def test_the_marker_sets_the_setting_jupyter_server_reads_only_while_a_cluster_works(tmp_path: Path) -> None:
    assert SETTING.endswith("_last_activity")  # what ServerApp.last_activity() takes from the settings
    directory = tmp_path / "mwnotebook"
    state.ensure_dir(directory)
    settings: dict[str, Any] = {}
    marker = ActivityMarker(directory, settings, 1.0)
    publish(directory, "cccccccccccc", "idle", dict(this_owner()))
    assert asyncio.run(marker.look()) is False and SETTING not in settings
    publish(directory, "cccccccccccc", "running", dict(this_owner()))
    before = datetime.now(timezone.utc)
    assert asyncio.run(marker.look()) is True
    assert before <= settings[SETTING] <= datetime.now(timezone.utc)  # aware UTC, as jupyter_server's own
    marked = settings[SETTING]
    publish(directory, "cccccccccccc", "idle", dict(this_owner()))
    assert asyncio.run(marker.look()) is False and settings[SETTING] == marked  # left where training ended


def test_the_interval_follows_a_shorter_hub_activity_interval() -> None:
    assert mark_interval({}) == DEFAULT_INTERVAL
    assert mark_interval({"JUPYTERHUB_ACTIVITY_INTERVAL": "5"}) == 5.0
    assert mark_interval({"JUPYTERHUB_ACTIVITY_INTERVAL": "300"}) == DEFAULT_INTERVAL
    for bad in ("", "often", "0", "-5"):
        assert mark_interval({"JUPYTERHUB_ACTIVITY_INTERVAL": bad}) == DEFAULT_INTERVAL
