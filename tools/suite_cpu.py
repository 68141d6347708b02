"""Where a command's CPU goes, by kind of process: run it and sample every process on the machine.

    python -m tools.suite_cpu [--interval 0.5] [-- COMMAND ...]

Default command: ``CI=true bash .ci/run`` from the repository root (the whole suite as CI runs it).
Every ``--interval`` seconds each process's user + system CPU time is read from ``/proc/PID/stat``
and its command line is read once, when the process is first seen. When the command ends, the
largest CPU time seen for each process is added up by kind: worker kernels, worker templates,
remote agents and kernels, notebook kernels, Chromium, JupyterLab, pytest, and so on. A process
that lives shorter than one interval can be missed, and a forked worker that is seen before it
renames itself counts as a template. Writes benchmarks/results/suite_cpu/<commit>.json. Not a test: it
asserts nothing. Run it with nothing else running (it measures the whole machine).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import threading
import time

from benchmarks._suite import ROOT, write_result

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

#: (kind, any of these in the command line), the first match wins.
KINDS = (
    ("worker template", ("mwnotebook.processes.worker_template",)),
    ("worker kernel", ("worker_kernel",)),
    ("remote agent, template or kernel (SSH / Slurm test hosts)", ("<mwnotebook-remote-agent>",)),
    # pytest-xdist's worker processes start as ``python -c "import sys;exec(eval(sys.stdin...`` (execnet)
    ("pytest process (the tests' own code)", ("exec(eval(sys.stdin", "pytest", "execnet")),
    ("notebook or plain kernel", ("ipykernel_launcher",)),
    ("chromium", ("chrom",)),
    ("jupyter server", ("jupyterlab", "-m notebook", "jupyter-lab", "jupyter_server")),
    ("mypy", ("mypy",)),
    ("slurm / munge", ("slurm", "munged")),
    ("ssh", ("sshd", "ssh ")),
)


def kind_of(command: str) -> str:
    for kind, marks in KINDS:
        if any(mark in command for mark in marks):
            return kind
    words = command.split()
    return "other: " + (" ".join(words[:2])[:60] if words else "?")


def _sample(seen: dict[str, tuple[str, float]]) -> None:
    """One pass over /proc: remember each new process's command line, update every CPU time."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            fields = stat[stat.rindex(")") + 2:].split()
            cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
            key = f"{entry}:{fields[19]}"  # pid and start time: a reused pid is another process
            if key in seen:
                seen[key] = (seen[key][0], max(seen[key][1], cpu))
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                command = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
            seen[key] = (command or stat[stat.index("(") + 1:stat.rindex(")")], cpu)
        except (OSError, ValueError, IndexError):
            continue  # ended between the listing and the read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("command", nargs="*", default=["bash", ".ci/run"])
    args = parser.parse_args()
    seen: dict[str, tuple[str, float]] = {}
    done = threading.Event()

    def sampler() -> None:
        while not done.is_set():
            _sample(seen)
            done.wait(args.interval)

    thread = threading.Thread(target=sampler, daemon=True)
    started = time.monotonic()
    thread.start()
    status = subprocess.run(args.command, cwd=ROOT, env=dict(os.environ, CI="true")).returncode
    wall = time.monotonic() - started
    done.set()
    thread.join()
    cpu: dict[str, float] = collections.defaultdict(float)
    count: collections.Counter[str] = collections.Counter()
    for command, seconds in seen.values():
        kind = kind_of(command)
        cpu[kind] += seconds
        count[kind] += 1
    rows = [{"kind": k, "cpu_s": round(v, 1), "processes": count[k]}
            for k, v in sorted(cpu.items(), key=lambda item: -item[1])]
    path = write_result("suite_cpu", {"command": " ".join(["python", "benchmarks/suite_cpu.py", *sys.argv[1:]]),
                                      "measured_command": args.command, "exit_status": status,
                                      "wall_s": round(wall, 1), "cpu_s": round(sum(cpu.values()), 1), "rows": rows})
    print(f"{sum(cpu.values()):.0f} s of CPU in {wall:.0f} s ({os.cpu_count()} cores), {len(seen)} processes")
    for row in rows[:20]:
        print(f"{row['cpu_s']:8.1f} s {row['processes']:5d}  {row['kind']}")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
