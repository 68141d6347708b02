"""Who owns a cluster: this process, and the notebook kernel it is (when it is one).

The Jupyter server names a notebook's kernel by the id in its connection file's name
(``kernel-<id>.json``) and sets ``JPY_SESSION_NAME`` (the notebook's path) in the kernel's
environment; with both, the panel can say which notebook a cluster belongs to and open it.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from mwnotebook.registry.document import Owner
from mwnotebook.registry.processes import start_time

_KERNEL_FILE = re.compile(r"kernel-([0-9A-Za-z-]+)\.json$")


def connection_file() -> str | None:
    """This process's kernel connection file, if it is an ipykernel kernel (never makes one)."""
    if "ipykernel" not in sys.modules:
        return None
    try:
        from ipykernel.kernelapp import IPKernelApp
        if not IPKernelApp.initialized():
            return None
        app: Any = IPKernelApp.instance()
        name = str(app.connection_file or "")
        return os.path.abspath(name) if name else None
    except Exception:
        return None


def kernel_id(connection: str | None) -> str | None:
    match = _KERNEL_FILE.search(connection or "")
    return match.group(1) if match else None


def this_owner(environ: dict[str, str] | None = None) -> Owner:
    """The ``owner`` section of a state document for this process."""
    env = os.environ if environ is None else environ
    connection = connection_file()
    return {
        "pid": os.getpid(),
        "start_time": start_time(os.getpid()),
        "uid": os.getuid(),
        "kernel_id": kernel_id(connection),
        "connection_file": connection,
        "session_name": env.get("JPY_SESSION_NAME") or None,
        "argv0": os.path.basename(sys.argv[0]) if sys.argv else "",
    }
