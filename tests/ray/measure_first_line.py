"""Time from a cell's start (workers not started yet) to the seed's first printed line, on local
workers and on the Ray test cluster (ray_nodes.py) cold (its first workers) and warm (a second
cluster on the same Ray cluster), in one run; also the Ray processes' memory. Not a test:

    python3 -m tests.ray.measure_first_line
"""

from __future__ import annotations

import time

from mwnotebook import Cluster
from mwnotebook.shared.events import Event, WorkerOutput
from testbed import ray_nodes
from testbed.seed_cell import SEED_CELL


def first_line(**options: object) -> float:
    started = time.monotonic()
    seen: list[float] = []

    def on_event(event: Event) -> None:
        if isinstance(event, WorkerOutput) and not seen and "replicas=" in event.content.get("text", ""):
            seen.append(time.monotonic() - started)

    with Cluster(cpu=True, **options) as cluster:  # type: ignore[arg-type]
        cluster.run(SEED_CELL, on_event=on_event, timeout=600)
    return seen[0]


def main() -> None:
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
