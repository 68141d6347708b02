"""A parameter-server cluster (``%%mwtrain --ps 1``) on three engines side by side in one run: local,
SSH (the test hosts) and Slurm (the test Slurm).

    python -m benchmarks.roles [--engines local ssh slurm] [--epochs 8] [--rounds 1]
    python -m benchmarks.roles --summarize   # the README's table, from every stored run

What is measured is what a user runs: ``%%mwtrain`` cells in a real notebook kernel (one ipykernel
per engine, ``%load_ext mwnotebook``, ``--no-dashboard``), the cells TensorFlow's parameter-server
tutorial writes at its size (tests/tf/test_ps_roles.py ``FIT`` and ``BACKED_UP``: a small tf_keras
model, ``fit`` on a ``DatasetCreator`` with ``steps_per_epoch``), each with one callback added that
notes when every scheduled step's result reached the coordinator (a thread per step waits on its
``RemoteValue``, so ``fit``'s loop is not held). All clocks are this machine's: the SSH hosts and the
Slurm nodes are network namespaces on it.

Per engine, in this order (each scenario runs on every engine in turn before the next one, so a
change in the machine's load hits them alike); the 2-worker cells all use one cluster,
``%%mwtrain --ps 1 --workers 2 --max-restarts 1``:

1. **to first step**: the notebook's first cell, 3 s after the worker template that
   ``%load_ext mwnotebook`` starts is ready (the cluster's servers and coordinator start with the
   cell), from the cell's request to the coordinator's first step result; and **steps/s with 2 worker
   servers** in the same cell, from the first step's result to the last's;
2. **worker death**: ``fit`` (twice the epochs); when epoch 3 begins, worker server 0's pid (from
   ``%mwcluster status``) gets SIGKILL: seconds until the next step result after the kill, and until
   the cluster names a new process for that server (restarted on its address; a thread in the
   notebook kernel watches ``server_pids`` while the magic runs the cell);
3. **ps death**: ``fit`` with ``BackupAndRestore``; when epoch 4 begins, the ps gets SIGKILL: seconds
   until the resumed run's first step result (every task renewed, the backup restored), and the
   restart's own seconds (the cell's ``[mwnotebook]`` line);
4. **steps/s with 1 worker server**: ``%mwcluster stop`` (timed), then a ``--workers 1`` cell: a
   cluster started later in the notebook, so its time to the first step too.

The SSH and Slurm engines share one test Slurm (benchmarks/remote.py ``slurm_test_cluster``: two
nodes, each an SSH test host too), so both place their tasks on the same two "machines". An engine
whose ``--ps`` fails is reported with its error, the others still measured. Root, slurm-wlm, munge.
Writes benchmarks/results/roles/<commit>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from benchmarks._suite import RESULTS, Run, start_kernel, stop_kernel
from testbed import slurm_cluster

ENGINES = ("local", "ssh", "slurm")

#: Added to the tutorial's cells: when each scheduled step's result is ready in the coordinator.
STEP_CLOCK = r'''
import threading as _threading, time as _time
class StepClock(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self._supports_tf_logs = True  # the logs as they are: RemoteValues, not fetched in fit's loop
        self.done, self.failed, self.waiting = [], 0, []
    def _wait(self, logs):
        try:
            tf.nest.map_structure(lambda v: v.fetch() if hasattr(v, "fetch") else v, logs)
        except Exception:
            self.failed += 1
            return
        now = _time.time()
        self.done.append(now)
        if len(self.done) == 1:
            print(f"first_step_at {now:.4f}", flush=True)
    def on_train_batch_end(self, batch, logs=None):
        self.waiting.append(_threading.Thread(target=self._wait, args=(logs,), daemon=True))
        self.waiting[-1].start()
    def on_train_end(self, logs=None):
        for thread in self.waiting:
            thread.join(30)
        print("step_times", " ".join(f"{t:.4f}" for t in sorted(self.done)), "failed", self.failed, flush=True)
'''


def _cells() -> tuple[str, str, int]:
    """(the fit cell, the BackupAndRestore cell, steps per scheduled call), from the tests' cells."""
    from testbed import ps_cells as ps

    fit = ps.PS_FIT.replace("history = model.fit", STEP_CLOCK + "history = model.fit")
    fit = fit.replace("verbose=2)", "verbose=2, callbacks=[StepClock()])")
    backed_up = ps.BACKED_UP.replace("history = model.fit", STEP_CLOCK + "history = model.fit")
    backed_up = backed_up.replace("WeightsProbe()])", "WeightsProbe(), StepClock()])")
    if "StepClock()" not in fit or "StepClock()])" not in backed_up:
        raise RuntimeError("testbed/ps_cells.py's cells changed: StepClock could not be added")
    per_call = int(re.search(r"steps_per_execution=(\d+)", fit).group(1))  # type: ignore[union-attr]
    return fit, backed_up, per_call


