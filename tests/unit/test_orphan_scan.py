"""testbed/processes.py finds an orphan: a process whose parent exited at once (so it is
re-parented) still shows in the scan, because the test process is a child subreaper."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from testbed.processes import OrphanScan, alive_workers

#: A stand-in with a worker kernel's module name in its command line, started by a shell that
#: exits at once: the stand-in is left without its parent, as a leaked worker would be.
ORPHAN = (f"{sys.executable} -c 'import time; time.sleep(60)' mwnotebook.processes.worker_kernel "
          "> /dev/null 2>&1 & echo $!")


def test_an_orphaned_worker_is_found_and_a_kept_one_is_not() -> None:
    scan = OrphanScan()
    pid = int(subprocess.run(["sh", "-c", ORPHAN], capture_output=True, text=True, check=True).stdout)
    try:
        deadline = time.monotonic() + 10  # hang bound only
        while not alive_workers({pid}) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert scan.orphans(timeout=0.5) == {pid}
        assert scan.orphans(keep={pid}, timeout=0) == set()
    finally:
        os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(pid, 0)  # ours to reap: the subreaper adopted it
        except ChildProcessError:
            pass
    assert scan.orphans(timeout=5) == set()
