"""Faults the Slurm tier's modules inject alike (tests/slurm/test_slurm_workers.py, test_slurm_login.py):
a worker's kernel SIGKILLed once it trains. Node failures are the test bed's
(:meth:`testbed.slurm_cluster.SlurmCluster.down`, ``resume``)."""

from __future__ import annotations

import os
import signal

import pytest

from mwnotebook import Cluster, WorkerDiedError
from mwnotebook.shared.events import Event, WorkerOutput
from testbed.seed_cell import LONG_RUN


def kill_worker_mid_run(cluster: Cluster, pid: int, worker: int) -> None:
    """SIGKILL a worker's kernel once LONG_RUN trains: the cell fails naming it, the group restarts."""
    killed: list[int] = []

    def kill_once_training(event: Event) -> None:
        if (isinstance(event, WorkerOutput) and event.worker == worker and not killed
                and "training" in event.content.get("text", "")):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    with pytest.raises(WorkerDiedError) as info:
        cluster.run(LONG_RUN, on_event=kill_once_training, timeout=300)
    assert killed, f"worker {worker} never reached the training loop"
    assert info.value.worker == worker and info.value.restarted
    assert "SIGKILL" in info.value.failures[0].exit_description
