"""One MLflow run per training (all workers in it), to wherever ``MLFLOW_TRACKING_URI`` points.

Parameters: the magic's options, the cell's hash and the worker count. Metrics: each worker's own
values as ``worker-<i>/<name>`` and the global ones as ``<name>``, with their steps and the times the
workers measured them (epoch summaries ``epoch_<name>`` at the epoch's index: mwnotebook/experiments/series.py).
Artifacts: the cell as ``cell.py`` and the TF_CONFIG table as ``tf_config.md``. A failed run ends
``FAILED``, an interrupted one ``KILLED``; tags say the outcome, the error and the restarts.

Only MLflow's client is used (``mlflow-skinny`` has it). A tracking server that is not reachable is
found by one short request before MLflow's client (which retries for minutes) is asked anything.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from mwnotebook.errors import ConfigError
from mwnotebook.experiments.history import GLOBAL, RunRecord
from mwnotebook.experiments.series import scalars

log = logging.getLogger(__name__)

#: MLflow's own limit of metrics per log_batch call.
BATCH = 1000
PROBE_SECONDS = 5.0
_STATUS = {"ok": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}


def installed(name: str) -> bool:
    """Whether ``name`` can be imported here, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that refuses it; a module left as None in sys.modules
        return False


def require() -> None:
    """A clear error before anything starts when ``--mlflow`` is asked for but MLflow is missing."""
    if not installed("mlflow"):
        raise ConfigError("--mlflow needs MLflow's client, which is not installed in this kernel's Python: "
                          "pip install 'mwnotebook[mlflow]' (or mlflow-skinny), then restart the kernel")


def tracking_uri() -> str:
    """Where MLflow logs from this kernel (``MLFLOW_TRACKING_URI`` or MLflow's default)."""
    try:
        import mlflow

        return str(mlflow.get_tracking_uri())
    except Exception:  # only for a message
        return os.environ.get("MLFLOW_TRACKING_URI", "MLflow's default store")


def metric_key(folder: str, tag: str) -> str:
    return tag if folder == GLOBAL else f"{folder}/{tag}"


def tf_config_table(record: RunRecord) -> str:
    """The run's TF_CONFIG table as Markdown (the artifact ``tf_config.md``)."""
    lines = [f"# mwtrain run {record.number}: TF_CONFIG of every task", "", "| task | host | TF_CONFIG |",
             "|---|---|---|"]
    for task in record.tasks:
        lines.append(f"| {task.get('name', '')} | {task.get('host', '')} | `{task.get('tf_config', '')}` |")
    if not record.tasks:
        lines.append("| (the cluster did not start) | | |")
    return "\n".join(lines) + "\n"


def params(record: RunRecord) -> dict[str, str]:
    values = {name: value[:6000] for name, value in record.options.items()}
    values["cell_hash"] = record.cell_hash
    values["worker_count"] = str(record.workers)
    return values


def _probe(uri: str) -> None:
    """Raise ``ConnectionError`` when an HTTP tracking server does not answer within a few seconds."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=PROBE_SECONDS):
            pass
    except urllib.error.HTTPError:
        return  # it answered: whether it accepts the run is MLflow's client's to find out
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConnectionError(f"the tracking server {uri} does not answer ({reason})") from None


@contextlib.contextmanager
def _few_retries() -> Iterator[None]:
    """MLflow's client retries a failing HTTP call for minutes by default: a few seconds here, unless
    the user set MLflow's own variables."""
    mine = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}
    set_here = {k: v for k, v in mine.items() if k not in os.environ}
    os.environ.update(set_here)
    try:
        yield
    finally:
        for key in set_here:
            os.environ.pop(key, None)


def _experiment_id(client: Any, experiment: str) -> str:
    name = experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME", "")
    if not name:
        return os.environ.get("MLFLOW_EXPERIMENT_ID", "0")
    found = client.get_experiment_by_name(name)
    return str(found.experiment_id) if found is not None else str(client.create_experiment(name))


def log_run(record: RunRecord, metrics: Sequence[Mapping[str, Any]], experiment: str) -> str:
    """Log ``record`` as one MLflow run; returns its run id. ``experiment``: a name ("" = the
    environment's ``MLFLOW_EXPERIMENT_NAME``/``_ID``, else MLflow's default experiment). Raises what
    MLflow raises (or ``ConnectionError``) when it cannot be logged; a run begun is then marked FAILED."""
    import mlflow
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    uri = mlflow.get_tracking_uri()
    _probe(uri)
    with _few_retries():
        client = MlflowClient()
        experiment_id = _experiment_id(client, experiment)
        tags = {"mlflow.runName": f"mwtrain run {record.number}", "mwnotebook.run": str(record.number),
                "mwnotebook.outcome": record.outcome, "mwnotebook.restarts": str(record.restarts),
                "mwnotebook.restarted": str(record.restarts > 0).lower(),
                "mwnotebook.hosts": ",".join(dict.fromkeys(record.hosts)), "mwnotebook.line": record.line[:5000]}
        if record.error:
            tags["mwnotebook.error"] = record.error[:5000]
        run = client.create_run(experiment_id, start_time=int(record.started * 1000), tags=tags,
                                run_name=tags["mlflow.runName"])
        run_id: str = run.info.run_id
        try:
            client.log_batch(run_id, params=[Param(k, v) for k, v in params(record).items()])
            rows = [Metric(metric_key(folder, tag), value, int(wall * 1000), step)
                    for folder, tag, step, wall, value in scalars(metrics)]
            for start in range(0, len(rows), BATCH):
                client.log_batch(run_id, metrics=rows[start:start + BATCH])
            client.log_text(run_id, record.cell, "cell.py")
            client.log_text(run_id, tf_config_table(record), "tf_config.md")
        except BaseException:
            with contextlib.suppress(Exception):
                client.set_tag(run_id, "mwnotebook.incomplete", "true")
                client.set_terminated(run_id, "FAILED")
            raise
        client.set_terminated(run_id, _STATUS[record.outcome],
                              end_time=int((record.started + record.duration) * 1000))
    log.info("mwnotebook: run %d logged to MLflow run %s at %s", record.number, run_id, uri)
    return run_id
