"""No dead ends: after a ``--max-restarts`` cell whose restart could not bring workers
back (:class:`~mwnotebook.errors.RestartFailedError`), the next cell starts a fresh cluster by itself,
and the status says what runs at each point. Real plain ipykernel workers, no TensorFlow.

The fault: a worker kills the process that holds the cluster's private network namespace
(mwnotebook/processes/netns_holder.py) and then itself. Fresh workers cannot join a namespace that
is gone, so the restart fails at once; before, every later cell failed too until the user ran
``%mwcluster stop``.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import psutil
import pytest
from IPython.core.interactiveshell import InteractiveShell

from mwnotebook import Cluster
from mwnotebook.errors import RestartFailedError, WorkerDiedError
from mwnotebook.frontend.notebook.magics import MWMagics
from mwnotebook.shared.events import WorkerStateChanged
from testbed.processes import WORKER_MODULES, wait_gone, worker_processes
from tests._shared.dead_ends import assert_nothing_runs, assert_runs_afresh

pytestmark = pytest.mark.integration


def namespace_holders() -> list[psutil.Process]:
    """This test process's network-namespace holders (other runs on the machine have their own)."""
    return [p for p in psutil.Process().children(recursive=True)
            if "mwnotebook.processes.netns_holder" in " ".join(p.cmdline())]


def kill_holder_then_die(holder: int) -> str:
    """A cell: worker 1 kills the namespace holder and dies; worker 0 waits (it is interrupted)."""
    return ("import os, signal, time\n"
            "if os.environ['MWNOTEBOOK_WORKER_INDEX'] == '1':\n"
            f"    os.kill({holder}, signal.SIGKILL)\n"
            "    time.sleep(0.5)\n"
            "    os._exit(3)\n"
            "time.sleep(60)\n")


def test_after_a_failed_restart_the_next_run_starts_a_fresh_cluster() -> None:
    with Cluster(workers=2, template=False, network="private", max_restarts=1) as cluster:
        assert cluster.network_isolated
        holders = namespace_holders()
        assert len(holders) == 1
        first_pids = {info.pid for info in cluster.status()}
        with pytest.raises(RestartFailedError) as info:
            cluster.run(kill_holder_then_die(holders[0].pid))
        assert "namespace" in str(info.value) and "cannot be started again" in str(info.value)
        assert_nothing_runs(cluster)
        assert not wait_gone({p for p in first_pids if p is not None}, 10, WORKER_MODULES)[0]
        assert_runs_afresh(cluster, first_pids)  # in a new namespace
        assert cluster.network_isolated and len(namespace_holders()) == 1
    assert not namespace_holders() and not worker_processes()


def test_when_the_restart_after_a_lost_worker_fails_the_next_run_starts_afresh() -> None:
    """Without --max-restarts a lost worker's group is restarted in the background; that restart
    fails here, unseen, and the next run must not end with it."""
    with Cluster(workers=2, template=False, network="private") as cluster:
        holder = namespace_holders()[0].pid
        with pytest.raises(WorkerDiedError) as info:
            cluster.run(kill_holder_then_die(holder))
        assert info.value.restarted
        result = cluster.run("print('fresh')")
        assert [result.stdout(i) for i in range(2)] == ["fresh\n"] * 2
        assert [s.state for s in cluster.status()] == ["done"] * 2
        assert len(namespace_holders()) == 1
    assert not namespace_holders() and not worker_processes()


def test_after_a_failed_restart_the_next_mwtrain_cell_starts_fresh_workers(capsys) -> None:
    """Through the magics, with a session of its own (the shared shell's session shows its one-time
    notices to tests/integration/test_magics.py)."""
    magics = MWMagics(InteractiveShell.instance())
    line = "--workers 2 --no-template --network private --max-restarts 1 --no-dashboard"
    try:
        magics.mwtrain(line, "x = 1")
        holders = namespace_holders()
        assert len(holders) == 1
        with pytest.raises(RestartFailedError):
            magics.mwtrain(line, kill_holder_then_die(holders[0].pid))
        capsys.readouterr()
        magics.mwcluster("status")
        assert "stopped" in capsys.readouterr().out
        assert not worker_processes()
        magics.mwtrain(line, "print('fresh', 'x' in globals())")
        out = capsys.readouterr().out
        assert "[worker 0] fresh False" in out and "[worker 1] fresh False" in out, out
        assert "TF_CONFIG" in out, out  # the fresh cluster's new addresses are shown, as at the first start
        assert len(worker_processes()) == 2
    finally:
        magics.mwcluster("stop")
    assert not namespace_holders()


def test_a_cell_killed_during_its_restart_leaves_a_true_status_and_the_next_cell_starts_afresh(
        tmp_path, ctrl_c_raises) -> None:
    """Ctrl-C twice while ``--max-restarts`` starts fresh workers (made slow here: the interpreter
    waits 20 s once a flag file exists): nothing is left running, the status says so, and the next
    cell starts a fresh cluster."""
    flag = tmp_path / "slow"
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\n[ -e {flag} ] && sleep 20\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    pressed: list[float] = []

    def press_twice_when_restarting(event: object) -> None:
        if isinstance(event, WorkerStateChanged) and event.state == "starting" and not pressed:
            pressed.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)

    with Cluster(workers=2, template=False, python=str(python), max_restarts=1) as cluster:
        cluster.start()
        cell = ("import os, time\n"
                "if os.environ['MWNOTEBOOK_WORKER_INDEX'] == '1':\n"
                f"    open({str(flag)!r}, 'w').close()\n"
                "    os._exit(3)\n"
                "time.sleep(60)\n")
        with pytest.raises(KeyboardInterrupt):
            cluster.run(cell, on_event=press_twice_when_restarting)
        assert pressed
        assert not cluster.started
        assert [(s.state, s.alive) for s in cluster.status()] == [("stopped", False)] * 2
        assert not wait_gone({p.pid for p in worker_processes()}, 10, WORKER_MODULES)[0]
        flag.unlink()
        result = cluster.run("print('fresh')")
        assert [result.stdout(i) for i in range(2)] == ["fresh\n"] * 2
    assert not worker_processes()
