"""The clusters REST API under ``<base_url>mwnotebook/api/clusters``, authenticated and authorised
as every Jupyter API is (``APIHandler``, ``@tornado.web.authenticated``, ``@authorized`` on the
``kernels`` resource: a cluster is kernels of this user).

``GET  .../clusters``               every cluster, with its workers
``GET  .../clusters/<id>``          one cluster
``POST .../clusters/<id>/interrupt`` and ``.../restart``
``DELETE .../clusters/<id>``        stop it
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import tornado.web
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join

from mwnotebook.server.service import ClusterService, ServiceError

API = "mwnotebook/api/clusters"


def http_error(error: ServiceError) -> tornado.web.HTTPError:
    """The error's status from the one table (server/service.py ``STATUS``), its words as the message."""
    return tornado.web.HTTPError(error.status, str(error))


class _ClustersBase(APIHandler):
    auth_resource = "kernels"

    def initialize(self, service: ClusterService) -> None:
        self.service = service

    async def notebooks(self) -> dict[str, str]:
        """Kernel id -> the notebook's path, from the server's sessions."""
        manager = self.settings.get("session_manager")
        if manager is None:
            return {}
        try:
            sessions = await manager.list_sessions()
        except Exception:  # a session store that fails costs only the notebook names
            self.log.debug("no sessions for the clusters panel", exc_info=True)
            return {}
        return {s["kernel"]["id"]: s.get("path") or s.get("name") or "" for s in sessions if s.get("kernel")}

    def answer(self, body: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(body, default=str))

    async def act(self, cluster_id: str, action: str) -> None:
        try:  # on a thread: the owner's answer (or a dead owner's scancel) never blocks the server's loop
            by = await asyncio.to_thread(self.service.act, cluster_id, action)
        except ServiceError as e:
            raise http_error(e) from e
        self.answer({"id": cluster_id, "action": action, "by": by}, 202)


class ClustersHandler(_ClustersBase):
    @tornado.web.authenticated
    @authorized
    async def get(self) -> None:
        self.answer({"clusters": self.service.clusters(await self.notebooks())})


class ClusterHandler(_ClustersBase):
    @tornado.web.authenticated
    @authorized
    async def get(self, cluster_id: str) -> None:
        try:
            self.answer(self.service.cluster(cluster_id, await self.notebooks()))
        except ServiceError as e:
            raise http_error(e) from e

    @tornado.web.authenticated
    @authorized
    async def delete(self, cluster_id: str) -> None:
        await self.act(cluster_id, "stop")


class ClusterActionHandler(_ClustersBase):
    @tornado.web.authenticated
    @authorized
    async def post(self, cluster_id: str, action: str) -> None:
        await self.act(cluster_id, action)


def add_handlers(web_app: Any, service: ClusterService) -> None:
    base = url_path_join(web_app.settings.get("base_url", "/"), API)
    ident = r"(?P<cluster_id>[^/]+)"
    web_app.add_handlers(".*$", [
        (base, ClustersHandler, {"service": service}),
        (url_path_join(base, ident), ClusterHandler, {"service": service}),
        (url_path_join(base, ident, r"(?P<action>interrupt|restart)"), ClusterActionHandler, {"service": service}),
    ])
