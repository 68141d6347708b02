"""The first cell a user runs: 3 s after ``%load_ext mwnotebook``, on cold workers, against the hand launch.

    python benchmarks/first_cell.py [--rounds 3]

Each round, alternating: the seed's hand launch (its two shell scripts); a fresh notebook kernel,
``%load_ext mwnotebook``, 3 s, then the seed cell on 2 workers; another fresh notebook kernel,
``%load_ext``, 3 s, then a no-op cell on 8 workers. For the notebook cells, where the time went:
the worker template's own start to ready (its one ``import tensorflow``), how long the cell waited
for it, and the rest (forking the workers, their set-up, the cell). Writes
benchmarks/results/first_cell.json. Not a test: it asserts nothing except the seed's lines.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from _common import ROOT, SEED_CODE, SEED_LINE, hand_launch_seed, write_result
from jupyter_client.manager import start_new_kernel

PROBE = ("import json as _j, time as _t\nfrom mwnotebook.launchers.local.template_pool import pool as _pool\n"
         "_tp = _pool.templates()[0]\n"
         "print('@@' + _j.dumps({'template_ready_s': _tp.ready_at - _tp.started_at, "
         "'ready_before_now_s': _t.monotonic() - _tp.ready_at, 'now': _t.monotonic()}))")


def run(kc: Any, code: str, timeout: float = 600) -> tuple[float, str]:
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
    started = time.perf_counter()
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    elapsed = time.perf_counter() - started
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"{code[:50]!r} failed: {reply['content'].get('evalue')}\n{''.join(out)[-2000:]}")
    return elapsed, "".join(out)


def notebook_first_cell(cell: str, check: str | None) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(ROOT))
    try:
        run(kc, "import time as _t")
        run(kc, "%load_ext mwnotebook")
        time.sleep(3)
        _, now = run(kc, "print('@@', _t.monotonic())")
        cell_started = float(now.split("@@")[1])
        wall, out = run(kc, cell)
        if check is not None:
            for i in range(2):
                if f"[worker {i}] {check.format(i=i)}" not in out:
                    raise RuntimeError(f"the seed's line is missing:\n{out[-3000:]}")
        _, probe = run(kc, PROBE)
        info = json.loads(probe.split("@@")[1])
        ready_at = info["now"] - info["ready_before_now_s"]
        waited = max(0.0, ready_at - cell_started)
        run(kc, "%mwcluster stop", timeout=60)
        return {"cell_s": round(wall, 3), "template_ready_s": round(info["template_ready_s"], 3),
                "cell_waited_for_template_s": round(waited, 3), "cell_rest_s": round(wall - waited, 3)}
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--name", default="first_cell", help="results file name (benchmarks/results/NAME.json)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    rounds = []
    for _ in range(args.rounds):
        hand, lines, _peaks = hand_launch_seed()
        if lines != [SEED_LINE.format(i=i) for i in range(2)]:
            raise RuntimeError(f"the hand launch printed {lines}")
        seed = notebook_first_cell("%%mwtrain --workers 2 --cpu\n" + SEED_CODE, SEED_LINE)
        noop8 = notebook_first_cell("%%mwtrain --workers 8 --cpu\npass", None)
        rounds.append({"hand_launch_s": round(hand, 3), "seed_first_cell": seed, "noop_8_first_cell": noop8,
                       "seed_ratio": round(seed["cell_s"] / hand, 3), "load_average": os.getloadavg()})
        print(json.dumps(rounds[-1]), flush=True)

    def med(path: list[str]) -> float:
        values = []
        for r in rounds:
            v: Any = r
            for key in path:
                v = v[key]
            values.append(v)
        return round(statistics.median(values), 3)
    summary = {"hand_launch_s": med(["hand_launch_s"]), "seed_first_cell_s": med(["seed_first_cell", "cell_s"]),
               "seed_ratio_median_of_rounds": med(["seed_ratio"]),
               "noop_8_first_cell_s": med(["noop_8_first_cell", "cell_s"]),
               "template_ready_s": med(["seed_first_cell", "template_ready_s"]),
               "noop_8_waited_for_template_s": med(["noop_8_first_cell", "cell_waited_for_template_s"]),
               "noop_8_rest_s": med(["noop_8_first_cell", "cell_rest_s"]),
               "seed_waited_for_template_s": med(["seed_first_cell", "cell_waited_for_template_s"]),
               "seed_rest_s": med(["seed_first_cell", "cell_rest_s"])}
    path = write_result(args.name, {"command": " ".join(["python", "benchmarks/first_cell.py", *sys.argv[1:]]),
                                       "commit": commit, "load_average_before": load_before,
                                       "load_average_after": os.getloadavg(), "rounds": rounds, "summary": summary})
    print(json.dumps(summary, indent=1))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
