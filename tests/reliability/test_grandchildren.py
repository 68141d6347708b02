"""Contained grandchildren (mwnotebook/processes/runtime/containment.py), and a refused nested %%mwtrain: nothing a worker cell starts survives its notebook.

A worker cell starts ``subprocess.Popen(["sleep", ...])``; the ``sleep`` must end on
``%mwcluster stop`` / ``Cluster.stop``, on a group restart, on a normal exit of the notebook kernel
and on a SIGKILL of the notebook kernel. No TensorFlow needed: the workers are real kernels.
"""

from __future__ import annotations

import os
import re
import signal

import psutil
import pytest

from mwnotebook import Cluster
from mwnotebook.errors import WorkerError
from testbed.notebook_kernel import Notebook
from testbed.processes import kill_all, wait_gone
from tests._plugins.reliability_table import record

pytestmark = [pytest.mark.reliability]

SPAWN = ("import subprocess\n_mw_sleep = subprocess.Popen(['sleep', '1017'])\n"
         "print('GRANDCHILD', _mw_sleep.pid, flush=True)\n")


def _sleep_pids(text: str) -> set[int]:
    return {int(pid) for pid in re.findall(r"GRANDCHILD (\d+)", text)}


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE and "sleep" in proc.name():
                alive.add(pid)
        except psutil.NoSuchProcess:
            continue
    return alive


def _check(scenario: str, pids: set[int]) -> None:
    assert len(pids) == 2, f"the cell did not report two grandchildren: {pids}"
    left, seconds = wait_gone(pids, 10)
    kill_all(left)
    record(scenario, limit_s=10, failed_s=seconds, orphans=len(left), note="grandchild sleep processes")
    assert not left, f"{scenario}: grandchildren {sorted(left)} survived"


def test_grandchildren_end_on_stop_and_restart(no_orphans):
    with Cluster(workers=2, cpu=True) as cluster:
        result = cluster.run(SPAWN, timeout=60)
        pids = _sleep_pids(result.stdout(0) + result.stdout(1))
        assert _alive(pids) == pids  # they really run while the workers do
        # Item 7 (part): a worker refuses to become a notebook of its own.
        with pytest.raises(WorkerError) as refused:
            cluster.run("%load_ext mwnotebook", timeout=60)
        assert all("is a %%mwtrain worker" in f.evalue for f in refused.value.failures), refused.value.failures
        assert len(refused.value.failures) == 2
        cluster.restart()
        _check("12.6 grandchildren end on group restart", pids)
        result = cluster.run(SPAWN, timeout=60)
        pids = _sleep_pids(result.stdout(0) + result.stdout(1))
        cluster.stop()
        _check("12.6 grandchildren end on stop", pids)


def _notebook_with_grandchildren() -> tuple[Notebook, set[int]]:
    nb = Notebook()
    reply, _, _ = nb.execute("%load_ext mwnotebook", timeout=60)
    assert reply["content"]["status"] == "ok", reply["content"]
    reply, text, _ = nb.execute("%%mwtrain --workers 2 --cpu\n" + SPAWN, timeout=120)
    assert reply["content"]["status"] == "ok", (reply["content"], text[-2000:])
    pids = _sleep_pids(text)
    assert _alive(pids) == pids
    return nb, pids


def test_grandchildren_end_when_the_notebook_kernel_exits():
    nb, pids = _notebook_with_grandchildren()
    try:
        nb.km.shutdown_kernel(now=False)  # a normal exit: shutdown_request, then the kernel exits
    finally:
        nb.close()
    _check("12.6 grandchildren end on notebook kernel exit", pids)


def test_grandchildren_end_when_the_notebook_kernel_is_killed():
    nb, pids = _notebook_with_grandchildren()
    try:
        os.kill(nb.pid, signal.SIGKILL)
        _check("12.6 grandchildren end on notebook SIGKILL", pids)
    finally:
        nb.close()