FIT, BACKED_UP, STEPS_PER_CALL = _cells()


# ----------------------------------------------------------------------------- a notebook per engine
@dataclass
class Notebook:
    """One notebook kernel with mwnotebook loaded, running ``%%mwtrain`` cells for one engine."""

    engine: str
    options: Callable[[int], str]  # %%mwtrain options placing N worker servers (and 1 ps) on this engine
    kernel: Any = None
    client: Any = None

    def start(self) -> None:
        self.kernel, self.client = start_kernel()
        self.execute("%load_ext mwnotebook")

    def close(self) -> None:
        if self.client is None:
            return
        with contextlib.suppress(Exception):
            self.execute("%mwcluster stop", timeout=120)
        stop_kernel(self.kernel, self.client)
        self.client = None

    def line(self, workers: int, extra: str = "") -> str:
        return f"--ps 1 --workers {workers} {self.options(workers)} --cpu --no-dashboard {extra}".strip()

    def execute(self, code: str, on_text: Callable[[str], None] | None = None,
                timeout: float = 900) -> tuple[float, str, dict[str, Any]]:
        """Run one cell: (time.time() when it was sent, its text output, its reply's content)."""
        out: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            content, kind = msg["content"], msg["msg_type"]
            text = ""
            if kind == "stream":
                text = content["text"]
            elif kind in ("display_data", "update_display_data", "execute_result"):
                text = content.get("data", {}).get("text/plain", "") + "\n"
            elif kind == "error":
                text = "\n".join(content.get("traceback", [])) + "\n"
            if text:
                out.append(text)
                if on_text is not None:
                    on_text("".join(out))

        sent = time.time()
        reply = self.client.execute_interactive(code, timeout=timeout, output_hook=hook)
        return sent, "".join(out), reply["content"]

    def mwtrain(self, line: str, body: str, on_text: Callable[[str], None] | None = None) -> tuple[float, str]:
        sent, text, reply = self.execute(f"%%mwtrain {line}\n{body}", on_text)
        if reply["status"] != "ok":
            raise RuntimeError(f"%%mwtrain {line} failed: {reply.get('ename')}: {reply.get('evalue')}\n{text[-3000:]}")
        return sent, text

    def status(self) -> dict[str, tuple[int | None, str]]:
        """Each task's (pid, state), as ``%mwcluster status`` shows them (``worker:0``, ``ps:0``, ``chief:0``)."""
        code = ("import json as _json\n"
                "_cluster = get_ipython().magics_manager.registry['MWMagics'].session.cluster\n"
                "print('@@' + _json.dumps({i.task: (i.pid, i.state) for i in _cluster.status()}))")
        _, text, reply = self.execute(code, timeout=120)
        if reply["status"] != "ok":
            raise RuntimeError(f"no status: {reply.get('evalue')}")
        return {task: (pid, state) for task, (pid, state) in json.loads(text[text.rindex("@@") + 2:]).items()}

    def pids(self) -> dict[str, int]:
        return {task: pid for task, (pid, _state) in self.status().items() if pid is not None}


def _times(text: str, name: str) -> list[float]:
    return [float(v) for v in re.findall(rf"{name} ([0-9.]+)", text)]


def _step_times(text: str) -> list[float]:
    match = re.search(r"step_times ([0-9. ]*) failed", text)
    if not match:
        raise RuntimeError(f"no step_times in the cell's output:\n{text[-3000:]}")
    return [float(v) for v in match.group(1).split()]


def _rate(times: list[float]) -> float:
    """Steps per second from the first step result to the last (tracing and start-up left out)."""
    if len(times) < 2:
        return float("nan")
    return STEPS_PER_CALL * (len(times) - 1) / (times[-1] - times[0])


class KillAt:
    """An output hook: SIGKILL ``task``'s pid once ``marker`` shows in the cell's output."""

    def __init__(self, notebook: Notebook, task: str, marker: str) -> None:
        self.pid = notebook.pids()[task]
        self.marker = marker
        self.at: float | None = None

    def __call__(self, text: str) -> None:
        if self.at is None and self.marker in text:
            os.kill(self.pid, signal.SIGKILL)
            self.at = time.time()


