"""The Jupyter server extension behind the clusters panel: a REST API over the clusters' state files.

Enabled by ``pip install`` (``jupyter-config/jupyter_server_config.d/mwnotebook.json``); turned off
with ``jupyter server extension disable mwnotebook.server``. The core package never imports it: a
plain ipykernel + nbclient run does not need a Jupyter server at all.

Modules: handlers.py (the REST handlers), service.py (what they do, without HTTP), activity.py (a
cluster at work counts as the server's activity, for JupyterHub's idle culler).
"""

from __future__ import annotations

from typing import Any

LABEXTENSION = "mwnotebook-clusters"


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "mwnotebook.server"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": LABEXTENSION}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from mwnotebook.registry.state import registry_dir
    from mwnotebook.server.handlers import add_handlers
    from mwnotebook.server.service import ClusterService

    service = ClusterService(registry_dir(serverapp.runtime_dir))
    add_handlers(serverapp.web_app, service)
    serverapp.log.info("mwnotebook clusters API at %sapi/clusters over %s",
                       serverapp.web_app.settings.get("base_url", "/") + "mwnotebook/", service.directory)


async def _start_jupyter_server_extension(serverapp: Any) -> None:
    """Once the server's loop runs: mark its activity while a cluster of this user works."""
    from mwnotebook.registry.state import registry_dir
    from mwnotebook.server.activity import ActivityMarker, mark_interval

    marker = ActivityMarker(registry_dir(serverapp.runtime_dir), serverapp.web_app.settings, mark_interval())
    serverapp.web_app.settings["mwnotebook_activity_marker"] = marker.start()
    serverapp.log.info("mwnotebook: a working cluster is activity (looked for every %.0f s)", marker.interval)
