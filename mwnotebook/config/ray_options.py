"""What ``--ray ADDRESS`` accepts, checked before anything starts (pure: Ray is not imported here;
the launcher is ``mwnotebook/launchers/ray/launcher.py``)."""

from __future__ import annotations

from typing import Any

from mwnotebook.errors import ConfigError

#: Ray's placement strategies for the workers' bundles (SPREAD: on distinct nodes where it can).
RAY_STRATEGIES = ("SPREAD", "STRICT_SPREAD", "PACK", "STRICT_PACK")
#: CPUs each worker's bundle reserves when ``--cpus-per-worker`` is not given.
DEFAULT_CPUS_PER_WORKER = 1


def check_ray_spec(spec: Any) -> None:
    """What ``ClusterSpec`` checks for ``--ray`` (and the options that only apply with it)."""
    if spec.ray is None:
        if spec.cpus_per_worker is not None:
            raise ConfigError("--cpus-per-worker only applies together with --ray")
        if spec.ray_strategy != "SPREAD":
            raise ConfigError("--ray-strategy only applies together with --ray")
        return
    address = spec.ray.strip()
    if not address:
        raise ConfigError("--ray needs the cluster's address: auto, HEAD_HOST:PORT (e.g. 10.0.0.5:6379) "
                          "or ray://HEAD_HOST:10001")
    if address != "auto" and not address.startswith("ray://") and ":" not in address:
        raise ConfigError(f"--ray {spec.ray!r}: give auto, HEAD_HOST:PORT (the head's GCS port, 6379 by "
                          "default) or ray://HEAD_HOST:10001")
    if spec.hosts:
        raise ConfigError("--ray and --hosts conflict: Ray places the workers; use one or the other")
    if spec.slurm is not None or spec.slurm_job is not None:
        raise ConfigError("--ray and --slurm/--slurm-job conflict: use one cluster engine")
    if spec.workers_per_host is not None:
        raise ConfigError("--workers-per-host does not apply with --ray: choose the placement with "
                          "--ray-strategy (SPREAD, STRICT_SPREAD, PACK, STRICT_PACK)")
    if spec.network == "private":
        raise ConfigError("--network private applies to local workers only; Ray workers use the cluster's network")
    if spec.ray_strategy not in RAY_STRATEGIES:
        raise ConfigError(f"--ray-strategy must be one of {', '.join(RAY_STRATEGIES)}, got {spec.ray_strategy!r}")
    cpus = spec.cpus_per_worker
    if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, int) or cpus < 1):
        raise ConfigError(f"--cpus-per-worker must be a whole number >= 1, got {cpus!r}")
