"""Worker output is never lost and never hangs the cell.

Two workers each print 20,000 lines with ``flush=True`` (one IOPub message per line), ten times in a
row. Before: 2 runs of 5 hung, 3 lost 21-53 % of one worker's lines. Every line must now be in the
result and in the worker's output log, and the result must say the output is complete.
"""

from __future__ import annotations

import pathlib

import pytest

from mwnotebook import Cluster

from .conftest import record

pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.timeout(1800)]

LINES = 20_000
RUNS = 10
FLOOD = f"for i in range({LINES}):\n    print(i, flush=True)\n"
EXPECTED = "".join(f"{i}\n" for i in range(LINES))


def test_flushed_flood_arrives_complete_every_time(no_orphans):
    complete_runs, hangs, log_paths = 0, 0, []
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
        record("12.5 2x20,000 flushed lines x10", orphans=0, note=f"{complete_runs}/{RUNS} runs complete, "
               f"{hangs} hangs", ok=complete_runs == RUNS)
        assert complete_runs == RUNS, [len(t.splitlines()) for t in got]
        for i, path in enumerate(log_paths):
            text = pathlib.Path(path).read_text()
            assert text.count(EXPECTED) >= RUNS, f"worker {i}'s log {path} misses lines"
