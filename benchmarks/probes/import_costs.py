"""What a fresh interpreter pays to import the modules the started processes and the launchers
begin with, and whether that pulls in jupyter_client: for this checkout and, side by side in the
same run, any other checkouts given (say, one exported with ``git archive``).

    python -m benchmarks.probes.import_costs [--repeats 7] [--tree OTHER_CHECKOUT ...]

Each sample is one fresh ``python -c`` (cwd: a temporary directory, PYTHONPATH: the checkout); the
best of ``--repeats`` is reported, samples alternate between checkouts. Writes
benchmarks/results/import_costs/<commit>.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._suite import ROOT, write_result

MODULES = ("mwnotebook.launchers", "mwnotebook.processes.netns_holder", "mwnotebook.processes.worker_kernel",
           "mwnotebook.processes.worker_template")

_PROBE = ("import sys, time\nt = time.perf_counter()\nimport {module}\n"
          "print(time.perf_counter() - t, 'jupyter_client' in sys.modules)")


def sample(tree: Path, module: str, cwd: str) -> tuple[float, bool]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", _PROBE.format(module=module)], capture_output=True, text=True,
                         env=env, cwd=cwd, check=True, timeout=120).stdout.split()
    return float(out[0]), out[1] == "True"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tree", action="append", default=[], help="another checkout to measure beside this one")
    args = parser.parse_args()
    trees = [ROOT, *(Path(t).resolve() for t in args.tree)]
    best: dict[str, dict[str, dict[str, object]]] = {str(t): {} for t in trees}
    with tempfile.TemporaryDirectory() as cwd:
        for _ in range(args.repeats):
            for module in MODULES:
                for tree in trees:
                    seconds, loaded = sample(tree, module, cwd)
                    row = best[str(tree)].setdefault(module, {"best_s": seconds, "jupyter_client": loaded})
                    row["best_s"] = min(float(row["best_s"]), seconds)  # type: ignore[arg-type]
    load = os.getloadavg()
    print(f"written to {write_result('import_costs', {'repeats': args.repeats, 'trees': best})}")
    for tree, rows in best.items():
        for module, row in rows.items():
            print(f"{tree}  {module:40s} best {float(row['best_s']) * 1000:7.1f} ms  "  # type: ignore[arg-type]
                  f"jupyter_client={row['jupyter_client']}")
    print(f"load average {load[0]:.1f}")


if __name__ == "__main__":
    main()