# ----------------------------------------------------------------------------- the scenarios
#: Every 2-worker cell: one cluster serves the first step, the worker death and the ps death.
TWO = "--max-restarts 1"


def first_step_and_rate_2(nb: Notebook, epochs: int) -> dict[str, float]:
    sent, text = nb.mwtrain(nb.line(2, TWO), FIT.replace("EPOCHS", str(epochs)))
    times = _step_times(text)
    return {"to_first_step_s": _times(text, "first_step_at")[0] - sent, "steps_per_s_2_workers": _rate(times)}


#: Run in the notebook kernel before the worker-death cell: a thread that notes when the cluster's
#: ``server_pids`` name a new process for worker server 0 (restarted and serving on its address),
#: while the magic runs the cell.
WATCH_WORKER_0 = """
import threading as _threading, time as _time
_cluster = get_ipython().magics_manager.registry['MWMagics'].session.cluster
_victim, _back = _cluster.server_pids.get('worker-0'), []
def _watch(deadline=_time.time() + 600):
    while not _back and _time.time() < deadline:
        if _cluster.server_pids.get('worker-0') not in (None, _victim):
            _back.append(_time.time())
        _time.sleep(0.05)
_threading.Thread(target=_watch, daemon=True).start()
"""


def worker_death(nb: Notebook, epochs: int, wait: float = 60) -> dict[str, Any]:
    kill = KillAt(nb, "worker:0", "Epoch 3/")
    nb.execute(WATCH_WORKER_0)
    _, text = nb.mwtrain(nb.line(2, TWO), FIT.replace("EPOCHS", str(2 * epochs)), on_text=kill)
    if kill.at is None:
        raise RuntimeError("worker:0 was not killed (no 'Epoch 3/' line)")
    times = _step_times(text)
    after = [t for t in times if t > kill.at]
    if not after:
        raise RuntimeError("no step result after the kill")
    _, back, _ = nb.execute(f"_time.sleep(0.1)\nwhile not _back and _time.time() < {time.time() + wait}:\n"
                            f"    _time.sleep(0.1)\nprint('back_at', *_back)", timeout=wait + 60)
    found = _times(back, "back_at")
    return {"worker_kill_to_next_step_s": after[0] - kill.at, "steps_per_s_after_kill": _rate(after),
            "worker_kill_to_server_back_s": found[0] - kill.at if found else f"not back after {wait:.0f} s"}


def ps_death(nb: Notebook, epochs: int, backup: str) -> dict[str, Any]:
    kill = KillAt(nb, "ps:0", "Epoch 4/")
    cell = BACKED_UP.replace("EPOCHS", str(epochs)).replace("BACKUP", repr(backup))
    _, text = nb.mwtrain(nb.line(2, TWO), cell, on_text=kill)
    if kill.at is None:
        raise RuntimeError("ps:0 was not killed (no 'Epoch 4/' line)")
    resumed = [t for t in _times(text, "first_step_at") if t > kill.at]
    epochs_run = re.search(r"^\S*\s*epochs ([0-9 ]+)$", text, re.M)
    restart = re.search(r"; restart 1 of 1, ([0-9.]+) s$", text, re.M)
    cause = re.search(r"^\[mwnotebook\] (.*)$", text, re.M)
    missing = [name for name, found in (("a step after the kill", resumed), ("the epochs line", epochs_run),
                                        ("the restart line", restart)) if not found]
    if missing or restart is None or epochs_run is None:
        raise RuntimeError(f"the run did not resume: no {', '.join(missing)}:\n{text[-3000:]}")
    return {"ps_kill_to_resumed_first_step_s": resumed[0] - kill.at,
            "ps_restart_s": float(restart.group(1)),
            "ps_restart_cause": cause.group(1)[:200] if cause else "",
            "resumed_from_epoch": int(epochs_run.group(1).split()[0])}


def rate_1(nb: Notebook, epochs: int) -> dict[str, float]:
    stopping = time.perf_counter()
    nb.execute("%mwcluster stop", timeout=300)
    stopped = time.perf_counter() - stopping
    sent, text = nb.mwtrain(nb.line(1, TWO), FIT.replace("EPOCHS", str(epochs)))
    return {"cluster_stop_s": stopped, "to_first_step_later_cluster_1_worker_s": _times(text, "first_step_at")[0] - sent,
            "steps_per_s_1_worker": _rate(_step_times(text))}


