"""The main job: execute notebooks/01_seed_two_workers.ipynb headless and show both workers' result lines.

Usage: python tools/run_seed_notebook.py [NOTEBOOK] [--out executed.ipynb]
Exits non-zero if the notebook fails or a worker's result line is missing.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
import tempfile
import time

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULT_LINE = re.compile(r"^\[worker (\d+)\] (worker=\d+ replicas=.*)$", re.M)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", nargs="?", default=str(ROOT / "notebooks" / "01_seed_two_workers.ipynb"))
    parser.add_argument("--out", default=str(ROOT / "artifacts" / "01_seed_two_workers.executed.ipynb"))
    args = parser.parse_args()
    nb = nbformat.read(args.notebook, as_version=4)
    started = time.monotonic()
    # The headless notebook kernel talks to this process only: over local (ipc) sockets in a private
    # directory, not TCP, so ipykernel has no "running over TCP without encryption" warning to print
    # before the result.
    with tempfile.TemporaryDirectory(prefix="mwnotebook-seed-") as sockets:
        km = KernelManager(kernel_name="python3", transport="ipc", ip=str(pathlib.Path(sockets) / "kernel"))
        NotebookClient(nb, km=km, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(ROOT)}}).execute()
    elapsed = time.monotonic() - started
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, args.out)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []) if o.get("output_type") == "stream")
    lines = RESULT_LINE.findall(text)
    for worker, line in sorted(lines):
        print(f"[worker {worker}] {line}")
    print(f"notebook executed in {elapsed:.1f} s; executed copy: {args.out}")
    workers = {w for w, _ in lines}
    if workers != {"0", "1"}:
        print(f"expected result lines from workers 0 and 1, got {sorted(workers)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
