"""What a worker process sets up for itself at start, before ipykernel runs.

- ``MWNOTEBOOK_WORKER=1``: the process knows it is a worker (``%load_ext mwnotebook`` is refused).
- its future descendants are contained: they end with it (mwnotebook/processes/runtime/containment.py);
- each MultiWorkerMirroredStrategy gets fresh collective keys (mwnotebook/processes/runtime/collective_keys.py);
- IOPub never drops output, and output is counted per cell (mwnotebook/processes/runtime/output.py);
- ``SIGUSR2`` dumps every thread's Python stack to a file beside the connection file
  (mwnotebook/processes/runtime/stack_signal.py).

Nothing here imports TensorFlow. Who calls :func:`install`: a local worker's ``main`` or its template's
forked child (processes/worker_template.py), and on a remote host a kernel the agent started as
``python -m mwnotebook.processes.worker_kernel`` or a child forked by the host's template
(processes/shipped/remote_template.py ``worker_kernel``). Always before ipykernel runs: containment
forks a watchdog (safe only while the process has one thread) and the IOPub high-water mark is
applied when the socket is bound, so neither could be installed in a kernel that is already running.
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)

#: Set in every worker's environment (and inherited by what its cells start).
WORKER_ENV = "MWNOTEBOOK_WORKER"


def _connection_file(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "-f" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--f=") or arg.startswith("-f="):
            return arg.split("=", 1)[1]
    return None


def install(argv: list[str] | None = None) -> None:
    """Call once, first thing in the worker's main(), while it has a single thread."""
    from mwnotebook.processes.runtime import collective_keys, containment, output, ps_guard, stack_signal

    os.environ[WORKER_ENV] = "1"
    try:
        containment.install()
    except Exception:
        log.warning("cannot contain the worker's child processes", exc_info=True)
    collective_keys.install()
    ps_guard.install()
    output.install()
    connection_file = _connection_file(sys.argv if argv is None else argv)
    if connection_file:
        stack_signal.install(os.path.abspath(connection_file))