# ----------------------------------------------------------------------------- the engines
@contextlib.contextmanager
def engine_options(names: list[str]) -> Iterator[dict[str, Callable[[int], str]]]:
    """Per engine, the ``%%mwtrain`` options that place N worker servers and 1 ps on it (SSH and Slurm
    on one test Slurm, made here and destroyed at the end)."""
    options: dict[str, Callable[[int], str]] = {"local": lambda n: ""}
    with contextlib.ExitStack() as stack:
        if {"ssh", "slurm"} & set(names):
            from benchmarks.remote import slurm_test_cluster

            slurm = stack.enter_context(slurm_test_cluster(2))
            hosts = ",".join(h.alias for h in slurm.nodes)
            first, last = hosts.split(",")[0], hosts.split(",")[-1]
            # 2 worker servers: one per host (the default placement: the coordinator on the first, the
            # ps on the last); 1: on the first host, the ps kept on the last as with 2
            options["ssh"] = lambda n: f"--hosts {hosts}" if n == 2 else f"--hosts {first} --place ps={last}"
            options["slurm"] = lambda n: '--slurm "-N 2"'
        yield options


@contextlib.contextmanager
def notebooks(options: dict[str, Callable[[int], str]], names: list[str]) -> Iterator[dict[str, Notebook]]:
    """A started notebook per engine, its ``%load_ext`` worker template ready; all stopped at the end."""
    with contextlib.ExitStack() as stack:
        started = {name: Notebook(name, options[name]) for name in names}
        for nb in started.values():
            stack.callback(nb.close)
            nb.start()
        for nb in started.values():
            nb.execute("import threading\n[t.join(300) for t in threading.enumerate() if t.name == 'mwnotebook-prestart']")
        time.sleep(3)  # then the first cell, as a user types it
        yield started


Scenario = Callable[[Notebook], dict[str, Any]]


@dataclass
class Table:
    """Every round's figures per engine; an engine that failed is skipped for the rest of its round."""

    samples: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)

    def measure(self, name: str, nb: Notebook, scenario: Scenario) -> None:
        if nb.engine in self.failed:
            return  # its state is unknown after a failure: the next round starts it afresh
        started = time.time()
        try:
            got = scenario(nb)
        except Exception as exc:  # the engine's --ps does not work (yet): noted, the others go on
            self.failed.add(nb.engine)
            self.errors.setdefault(nb.engine, []).append(f"{name}: {type(exc).__name__}: {str(exc)[:2000]}")
            traceback.print_exc()
            return
        for key, value in got.items():
            self.samples.setdefault(nb.engine, {}).setdefault(key, []).append(value)
        print(f"{nb.engine:6s} {name}: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                                    for k, v in got.items())
              + f"  ({time.time() - started:.0f} s)", flush=True)

    @property
    def figures(self) -> dict[str, dict[str, Any]]:
        """Medians over the rounds (a figure that is no number: the last round's)."""
        def one(values: list[Any]) -> Any:
            numbers = [v for v in values if isinstance(v, float)]
            return statistics.median(numbers) if numbers else values[-1]
        return {engine: {k: one(v) for k, v in figs.items()} for engine, figs in self.samples.items()}

    def ratios(self) -> dict[str, dict[str, float]]:
        figures = self.figures
        local = figures.get("local", {})
        return {engine: {k: v / local[k] for k, v in figs.items()
                         if isinstance(v, float) and isinstance(local.get(k), float) and local[k]}
                for engine, figs in figures.items() if engine != "local"}


#: The figures benchmarks/README.md shows, in its order, with their row labels.
ROWS = {
    "to_first_step_s": "first `--workers 2` cell of the notebook -> first step (s)",
    "to_first_step_later_cluster_1_worker_s": "a later cluster (`--workers 1`) -> first step (s)",
    "steps_per_s_2_workers": "steps/s, 2 worker servers",
    "steps_per_s_1_worker": "steps/s, 1 worker server",
    "worker_kill_to_next_step_s": "worker server SIGKILL -> next step result (s)",
    "worker_kill_to_server_back_s": "worker server SIGKILL -> its replacement named (s)",
    "ps_kill_to_resumed_first_step_s": "ps SIGKILL -> resumed run's first step (s)",
    "ps_restart_s": "the ps restart's own seconds (its `[mwnotebook]` line)",
    "cluster_stop_s": "`%mwcluster stop` (s)",
}


