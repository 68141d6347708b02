"""A cell that trains is activity of the Jupyter server, as a request or a kernel's output is.

JupyterHub's idle culler (``jupyterhub-idle-culler``) ends a student's server whose last activity is
older than its ``--timeout``. The server's last activity (``ServerApp.last_activity``) is the latest
of its API requests, its kernels' messages and every ``web_app.settings`` value whose key ends in
``_last_activity``; the single-user server reports it to the hub every
``JUPYTERHUB_ACTIVITY_INTERVAL`` seconds. A cell that trains without printing sends no message, and
with the notebook's tab closed nothing else comes in: the hub saw the server idle from the tab's
close on (tests/hub/test_hub_stop.py measures it) and the culler ended it mid-training.

So, while any cluster of this user whose owning kernel is alive is starting, running a cell or
restarting (its state file, mwnotebook/registry/state.py), :class:`ActivityMarker` sets
``settings["mwnotebook_last_activity"]`` to now, every :func:`mark_interval` seconds. A cluster
that sits idle between cells, or whose kernel is gone, is not activity: the culler ends the server
once training has ended and the student has left.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, MutableMapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mwnotebook.registry import orphans, state

log = logging.getLogger(__name__)

#: The ``web_app.settings`` key Jupyter Server's ``last_activity()`` reads (it ends in ``_last_activity``).
SETTING = "mwnotebook_last_activity"

#: The phases of a cluster that is doing the user's work (registry/document.py ``Phase``): a cell
#: runs, the workers restart after a failure, or a start is under way (a Slurm job may wait in the
#: queue for minutes). ``idle``, ``stopping`` and ``orphaned`` are not.
WORKING = frozenset({"starting", "running", "restarting"})

#: How often (s) the marker looks at the state files. The hub hears of the server's activity every
#: ``JUPYTERHUB_ACTIVITY_INTERVAL`` s (300 by default) and a culler's timeout is longer still (600 s
#: by default, an hour in docs/guide/teaching.md), so 30 s late is a tenth of the hub's own period
#: at most; one look lists one directory and reads a few small JSON files.
DEFAULT_INTERVAL = 30.0


def mark_interval(environ: Mapping[str, str] | None = None) -> float:
    """:data:`DEFAULT_INTERVAL`, or the hub's activity interval when that is shorter (a hub that
    reports every 5 s hears of training within about 5 s)."""
    env = os.environ if environ is None else environ
    raw = env.get("JUPYTERHUB_ACTIVITY_INTERVAL", "")
    try:
        hub = float(raw)
    except ValueError:
        return DEFAULT_INTERVAL
    return min(DEFAULT_INTERVAL, hub) if hub > 0 else DEFAULT_INTERVAL


def working_clusters(directory: Path) -> list[str]:
    """The ids of this user's clusters in ``directory`` that are doing work for a live kernel."""
    found = []
    for _, document in state.read_all(directory):
        if document.get("state") in WORKING and orphans.owner_alive(document):
            found.append(str(document.get("id") or ""))
    return found


class ActivityMarker:
    """Sets ``settings[SETTING]`` to now while :func:`working_clusters` names any cluster."""

    def __init__(self, directory: Path, settings: MutableMapping[str, Any], interval: float) -> None:
        self.directory = directory
        self.settings = settings
        self.interval = interval

    def mark(self, working: list[str], now: datetime | None = None) -> bool:
        """Record activity if ``working`` names a cluster; returns whether it did."""
        if not working:
            return False
        self.settings[SETTING] = now or datetime.now(timezone.utc)
        return True

    async def look(self) -> bool:
        """One look at the state files (on a thread: a home directory on NFS never stalls the server)."""
        try:
            working = await asyncio.to_thread(working_clusters, self.directory)
        except Exception:  # a look that fails costs one mark, never the server
            log.debug("mwnotebook could not read %s for activity", self.directory, exc_info=True)
            return False
        return self.mark(working)

    def start(self) -> Any:
        """Look every ``interval`` s on the running loop; returns the tornado PeriodicCallback."""
        from tornado.ioloop import PeriodicCallback

        callback = PeriodicCallback(self.look, self.interval * 1000.0)
        callback.start()
        return callback
