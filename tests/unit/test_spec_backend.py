"""Which backend a cluster uses is decided once, on the spec (``ClusterSpec.backend``), and read by
the launcher factory and the registry: a bare ``--slurm`` (the empty string) is Slurm, ``--ray`` is Ray."""

from __future__ import annotations

from typing import Any

import pytest

from mwnotebook.config.spec import ClusterSpec
from mwnotebook.launchers import make_launcher


@pytest.mark.parametrize(("options", "backend"), [
    ({}, "local"),
    ({"hosts": ("a", "b")}, "ssh"),
    ({"slurm": ""}, "slurm"),  # bare --slurm: falsy, still Slurm
    ({"slurm": "-N 2"}, "slurm"),
    ({"slurm_job": "42"}, "slurm"),
    ({"ray": "auto"}, "ray"),
])
def test_the_backend_is_decided_once_on_the_spec(options: dict[str, Any], backend: str) -> None:
    spec = ClusterSpec(workers=2, **options)
    assert spec.backend == backend and spec.remote is (backend != "local")
    assert spec.uses_slurm is (backend == "slurm")


@pytest.mark.parametrize(("options", "launcher"), [
    ({"slurm": ""}, "SlurmLauncher"), ({"slurm_job": "42"}, "SlurmLauncher"),  # (Ray's import costs 4 s)
])
def test_the_launcher_factory_reads_it(options: dict[str, Any], launcher: str) -> None:
    assert type(make_launcher(ClusterSpec(workers=2, **options))).__name__ == launcher


def test_a_notebook_coordinator_is_refused_on_every_remote_backend() -> None:
    from mwnotebook.errors import ConfigError
    for options in ({"hosts": ("a", "b")}, {"slurm": ""}, {"ray": "auto"}):
        with pytest.raises(ConfigError, match="local servers only"):
            ClusterSpec(workers=2, ps=1, coordinator="notebook", **options)
