"""What a ``%%mwtrain`` cell leaves in the run history (experiments/history.py), however it ended: the
options its line set, each cell kernel's TF_CONFIG and host, its metric records and chart snapshot,
and its failure in one line."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mwnotebook.engine.cluster import Cluster
from mwnotebook.errors import ClusterRunError
from mwnotebook.experiments.collect import RunCollector
from mwnotebook.experiments.history import Outcome, RunHistory, RunRecord
from mwnotebook.frontend.notebook import runs_view
from mwnotebook.frontend.notebook.live_chart import ChartOnFirstMetric


def record_run(runs: RunHistory, cluster: Cluster, *, line: str, cell: str, started: float, workers: int,
               outcome: Outcome, error: str, measured: RunCollector, chart: ChartOnFirstMetric | None,
               options: Mapping[str, str], cell_id: str | None) -> RunRecord:
    """Keep the run in ``runs``; a cluster that never started gives no hosts and no tasks."""
    return runs.record(line=line, cell=cell, started=started, workers=workers, hosts=hosts(cluster),
                       outcome=outcome, error=error, metrics=measured.records, restarts=measured.restarts,
                       chart=chart.snapshot() if chart is not None else None,
                       options=options, tasks=tasks(cluster), cell_id=cell_id)


def set_options(values: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, str]:
    """The options the line set (those that differ from the parser's ``defaults``), as text."""
    return {name: runs_view.option_text(value) for name, value in values.items()
            if name in defaults and value != defaults[name]}


def tasks(cluster: Cluster) -> list[dict[str, str]]:
    """Each cell kernel's TF_CONFIG and host, for the run history (MLflow's TF_CONFIG table)."""
    try:
        configs, where = cluster.tf_configs, hosts(cluster)
        cell_tasks = cluster.spec.layout.cell_tasks()
    except Exception:  # a cluster that never started
        return []
    return [{"name": f"{task.type}:{task.index}", "host": host, "tf_config": json.dumps(config)}
            for task, config, host in zip(cell_tasks, configs, where)]


def one_line(exc: BaseException) -> str:
    """What a failed run's history entry says about its failure."""
    if isinstance(exc, ClusterRunError):
        return exc.last_cause()
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def hosts(cluster: Cluster) -> list[str]:
    """Each cell kernel's host ([] for a cluster that never started)."""
    try:
        return [worker.handle.host for worker in cluster.workers]
    except Exception:  # a cluster that never started has no workers to name
        return []
