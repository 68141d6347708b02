"""Worker output is never lost and never hangs the cell.

Two workers each print 20,000 lines with ``flush=True`` (one IOPub message per line), several times
in a row. Before: 2 runs of 5 hung, 3 lost 21-53 % of one worker's lines. Every line must now be in
the result and in the worker's output log, and the result must say the output is complete. Orphans
are counted by process-tree scans before and after (testbed/processes.py).

How many runs CI needs: before the fix 5 of 5 runs went wrong. Even at the lower end of what 5/5
allows (a one-sided 95 % bound: a rate p with p^5 = 0.05, p = 0.55), 3 runs miss a regression with
probability (1 - 0.55)^3 = 0.09, so RUNS = 3 catches it with probability >= 0.9. The ten-run flood
(and its timings) is benchmarks/probes/output_flood.py.
"""

from __future__ import annotations

import pathlib

import pytest

from mwnotebook import Cluster
from testbed.processes import OrphanScan
from tests._plugins.reliability_table import record

pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.timeout(1800)]

LINES = 20_000
RUNS = 3  # see the module docstring
FLOOD = f"for i in range({LINES}):\n    print(i, flush=True)\n"
EXPECTED = "".join(f"{i}\n" for i in range(LINES))


def test_flushed_flood_arrives_complete_every_time(no_orphans):
    complete_runs, hangs, log_paths = 0, 0, []
    scan = OrphanScan()
    with Cluster(workers=2, cpu=True) as cluster:
        for _ in range(RUNS):
            try:
                result = cluster.run(FLOOD, timeout=300)
            except Exception as exc:
                hangs += 1
                pytest.fail(f"flood run failed: {exc}")
            got = [result.stdout(i) for i in range(2)]
            if got == [EXPECTED, EXPECTED] and result.output_complete and not result.lost_output():
                complete_runs += 1
            log_paths = result.log_paths
        logs = [pathlib.Path(path).read_text() for path in log_paths]  # read before the stop removes them
        kept = {w.pid for w in cluster.status() if w.pid is not None}
    orphans = len(scan.orphans())
    record(f"12.5 2x20,000 flushed lines x{RUNS}", orphans=orphans, note=f"{complete_runs}/{RUNS} runs complete, "
           f"{hangs} hangs; {len(kept)} workers while running", ok=complete_runs == RUNS)
    assert complete_runs == RUNS, [len(t.splitlines()) for t in got]
    assert orphans == 0
    for i, text in enumerate(logs):
        assert text.count(EXPECTED) >= RUNS, f"worker {i}'s log {log_paths[i]} misses lines"
