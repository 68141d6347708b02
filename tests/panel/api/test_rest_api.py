"""The clusters REST API of mwnotebook.server in a real Jupyter server (pytest-jupyter), over real clusters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import tornado.httpclient

from mwnotebook import Cluster
from mwnotebook.registry import control, processes, state
from testbed.processes import WORKER_MODULES, wait_gone
from tests._shared.waits import wait_for_async

pytestmark = pytest.mark.integration


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"mwnotebook.server": True}}}


async def get(jp_fetch: Any, *path: str) -> Any:
    response = await jp_fetch("mwnotebook", "api", "clusters", *path)
    assert response.headers["Content-Type"] == "application/json"
    return json.loads(response.body)


async def send(jp_fetch: Any, method: str, *path: str) -> tornado.httpclient.HTTPResponse:
    return await jp_fetch("mwnotebook", "api", "clusters", *path, method=method,
                          **({"body": b""} if method == "POST" else {}), raise_error=False)


async def test_the_list_is_empty_without_clusters(jp_fetch: Any) -> None:
    assert await get(jp_fetch) == {"clusters": []}


async def test_the_api_needs_the_servers_token(jp_serverapp: Any, http_server_client: Any, jp_base_url: str) -> None:
    response = await http_server_client.fetch(f"{jp_base_url}mwnotebook/api/clusters", raise_error=False)
    assert response.code == 403


async def test_two_clusters_are_listed_with_their_workers_and_one_is_stopped(jp_fetch: Any, jp_runtime_dir: Path) -> None:
    import asyncio
    a = Cluster(workers=2)
    b = Cluster(workers=1)
    try:
        await asyncio.gather(asyncio.to_thread(a.start), asyncio.to_thread(b.start))
        listed = await wait_for_async(lambda: _listed(jp_fetch, 2))
        by_size = {len(c["workers"]): c for c in listed}
        assert {w["pid"] for w in by_size[2]["workers"]} == {w.pid for w in a.status()}
        worker = by_size[2]["workers"][0]
        assert worker["tf_config"] == a.tf_configs[0] and worker["role"] == "worker" and worker["host"] == "localhost"
        assert worker["memory_bytes"] > 0 and worker["cpu_percent"] is not None
        assert by_size[1]["engine"] == "local" and by_size[1]["state"] == "idle" and by_size[1]["uptime"] >= 0
        assert "control" not in by_size[1]  # the socket's path stays on the server
        one = await get(jp_fetch, by_size[1]["id"])
        assert one["id"] == by_size[1]["id"] and len(one["workers"]) == 1

        pids = {w.pid for w in b.status()}
        response = await send(jp_fetch, "DELETE", by_size[1]["id"])
        assert response.code == 202 and json.loads(response.body)["by"] == "owner"
        await wait_for_async(lambda: _listed(jp_fetch, 1))
        assert not b.started and wait_gone(pids, 10, WORKER_MODULES)[0] == set()
        assert (await send(jp_fetch, "GET", by_size[1]["id"])).code == 404

        response = await send(jp_fetch, "POST", by_size[2]["id"], "restart")
        assert response.code == 202
        old = {w["pid"] for w in by_size[2]["workers"]}
        fresh = await wait_for_async(lambda: _fresh(jp_fetch, by_size[2]["id"], old))
        assert {w["pid"] for w in fresh["workers"]} == {w.pid for w in a.status()}
        assert (await send(jp_fetch, "POST", by_size[2]["id"], "interrupt")).code == 202
        assert a.run("print(3)").stdout(0) == "3\n"
    finally:
        a.stop()
        b.stop()


async def _listed(jp_fetch: Any, count: int) -> list[dict[str, Any]] | None:
    clusters = (await get(jp_fetch))["clusters"]
    ready = [c for c in clusters if c["state"] == "idle" and c["workers"] and all(w["pid"] for w in c["workers"])]
    return ready if len(clusters) == count and len(ready) == count else None


async def _fresh(jp_fetch: Any, cluster_id: str, old: set[int]) -> dict[str, Any] | None:
    one = await get(jp_fetch, cluster_id)
    pids = {w["pid"] for w in one["workers"]}
    return one if one["state"] == "idle" and None not in pids and not pids & old else None


async def test_bad_ids_actions_and_another_users_file_are_refused(jp_fetch: Any, jp_runtime_dir: Path) -> None:
    assert (await send(jp_fetch, "GET", "nope")).code == 404
    assert (await send(jp_fetch, "POST", "0123456789ab", "reboot")).code == 404
    assert (await send(jp_fetch, "DELETE", "0123456789ab")).code == 404
    directory = state.registry_dir(jp_runtime_dir)
    state.ensure_dir(directory)
    path = state.state_path(directory, "0123456789ab")
    state.write_state(path, {"version": state.VERSION, "id": "0123456789ab",
                             "owner": {"pid": os.getpid()}, "workers": []})
    os.chown(path, 65534, 65534)
    assert (await send(jp_fetch, "DELETE", "0123456789ab")).code == 403
    assert (await send(jp_fetch, "GET", "0123456789ab")).code == 403
    assert await get(jp_fetch) == {"clusters": []}
    assert path.exists()


OWNER = textwrap.dedent("""
    import time
    from mwnotebook import Cluster
    c = Cluster(workers=2)
    c.start()
    print(" ".join(str(w.pid) for w in c.status()), flush=True)
    time.sleep(600)
