"""Where a first ``%%mwtrain`` seed cell's time goes with worker templates.

    python benchmarks/first_cell_breakdown.py

Three phases, measured one after the other in this process through the Python API the magic uses:
the template's start until ready (its one ``import tensorflow``), starting 2 workers forked from it,
and the seed cell on them. Prints seconds (the seed's exact lines are checked) and writes
benchmarks/results/first_cell_breakdown.json.
"""

from __future__ import annotations

import time

from _common import SEED_CODE, SEED_LINE, write_result

from mwnotebook import Cluster
from mwnotebook.engine.loop import background_loop
from mwnotebook.launchers.local.prestart import prestart_template


def main() -> None:
    started = time.perf_counter()
    background_loop().run(prestart_template())
    template_ready = time.perf_counter() - started
    cluster = Cluster(workers=2, cpu=True)
    try:
        started = time.perf_counter()
        cluster.start()
        workers_ready = time.perf_counter() - started
        started = time.perf_counter()
        result = cluster.run(SEED_CODE)
        seed_cell = time.perf_counter() - started
        for i in range(2):
            if SEED_LINE.format(i=i) not in result.stdout(i):
                raise RuntimeError(f"worker {i} did not print the seed's line:\n{result.stdout(i)}")
    finally:
        cluster.stop()
    print(f"template ready {template_ready:.2f} s | 2 workers forked and ready {workers_ready:.2f} s | "
          f"seed cell {seed_cell:.2f} s | cell total {workers_ready + seed_cell:.2f} s")
    path = write_result("first_cell_breakdown", {"template_ready_s": template_ready, "workers_ready_s": workers_ready,
                                                 "seed_cell_s": seed_cell})
    print(f"written to {path}")


if __name__ == "__main__":
    main()
