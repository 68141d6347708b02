"""Validation of ``--ps``, ``--chief`` and ``--evaluator`` (config/roles.py): every combination
that cannot work is a :class:`ConfigError` naming the option, before any process starts. Pure."""

from __future__ import annotations

from typing import Any

from mwnotebook.errors import ConfigError

#: More parameter servers than this is almost certainly a typo.
MAX_PS = 16


def check_roles(spec: Any) -> None:
    """Raise :class:`ConfigError` for a :class:`~mwnotebook.config.spec.ClusterSpec` whose roles
    cannot work (typed ``Any``: spec.py calls this, so importing it here would be a cycle)."""
    ps = spec.ps
    if isinstance(ps, bool) or not isinstance(ps, int):
        raise ConfigError(f"--ps must be a whole number, got {ps!r}")
    if ps < 0 or ps > MAX_PS:
        raise ConfigError(f"--ps must be between 1 and {MAX_PS} parameter servers, got {ps}")
    _check_coordinator(spec, spec.remote)
    if ps:
        if spec.chief:
            raise ConfigError(
                "--chief and --ps together mean nothing new: a --ps cluster always has a chief, the "
                "coordinator kernel that runs the cell. Drop --chief (it is for "
                "MultiWorkerMirroredStrategy clusters)")
        if not spec.use_legacy_keras:
            why = ("--no-legacy-keras was given" if spec.legacy_keras is False
                   else "tf_keras is not installed in this Python")
            raise ConfigError(
                f"--ps needs tf_keras: ParameterServerStrategy works only with tf_keras "
                f"(TF_USE_LEGACY_KERAS=1), Keras 3 does not support it, and {why}. "
                + ("Remove --no-legacy-keras." if spec.legacy_keras is False else "pip install tf_keras."))
        if spec.collective != "auto":
            raise ConfigError("--collective applies to MultiWorkerMirroredStrategy's all-reduce; a --ps "
                              "cluster has none (variables live on the parameter servers). Remove it")
    if spec.evaluator:
        if spec.gpus_per_worker is not None and spec.gpus_per_worker > 1:
            raise ConfigError("--evaluator runs on the CPU or one GPU: it cannot honour "
                              f"--gpus-per-worker {spec.gpus_per_worker} (use 1, or drop --evaluator)")


def _check_coordinator(spec: Any, remote: bool) -> None:
    """``--coordinator notebook`` (and ``--force``, which only means something with it)."""
    if spec.coordinator not in ("kernel", "notebook"):
        raise ConfigError(f"--coordinator must be 'kernel' or 'notebook', got {spec.coordinator!r}")
    if spec.force and spec.coordinator != "notebook":
        raise ConfigError("--force only applies with --coordinator notebook (it lets this kernel connect "
                          "to a second parameter-server cluster); remove it")
    if spec.coordinator == "kernel":
        return
    if not spec.ps:
        raise ConfigError("--coordinator notebook needs --ps P: it makes this notebook the coordinator of a "
                          "parameter-server cluster (ParameterServerStrategy). For MultiWorkerMirroredStrategy "
                          "use %%mwtrain without it")
    if remote:
        raise ConfigError("--coordinator notebook starts local servers only: remove --hosts/--slurm/--ray")
    if spec.network == "private":
        raise ConfigError("--coordinator notebook cannot use --network private: the notebook's own kernel "
                          "cannot enter the cluster's private network namespace, so every server listens on "
                          "the host network. Remove --network private, or drop --coordinator notebook to "
                          "keep the ports private (the coordinator is then a kernel of its own)")
    if spec.evaluator:
        raise ConfigError("--evaluator runs the cell beside a coordinator kernel; with --coordinator notebook "
                          "no cell runs on the cluster. Drop one of them (mw.sidecar_evaluate needs a kernel of "
                          "its own: use the default coordinator)")
