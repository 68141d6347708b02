"""Entry point of a worker kernel process: ``python -m mwnotebook.processes.worker_kernel -f CONNECTION_FILE``.

It is ipykernel plus one guarantee: the worker never outlives the process that started it. Linux's
``PR_SET_PDEATHSIG`` kills it when its parent dies (even by SIGKILL), and a watch thread covers
systems without prctl. A worker left running would hold TensorFlow ports and memory forever.

Two ways in, one way on: :func:`main` (a fresh interpreter, the exec path) and a child forked from a
worker template (``worker_template.py``, which handles parent death its own way) both end in
:func:`serve`, so a forked worker is the same kernel as an exec'd one.
"""

from __future__ import annotations

import os

from mwnotebook.processes import worker_runtime
from mwnotebook.processes.runtime import tf_logs
from mwnotebook.processes.shipped import owner_watch


def _exit_now() -> None:
    os._exit(1)


def _die_with_parent(parent_pid: int) -> None:
    owner_watch.die_with_parent()
    owner_watch.watch_parent(parent_pid, _exit_now)  # also when it died before prctl took effect


def script_level_tensorflow_logs() -> None:
    """TensorFlow's Python logger at a script's level, writing to the running kernel's stderr
    (mwnotebook/processes/runtime/tf_logs.py), once TensorFlow is imported or now if it already is."""
    tf_logs.install()


def serve(argv: list[str] | None = None) -> None:
    """Run the worker kernel (``argv``: ipykernel's arguments, e.g. ``-f FILE``; default sys.argv[1:])."""
    script_level_tensorflow_logs()
    from mwnotebook.processes import worker_hooks  # fit draws live curves; tqdm.auto as text

    worker_hooks.install()
    from ipykernel import kernelapp

    kernelapp.launch_new_instance(argv)


def main() -> None:
    expected_parent = int(os.environ.pop("MWNOTEBOOK_PARENT_PID", os.getppid()))
    worker_runtime.install()
    _die_with_parent(expected_parent)
    serve()


if __name__ == "__main__":
    main()
