"""What ``%load_ext mwnotebook`` prepares while the user types, in a notebook whose environment names
a Ray cluster.

``RAY_ADDRESS`` is Ray's own variable for the cluster a process belongs to (``ray.init()`` and
``--ray auto`` read it; Ray's cluster launchers and KubeRay set it for the notebooks they run). Such a
notebook's clusters are Ray's, so the magic imports Ray on a thread as it loads, instead of
starting a local worker template (``launchers/local/prestart.py``): ``import ray`` is the first
step of every ``--ray`` cell (1.4-2.1 s measured here, benchmarks/README.md), and a template importing
TensorFlow for local workers that nobody asked for would only take CPU from the cell's Ray nodes
where they share the notebook's machine. A local cluster in such a notebook starts its template
in its first cell, as before any prestart.

Import only: nothing connects to the cluster (a job on the cluster, an address that may be wrong)
before a cell asks for it.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Mapping

from mwnotebook.launchers.ray.session import ADDRESS_ENV, import_ray

__all__ = ["import_ray_in_background", "names_ray_cluster"]

log = logging.getLogger(__name__)


def names_ray_cluster(environ: Mapping[str, str]) -> bool:
    """The environment names a Ray cluster (``RAY_ADDRESS`` set, not blank) and Ray is installed."""
    return bool(environ.get(ADDRESS_ENV, "").strip()) and importlib.util.find_spec("ray") is not None


def _import_ray() -> None:
    try:
        import_ray()
    except Exception as exc:  # ConfigError, or a broken Ray: the first --ray cell says so, visibly
        log.debug("importing Ray ahead of the first cell failed: %s", exc)


def import_ray_in_background() -> threading.Thread:
    """Begin ``import ray`` on a daemon thread (a cell importing Ray meanwhile waits for it: Python's
    import lock); returns the thread."""
    thread = threading.Thread(target=_import_ray, name="mwnotebook-ray-prestart", daemon=True)
    thread.start()
    return thread
