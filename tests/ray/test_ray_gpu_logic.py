"""GPUs on Ray as logic (no GPU on the test machines; docs/guide/ray.md says what was not run on one):
the bundles' GPU requests, the relay actors' ``num_gpus``, each worker's ``CUDA_VISIBLE_DEVICES``
from its own bundle's relay, and one worker template per node whatever the GPUs. Fakes stand for
Ray's answers (its placement group table, the relays' ``where``); nothing starts."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mwnotebook.errors import ClusterStartError
from mwnotebook.launchers.ray import launcher as ray_launcher
from mwnotebook.launchers.ray.node_relay import NodeRelay
from mwnotebook.launchers.ray.node_templates import NodeTemplates
from mwnotebook.launchers.ray.session import Placement

pytestmark = pytest.mark.ray


class FakeRay:
    """What Placement and the launcher ask of ``ray``: resources, nodes, ``remote``'s options."""

    def __init__(self, per_node: list[dict[str, float]]) -> None:
        self.per_node = per_node
        self.options: list[dict[str, Any]] = []
        self.cloudpickle = self

    def register_pickle_by_value(self, module: object) -> None:
        pass

    def cluster_resources(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for node in self.per_node:
            for name, amount in node.items():
                total[name] = total.get(name, 0) + amount
        return total

    def nodes(self) -> list[dict[str, Any]]:
        return [{"Alive": True, "Resources": r, "NodeID": f"n{i}", "NodeManagerAddress": f"10.0.0.{i + 1}"}
                for i, r in enumerate(self.per_node)]

    def remote(self, cls: object) -> FakeRay:
        return self

    def remote_call(self, *args: object) -> object:
        return args


class FakeSession:
    def __init__(self, ray: FakeRay) -> None:
        self.ray = ray


def test_a_bundle_asks_for_its_gpus_only_when_given() -> None:
    ray = FakeRay([{"CPU": 4, "GPU": 2}, {"CPU": 4, "GPU": 2}])
    assert Placement(FakeSession(ray), 2, 1, 2, "SPREAD").bundle == {"CPU": 1.0, "GPU": 2.0}  # type: ignore[arg-type]
    assert Placement(FakeSession(ray), 2, 1, None, "SPREAD").bundle == {"CPU": 1.0}  # type: ignore[arg-type]


def test_gpus_the_cluster_lacks_fail_before_anything_is_placed() -> None:
    cpu_only = Placement(FakeSession(FakeRay([{"CPU": 4}, {"CPU": 4}])), 2, 1, 1, "SPREAD")  # type: ignore[arg-type]
    with pytest.raises(ClusterStartError, match=r"cannot hold 2 bundles of CPU 1, GPU 1 \(SPREAD\)"):
        cpu_only._check_feasible()  # noqa: SLF001
    # 4 GPUs in all, but no node has 3: a bundle of 3 GPUs can never be placed
    split = Placement(FakeSession(FakeRay([{"CPU": 4, "GPU": 2}, {"CPU": 4, "GPU": 2}])), 1, 1, 3, "PACK")  # type: ignore[arg-type]
    with pytest.raises(ClusterStartError, match="GPU 2"):
        split._check_feasible()  # noqa: SLF001
    Placement(FakeSession(FakeRay([{"CPU": 4, "GPU": 2}] * 2)), 2, 1, 2, "STRICT_SPREAD")._check_feasible()  # type: ignore[arg-type]  # noqa: SLF001


def make_launcher(gpus: int | None, wheres: list[dict[str, Any]],
                  kept: NodeTemplates | None = None) -> ray_launcher.RayLauncher:
    launcher = ray_launcher.RayLauncher("127.0.0.1:1", workers=len(wheres), gpus_per_worker=gpus, kept=kept)
    launcher._relays = [ray_launcher._Relay(object(), w, str(w["ip"])) for w in wheres]  # noqa: SLF001
    return launcher


def test_each_worker_sees_the_gpus_ray_gave_its_own_bundle() -> None:
    wheres = [{"ip": "10.0.0.1", "pid": 11, "gpus": "0"}, {"ip": "10.0.0.1", "pid": 12, "gpus": "1"},
              {"ip": "10.0.0.2", "pid": 21, "gpus": "0,1"}]
    launcher = make_launcher(1, wheres)
    envs = [launcher._kernel_env(i, {"TF_USE_LEGACY_KERAS": "1"}) for i in range(3)]  # noqa: SLF001
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1", "0,1"]
    assert all(e["OMP_NUM_THREADS"] == "1" and e["TF_USE_LEGACY_KERAS"] == "1" for e in envs)
    # without --gpus-per-worker a node's own CUDA_VISIBLE_DEVICES is not passed on
    assert "CUDA_VISIBLE_DEVICES" not in make_launcher(None, wheres)._kernel_env(0, {})  # noqa: SLF001


def test_the_relay_actors_ask_for_the_bundles_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    class Options:
        def __init__(self, ray: FakeRay) -> None:
            self.ray = ray

        def options(self, **kwargs: Any) -> Options:
            self.ray.options.append(kwargs)
            return self

        def remote(self, *args: Any) -> object:
            return args

    for gpus, want in ((2, 2), (None, 0)):
        ray = FakeRay([{"CPU": 4, "GPU": 2}])
        launcher = make_launcher(gpus, [{"ip": "10.0.0.1", "pid": 1}])
        monkeypatch.setattr(launcher.session, "ray", ray)
        monkeypatch.setattr(ray, "remote", lambda cls, ray=ray: Options(ray))
        placement = Placement(launcher.session, 1, 1, gpus, "SPREAD")
        placement.node_ips = ["10.0.0.1"]
        monkeypatch.setattr(placement, "scheduling", lambda index: f"bundle {index}")
        launcher._relay_actors(placement, [0])  # noqa: SLF001
        assert [(o["num_gpus"], o["num_cpus"], o["scheduling_strategy"]) for o in ray.options] == [(want, 1, "bundle 0")]


def test_workers_with_other_gpus_on_one_node_share_its_template(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA_VISIBLE_DEVICES is set in the forked child (the template never initialises CUDA), so
    it does not split a node's template; another node gets its own."""
    wheres = [{"ip": "10.0.0.1", "pid": 11, "gpus": "0"}, {"ip": "10.0.0.1", "pid": 12, "gpus": "1"},
              {"ip": "10.0.0.2", "pid": 21, "gpus": "0"}]

    async def check() -> None:
        launcher = make_launcher(1, wheres, kept=NodeTemplates())
        launcher.use_template = True
        launcher._placement = Placement(launcher.session, 3, 1, 1, "SPREAD")  # noqa: SLF001
        launcher._placement.node_ids = ["node-a", "node-a", "node-b"]  # noqa: SLF001
        launcher._placement.node_ips = [str(w["ip"]) for w in wheres]  # noqa: SLF001
        started: list[str] = []

        async def relay(session: object, node_id: str, node_ip: str, python: str | None) -> object:
            started.append(node_id)
            raise ConnectionError("no relay here (a test)")

        monkeypatch.setattr(launcher._kept, "_start_relay", relay)  # noqa: SLF001
        templates = [launcher._template(i, launcher._kernel_env(i, {})) for i in range(3)]  # noqa: SLF001
        assert templates[0] is templates[1] and templates[2] is not templates[0]
        assert [t.place for t in launcher.templates if t is not None] == ["10.0.0.1", "10.0.0.2"]
        await asyncio.sleep(0.05)
        assert started == ["node-a", "node-b"]  # one template relay per node
        await launcher._kept.close()  # noqa: SLF001

    asyncio.run(check())


def test_a_relay_reports_the_gpus_ray_gave_its_actor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    relay = NodeRelay("127.0.0.1", "0" * 32, "")
    try:
        assert relay.where()["gpus"] == "2,3"
    finally:
        relay.stop()