""")


async def test_a_killed_owners_cluster_shows_orphaned_then_goes_with_its_workers(jp_fetch: Any, jp_runtime_dir: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        pids = {int(p) for p in owner.stdout.readline().split()}
        await wait_for_async(lambda: _listed(jp_fetch, 1))
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(10)
        orphaned = (await get(jp_fetch))["clusters"]
        assert [c["state"] for c in orphaned] == ["orphaned"]
        assert wait_gone(pids, 10, WORKER_MODULES)[0] == set()
        assert (await send(jp_fetch, "POST", orphaned[0]["id"], "restart")).code == 409
        await wait_for_async(lambda: _gone(jp_fetch), 15)
        assert os.listdir(state.registry_dir(jp_runtime_dir)) == []
    finally:
        owner.kill()
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()


async def _gone(jp_fetch: Any) -> bool:
    return (await get(jp_fetch))["clusters"] == []


async def test_a_cluster_started_in_the_background_is_listed_within_2_s_of_ready_and_stops(
        jp_fetch: Any, jp_runtime_dir: Path) -> None:
    """``%mwcluster start`` (``Cluster.start_background``): the panel lists the warm cluster with its
    workers and pids within 2 s of it being ready (the issue's bound; the writer's interval is 0.5 s),
    and a DELETE stops it through its owner."""
    import asyncio
    cluster = Cluster(workers=2)
    try:
        cluster.start_background()
        ready_at = await asyncio.to_thread(
            lambda: processes_wait(lambda: cluster.started, 120) and time.monotonic())
        listed = await wait_for_async(lambda: _listed(jp_fetch, 1), 60)
        late = time.monotonic() - ready_at
        assert late <= 2.0, f"listed {late:.1f} s after the background start was ready"
        assert {w["pid"] for w in listed[0]["workers"]} == {w.pid for w in cluster.status()}
        assert all(w["local"] and w["pid_start"] for w in listed[0]["workers"])
        pids = {w.pid for w in cluster.status()}
        response = await send(jp_fetch, "DELETE", listed[0]["id"])
        assert response.code == 202 and json.loads(response.body)["by"] == "owner"
        await wait_for_async(lambda: _gone(jp_fetch), 30)
        assert not cluster.started and wait_gone(pids, 10, WORKER_MODULES)[0] == set()
    finally:
        cluster.stop()


def processes_wait(check: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("the background start did not finish in time")
        time.sleep(0.02)
    return True


@pytest.mark.parametrize(("code", "status"), [("busy", 409), ("forbidden", 403), ("bad_request", 400)])
async def test_the_owners_refusal_code_is_the_http_status(jp_fetch: Any, jp_runtime_dir: Path,
                                                           code: control.Code, status: int) -> None:
    """An owner (this live process) that refuses with a code: the API answers that code's status,
    whatever the refusal's words (server/service.py STATUS, the one table)."""
    directory = state.registry_dir(jp_runtime_dir)
    state.ensure_dir(directory)
    cluster_id = "0123456789ab"
    socket_path = state.socket_path(directory, cluster_id)
    listener = control.ControlListener(socket_path, lambda action: control.Refusal(code, "not now, in any words"))
    state.write_state(state.state_path(directory, cluster_id), {
        "version": state.VERSION, "id": cluster_id, "state": "idle", "control": str(socket_path), "workers": [],
        "owner": {"pid": os.getpid(), "start_time": processes.start_time(os.getpid())}})
    try:
        response = await send(jp_fetch, "POST", cluster_id, "restart")
        assert response.code == status and b"not now, in any words" in response.body
    finally:
        listener.close()
        state.remove(state.state_path(directory, cluster_id))
