"""Time from a cell's start (workers not started yet) to the seed's first printed line, on local
workers and on the Ray test cluster (ray_nodes.py) cold (its first workers) and warm (a second
cluster on the same Ray cluster: its workers fork from the node templates the first one kept), in
one run; also the Ray processes' memory. ``--phases`` also prints the launchers' log lines with
their time since the cell began (where the first cell's time goes). Not a test:

    python3 -m tests.ray.measure_first_line [--phases]
"""

from __future__ import annotations

import logging
import sys
import time

from mwnotebook import Cluster
from mwnotebook.shared.events import Event, WorkerOutput
from testbed import ray_nodes
from testbed.seed_cell import SEED_CELL


class _Since(logging.Handler):
    """Prints each log line with its time since :data:`_BEGAN` (``--phases``)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"  {time.monotonic() - _BEGAN[0]:6.2f} s  {record.name.rsplit('.', 1)[-1]}: {record.getMessage()[:140]}")


_BEGAN = [0.0]


def first_line(**options: object) -> float:
    started = _BEGAN[0] = time.monotonic()
    seen: list[float] = []

    def on_event(event: Event) -> None:
        if isinstance(event, WorkerOutput) and not seen and "replicas=" in event.content.get("text", ""):
            seen.append(time.monotonic() - started)

    with Cluster(cpu=True, **options) as cluster:  # type: ignore[arg-type]
        cluster.run(SEED_CELL, on_event=on_event, timeout=600)
    return seen[0]


def main() -> None:
    if "--phases" in sys.argv:
        for name in ("mwnotebook.launchers.ray", "mwnotebook.launchers.remote.template_pool"):
            logging.getLogger(name).setLevel(logging.DEBUG)
            logging.getLogger(name).addHandler(_Since())
    started = time.monotonic()
    cluster = ray_nodes.create()
    print(f"Ray test cluster up in {time.monotonic() - started:.1f} s ({cluster.log}); "
          f"PSS of its processes {cluster.rss_mib():.0f} MiB")
    try:
        rows = [("local workers", first_line()),
                ("Ray, cold (first workers)", first_line(ray=cluster.address)),
                ("Ray, warm (second cluster)", first_line(ray=cluster.address)),
                ("local workers again", first_line())]
        print(f"PSS of the Ray processes after the runs {cluster.rss_mib():.0f} MiB")
    finally:
        cluster.destroy()
    for name, seconds in rows:
        print(f"{name:32s} {seconds:6.1f} s to the seed's first line")


if __name__ == "__main__":
    main()
