"""Where a forked worker's memory goes: its pages against its template's, by kind of mapping.

    sudo python -m benchmarks.probes.worker_pages [--workers 2] [--name worker_pages]

N workers forked from the worker template (processes/worker_template.py); at ready and after the
seed cell (tests/data/seed_train.py), each resident page of each worker's writable mappings is

* **shared**: the same physical frame as the template's page at that address,
* **copied**: the template has a page there, the worker has its own copy (copy-on-write: the worker
  wrote to it -- a reference count, a lock, a cache),
* **new**: the template has no page there (memory the worker allocated itself),

read from ``/proc/PID/pagemap`` (physical frame numbers need root; without them every page reads
as "new" and the script says so). Kinds: ``heap`` (the C heap, glibc's main arena), ``arena64``
(anonymous mappings of 64 MiB or 64 MiB-aligned: glibc's per-thread malloc arenas), ``anon``
(other anonymous mappings: Python's object arenas, large mallocs, thread stacks), ``file``
(writable file mappings: shared libraries' data). Means per worker, MiB. Writes
benchmarks/results/<name>/<commit>.json. Not a test: it asserts nothing except the seed's line.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import subprocess
import sys
from typing import Any

import mwnotebook
from benchmarks._suite import SEED_CODE, write_result
from mwnotebook import Cluster
from mwnotebook.engine.loop import background_loop
from mwnotebook.launchers.local.prestart import prestart_template

PAGE = 4096
MIB = 2 ** 20
KINDS = ("shared", "copied", "new")


def mappings(pid: int) -> list[tuple[int, int, str, str]]:
    out = []
    with open(f"/proc/{pid}/maps") as fh:
        for line in fh:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((lo, hi, parts[1], parts[5] if len(parts) > 5 else ""))
    return out


def kind(lo: int, hi: int, name: str) -> str:
    if name == "[heap]":
        return "heap"
    if name.startswith("["):
        return name
    if name.startswith("/"):
        return "file"
    if hi - lo >= 60 * MIB or lo % (64 * MIB) == 0:
        return "arena64"
    return "anon"


def frames(pid: int, lo: int, hi: int) -> tuple[int, ...]:
    with open(f"/proc/{pid}/pagemap", "rb") as fh:
        fh.seek(lo // PAGE * 8)
        data = fh.read((hi - lo) // PAGE * 8)
    return struct.unpack(f"{len(data) // 8}Q", data)


def present(entry: int) -> int | None:
    """The physical frame of a pagemap entry, or None if the page is not resident."""
    return entry & ((1 << 55) - 1) if entry >> 63 else None


def classify(worker: int, template: int) -> dict[str, dict[str, float]]:
    template_maps = mappings(template)
    pages: dict[str, dict[str, int]] = {}
    for lo, hi, perms, name in mappings(worker):
        if "w" not in perms:
            continue  # read-only: code and constants, shared through the page cache
        try:
            mine = frames(worker, lo, hi)
        except OSError:
            continue
        theirs: dict[int, int | None] = {}
        for tlo, thi, _, _ in template_maps:
            a, b = max(lo, tlo), min(hi, thi)
            if a < b:
                for i, entry in enumerate(frames(template, a, b)):
                    theirs[a + i * PAGE] = present(entry)
        counts = pages.setdefault(kind(lo, hi, name), dict.fromkeys(KINDS, 0))
        for i, entry in enumerate(mine):
            frame = present(entry)
            if frame is None:
                continue
            other = theirs.get(lo + i * PAGE)
            counts["new" if other is None else "shared" if other == frame else "copied"] += 1
    return {k: {c: n * PAGE / MIB for c, n in v.items()} for k, v in pages.items()}


def mean_of(per_worker: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    kinds = sorted({k for w in per_worker for k in w})
    out = {k: {c: round(statistics.mean(w.get(k, {}).get(c, 0.0) for w in per_worker), 1) for c in KINDS}
           for k in kinds}
    out["total"] = {c: round(sum(v[c] for v in out.values()), 1) for c in KINDS}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--name", default="worker_pages", help="results/<name>.json")
    args = parser.parse_args()
    code = os.path.dirname(os.path.dirname(os.path.abspath(mwnotebook.__file__)))  # the checkout measured
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=code).stdout.strip()
    template = background_loop().run(prestart_template(), timeout=300)
    if template is None:
        raise SystemExit("no worker template could be started here")
    load_before = os.getloadavg()
    result: dict[str, Any] = {"command": " ".join(["python", "benchmarks/worker_pages.py", *sys.argv[1:]]),
                              "commit": commit, "code": code, "workers": args.workers, "load_average_before": load_before}
    with Cluster(workers=args.workers, cpu=True) as cluster:
        cluster.start()
        pids = [info.pid for info in cluster.status() if info.pid]
        result["ready"] = mean_of([classify(pid, template.pid) for pid in pids])
        run = cluster.run(SEED_CODE, timeout=900)
        if f"replicas={args.workers}" not in run.stdout(0):
            raise RuntimeError(f"the seed cell did not print its line:\n{run.stdout(0)[-2000:]}")
        result["after_seed"] = mean_of([classify(pid, template.pid) for pid in pids])
    result["load_average_after"] = os.getloadavg()
    if not result["ready"]["total"]["shared"]:
        print("no page read as shared: physical frame numbers need root (run as root)", file=sys.stderr)
    path = write_result(args.name, result)
    for moment in ("ready", "after_seed"):
        print(moment)
        for k, v in result[moment].items():
            print(f"  {k:10s} " + "  ".join(f"{c} {v[c]:6.1f}" for c in KINDS))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
