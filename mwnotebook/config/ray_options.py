"""What ``--ray ADDRESS`` accepts, checked before anything starts (pure: Ray is not imported here;
the launcher is ``mwnotebook/launchers/ray/launcher.py``)."""

from __future__ import annotations

from typing import Any

from mwnotebook.config.hosts import parse_host
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
        if spec.ray_ssh is not None:
            raise ConfigError("--ray-ssh says how to reach the workers of a Ray cluster; give --ray ADDRESS "
                              "with it (from off the cluster's network: --ray ray://localhost:10001 "
                              "--ray-ssh [user@]HEAD_HOST)")
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
    if spec.ray_ssh is not None:
        check_ray_ssh(spec.ray_ssh)
    cpus = spec.cpus_per_worker
    if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, int) or cpus < 1):
        raise ConfigError(f"--cpus-per-worker must be a whole number >= 1, got {cpus!r}")


def check_ray_ssh(target: Any) -> None:
    """``--ray-ssh``: one SSH host, ``[user@]host[:port]`` or an ssh config alias."""
    if not isinstance(target, str) or not target.strip():
        raise ConfigError("--ray-ssh needs the SSH host to reach the Ray cluster through: [user@]HEAD_HOST[:port] "
                          "or an ssh config alias")
    try:
        host = parse_host(target)
    except ConfigError as exc:
        raise ConfigError(f"--ray-ssh: {exc}") from None
    if host.slots is not None:
        raise ConfigError(f"--ray-ssh {target!r}: one SSH host, [user@]host[:port], without *N")