Round = dict[str, dict[str, Any]]  # engine -> figure -> value, of one round (engines side by side)


def rounds_of(samples: dict[str, dict[str, list[Any]]], count: int) -> list[Round]:
    """Split a run's samples into its rounds (an engine that failed early in a round has no figures
    in it: its samples belong to the last rounds it ran in full)."""
    rounds: list[Round] = [{} for _ in range(count)]
    for engine, figures in samples.items():
        for key, values in figures.items():
            for j, value in enumerate(values):
                rounds[count - len(values) + j].setdefault(engine, {})[key] = value
    return rounds


def stored_rounds() -> list[Round]:
    """Every round of every stored run of this script (benchmarks/results/roles/*.json)."""
    found: list[Round] = []
    for path in sorted((RESULTS / "roles").glob("*.json")):
        for run in json.loads(path.read_text())["runs"]:
            found += rounds_of(run["results"]["samples"], run["results"]["rounds"])
    return found


def markdown(rounds: list[Round]) -> str:
    """benchmarks/README.md's table: per engine the median over ``rounds`` (range), and beside SSH and
    Slurm the median of their ratio to local in the same round (range)."""
    engines = [e for e in ENGINES if any(e in r for r in rounds)]
    lines = ["| measurement | " + " | ".join(engines) + " |", "|---" * (len(engines) + 1) + "|"]
    for key, label in ROWS.items():
        digits = 0 if key.startswith("steps_per_s") else 2
        cells = []
        for engine in engines:
            values = [r[engine][key] for r in rounds if isinstance(r.get(engine, {}).get(key), float)]
            if not values:
                cells.append("not measured")
                continue
            text = (f"**{statistics.median(values):.{digits}f}** "
                    f"({min(values):.{digits}f}-{max(values):.{digits}f})")
            ratios = [r[engine][key] / r["local"][key] for r in rounds if engine != "local"
                      and isinstance(r.get(engine, {}).get(key), float)
                      and isinstance(r.get("local", {}).get(key), float) and r["local"][key]]
            if ratios:
                text += f", **{statistics.median(ratios):.2f}x** ({min(ratios):.2f}-{max(ratios):.2f})"
            cells.append(text)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--epochs", type=int, default=8, help="epochs of 20 steps per fit (default 8)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds, each in fresh notebooks; figures are medians (default 1: ~5 min)")
    parser.add_argument("--summarize", action="store_true",
                        help="measure nothing: the table of every stored run's rounds (benchmarks/README.md's)")
    args = parser.parse_args()
    if args.summarize:
        print(markdown(stored_rounds()))
        return 0
    if args.epochs < 6:  # the ps is killed when epoch 4 begins: the resumed run needs epochs left to train
        parser.error(f"--epochs must be 6 or more, got {args.epochs}")
    if {"ssh", "slurm"} & set(args.engines):
        reason = slurm_cluster.unavailable_reason()
        if reason:
            print(f"cannot run the SSH and Slurm engines here: {reason}")
            return 1
    run = Run("roles")
    table = Table()
    epochs = args.epochs
    with engine_options(args.engines) as options, tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            table.failed.clear()
            with notebooks(options, args.engines) as started:
                scenarios: list[tuple[str, Scenario]] = [
                    ("first step, 2 workers", lambda nb: first_step_and_rate_2(nb, epochs)),
                    ("worker death", lambda nb: worker_death(nb, epochs)),
                    ("ps death", lambda nb: ps_death(nb, epochs, f"{tmp}/{nb.engine}-{round_}-backup")),
                    ("1 worker", lambda nb: rate_1(nb, epochs)),
                ]
                for name, scenario in scenarios:
                    for nb in started.values():
                        table.measure(name, nb, scenario)
    results = {"epochs": epochs, "steps_per_epoch": 20, "steps_per_call": STEPS_PER_CALL,
               "rounds": args.rounds, "samples": table.samples, "figures": table.figures,
               "ratio_to_local": table.ratios(), "not_measured": table.errors,
               "how": "%%mwtrain cells in notebook kernels (ipykernel, %load_ext mwnotebook, --no-dashboard)"}
    print(json.dumps({k: results[k] for k in ("figures", "ratio_to_local", "not_measured")}, indent=1))
    print(markdown(rounds_of(table.samples, args.rounds)))
    print(f"written to {run.write(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
