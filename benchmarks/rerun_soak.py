"""Warm-rerun soak: run one cell again and again on the same two warm workers, each run under a
timeout, and count identical results, hangs (timeout) and aborts (any other failure).

    python benchmarks/rerun_soak.py --cell seed --count 200 --timeout 60
    python benchmarks/rerun_soak.py --cell fit --count 200

``MWNOTEBOOK_COLLECTIVE_KEY_SPACING=0`` in the environment turns the workers' fresh-key-base
patch off (the state before mwnotebook/processes/runtime/collective_keys.py), to measure the failure rate without it. Writes
benchmarks/results/rerun_soak_<cell>.json (or ``--out``). The suite's smaller CI counts and their
arithmetic are in tests/reliability/test_rerun_soak.py.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
SEED_CODE = (ROOT / "tests" / "data" / "seed_train.py").read_text()
SEED_LINE = "worker={i} replicas=2 initial_loss=0.7459 final_loss=0.4168 final_accuracy=0.8281"

#: A tf_keras ``fit`` cell that rebuilds its strategy and model every run; small, deterministic.
FIT_CODE = (ROOT / "tests" / "data" / "fit_rebuild.py").read_text()

CELLS = {"seed": SEED_CODE, "fit": FIT_CODE}


def soak(cell: str, count: int, timeout: float, progress: bool = False) -> dict:
    """Run ``cell`` ``count`` times on one warm 2-worker cluster; the counts and the distinct outputs."""
    from mwnotebook import Cluster
    from mwnotebook.errors import ClusterRunError, ClusterTimeoutError

    code = CELLS[cell]
    counts: collections.Counter[str] = collections.Counter()
    outputs: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    seconds: list[float] = []
    with Cluster(workers=2, cpu=True) as cluster:
        cluster.start()
        for n in range(count):
            started = time.monotonic()
            failed_before = len(failures)
            try:
                result = cluster.run(code, timeout=timeout)
            except ClusterTimeoutError as exc:
                counts["hang"] += 1
                failures.append(f"run {n}: hang: {exc}")
            except ClusterRunError as exc:
                counts["abort"] += 1
                failures.append(f"run {n}: {type(exc).__name__}: {str(exc)[:300]}")
            else:
                out = result.stdout(0).strip().splitlines()[-1:] + result.stdout(1).strip().splitlines()[-1:]
                outputs[" | ".join(out)] += 1
                counts["ok"] += 1
            seconds.append(time.monotonic() - started)
            if progress and len(failures) > failed_before:
                print(failures[-1], flush=True)  # with the workers' stacks on a timeout
                failures[-1] = failures[-1][:3000]
            if progress:
                print(n, dict(counts), f"{seconds[-1]:.2f}s", flush=True)
    return {"cell": cell, "count": count, "timeout": timeout, "counts": dict(counts),
            "distinct_outputs": dict(outputs), "failures": failures,
            "median_s": sorted(seconds)[len(seconds) // 2] if seconds else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cell", choices=sorted(CELLS), default="seed")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--out", help="write the result as JSON here")
    args = parser.parse_args()
    result = soak(args.cell, args.count, args.timeout, progress=True)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")
    else:
        from _common import write_result

        print(f"written to {write_result(f'rerun_soak_{args.cell}', result)}")
    sys.exit(0 if result["counts"].get("ok") == args.count else 1)


if __name__ == "__main__":
    main()
