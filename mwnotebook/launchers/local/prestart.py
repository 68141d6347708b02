"""A worker template started ahead of the first cluster, so that TensorFlow is imported while the
user types (launchers/local/template_pool.py keeps the templates; a later cluster finds it there).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
import threading
from collections.abc import Mapping

from mwnotebook.launchers.local.launcher import worker_process_env
from mwnotebook.launchers.local.template_pool import TemplateUnavailable, WorkerTemplate, pool, templates_disabled

log = logging.getLogger(__name__)


async def prestart_template(python: str | None = None, env: Mapping[str, str] | None = None,
                            network: str = "auto") -> WorkerTemplate | None:
    """Start (and wait for) the template a cluster with these options would use.

    ``env`` is the cluster's shared worker environment (default: that of ``ClusterSpec()``).
    Returns None when templates are off or none can be started here (clusters will say why).
    """
    if templates_disabled():
        return None
    if env is None:
        from mwnotebook.config.spec import ClusterSpec
        from mwnotebook.config.worker_env import startup_env

        env = startup_env(ClusterSpec())
    interpreter = (shutil.which(python) or python) if python else sys.executable
    try:
        template = pool.get(interpreter, worker_process_env(env), network in ("auto", "private"))
        await template.wait_ready()
        return template
    except TemplateUnavailable as exc:
        log.debug("no worker template in advance: %s", exc)
        return None


def prestart_in_background(env: Mapping[str, str] | None = None) -> None:
    """``%load_ext mwnotebook``: begin importing TensorFlow in a template while the user types.

    ``env``: as :func:`prestart_template`'s (the magic gives config/worker_env.py ``prestart_env``).
    A short-lived thread is enough: the template does not die with the thread that started it
    (it watches the notebook process, not its parent thread).
    """
    if not templates_disabled():
        threading.Thread(target=asyncio.run, args=(prestart_template(env=env),), name="mwnotebook-prestart",
                         daemon=True).start()
