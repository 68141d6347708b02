"""Scenarios 5-8 of benchmarks/reliability_table.md, driven through real notebook kernels.

Each "notebook" is a python3 kernel started with jupyter_client, exactly what JupyterLab's front end
talks to: ``%load_ext mwnotebook``, then ``%%mwtrain --workers 2 --cpu`` cells. The interrupt is
the front end's stop button (``interrupt_kernel``); the crash is a SIGKILL of the kernel's pid.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from mwnotebook import Cluster
from testbed.processes import CLUSTER_MODULES, MW_MODULES, WORKER_MODULES, descendants, kill_all, wait_gone
from tests._plugins.reliability_table import record

from .scenario import LONG_FIT, seed_lines_ok, worker_lines

pytestmark = [pytest.mark.reliability, pytest.mark.tf]

MWTRAIN = "%%mwtrain --workers 2 --cpu\n"
EXPECTED = [f"[worker {i}] worker={i} replicas=2 initial_loss=0.7459 final_loss=0.4168 final_accuracy=0.8281"
            for i in range(2)]


def _wait_for_training(nb, msg_id: str, stamp, timeout: float = 180) -> None:
    """Wait until both workers are past batch 5 of the long fit (or fail with the cell's output)."""
    deadline = time.monotonic() + timeout
    while not all(stamp.with_name(f"{stamp.name}.{i}").exists() for i in range(2)):
        if time.monotonic() > deadline:
            reply, text, _ = nb.collect(msg_id, timeout=5)
            raise AssertionError(f"training did not start: {reply['content']} {text[-2000:]}")
        time.sleep(0.05)


def test_5_notebook_interrupt_during_fit(shared_notebook, seed_code, tmp_path):
    nb = shared_notebook
    stamp = tmp_path / "batch5"
    msg_id = nb.submit(MWTRAIN + LONG_FIT.format(stamp=str(stamp), fault=""))
    _wait_for_training(nb, msg_id, stamp)
    old = nb.workers(WORKER_MODULES)
    assert len(old) == 2
    t0_wall, t0 = time.time(), time.monotonic()
    nb.km.interrupt_kernel()  # the notebook's stop button
    left, stopped_s = wait_gone(old, timeout=15, modules=MW_MODULES)
    reply, text, _ = nb.collect(msg_id, timeout=60)
    reply_s = reply["header"]["date"].timestamp() - t0_wall if isinstance(reply["header"]["date"], dt.datetime) \
        else time.monotonic() - t0
    content = reply["content"]
    nxt, next_text, _ = nb.execute(MWTRAIN + seed_code, timeout=180)
    recovered = nxt["content"]["status"] == "ok" and sorted(worker_lines(next_text)) == EXPECTED
    kill_all(left)
    record("5 notebook interrupt during fit", limit_s=5, detected_s=round(reply_s, 2), failed_s=stopped_s,
           recovered=recovered, orphans=len(left),
           note=f"failed s = old workers gone; detected s = error reply; {content.get('ename')}")
    assert content["status"] == "error" and content["ename"] in ("ClusterInterrupted", "KeyboardInterrupt"), content
    assert not left and stopped_s < 5, f"workers still alive {stopped_s:.1f} s after the interrupt"
    assert recovered, next_text[-3000:]


def test_6_sigkill_of_the_notebook_kernel(notebook_factory, tmp_path):
    nb = notebook_factory()
    stamp = tmp_path / "batch5"
    msg_id = nb.submit(MWTRAIN + LONG_FIT.format(stamp=str(stamp), fault=""))
    _wait_for_training(nb, msg_id, stamp)
    pids = nb.workers()  # worker kernels and the namespace holder, if any
    assert len(nb.workers(WORKER_MODULES)) == 2
    os.kill(nb.pid, signal.SIGKILL)
    left, gone_s = wait_gone(pids, timeout=15, modules=MW_MODULES)
    kill_all(left)
    record("6 SIGKILL of the notebook kernel", limit_s=5, failed_s=gone_s, orphans=len(left),
           note=f"failed s = last of {len(pids)} mwnotebook processes gone")
    assert not left, f"{sorted(left)} survived the notebook kernel by {gone_s:.1f} s"
    assert gone_s < 5  # a detection time the fault scenarios set (the reliability table's limit column): a hang bound


@pytest.mark.slow
def test_7_thirty_reruns_of_the_seed_in_a_notebook(shared_notebook, seed_code):
    """Measured in the notebook kernel's own process (psutil on its pid), through %%mwtrain."""
    nb = shared_notebook
    nb.execute("%mwcluster stop", timeout=60)  # whatever scenario 5 left, start from a new cluster
    proc = psutil.Process(nb.pid)
    reply, text, _ = nb.execute(MWTRAIN + seed_code, timeout=240)  # cold start: workers + TF import
    assert reply["content"]["status"] == "ok", text[-3000:]
    workers = nb.workers()
    fds, threads, seconds, differing, aborted = [], [], [], [], []
    for run in range(30):
        started = time.monotonic()
        reply, text, _ = nb.execute(MWTRAIN + seed_code, timeout=120)
        seconds.append(time.monotonic() - started)
        lines = sorted(worker_lines(text))
        content = reply["content"]
        if content["status"] != "ok" and "Collective ops is aborted" in (content.get("evalue") or ""):
            # TensorFlow's own race when a rerun rebuilds the strategy (measured ~1 in 10 reruns
            # before mwnotebook held replaced objects until all workers finished, ~1 in 120 after):
            # diagnosed, the workers restart, and the next rerun must succeed.
            aborted.append(run)
        elif content["status"] != "ok" or lines != EXPECTED:
            differing.append((run, content.get("ename"), (content.get("evalue") or "")[:300], lines))
        # Count what stays open after a garbage collection: cyclic garbage (one fd per cell until the
        # collector's next pass, measured as a 7-10 cell sawtooth) is not growth.
        nb.execute("import gc as _gc; _gc.collect(); del _gc", timeout=60)
        fds.append(proc.num_fds())
        threads.append(proc.num_threads())
    warm = 5  # thread pools and caches fill during the first reruns
    # A leak shows as the peak of the last ten reruns rising above the peak of ten earlier ones.
    fd_growth = max(fds[-10:]) - max(fds[warm:warm + 10])
    thread_growth = max(threads[-10:]) - max(threads[warm:warm + 10])
    same_workers = nb.workers() == workers or bool(aborted)  # an abort restarts the group
    record("7 30 seed reruns on a warm cluster", recovered=not differing and same_workers, orphans=None,
           ok=fd_growth <= 2 and thread_growth <= 2,
           note=(f"{30 - len(differing) - len(aborted)}/30 identical, {len(aborted)} TF abort(s) recovered; fds {fds[0]}..{max(fds)} (peak growth {fd_growth:+d} after warm-up), "
                 f"threads {threads[0]}..{max(threads)} (peak growth {thread_growth:+d}); "
                 f"{sum(seconds) / len(seconds):.2f} s/run"))
    problems = [f"{len(differing)} reruns differed: {differing[:3]}"] if differing else []
    if len(aborted) > 1 or (aborted and aborted[-1] == 29):
        problems.append(f"TensorFlow aborted the collectives in reruns {aborted} (at most one, then recovery)")
    if not same_workers:
        problems.append("the warm cluster was replaced during the reruns")
    if fd_growth > 2:
        problems.append(f"open fds grew after warm-up: {fds}")
    if thread_growth > 2:
        problems.append(f"threads grew after warm-up: {threads}")
    assert not problems, "\n".join(problems)


def _netns(pids: set[int]) -> set[str]:
    return {os.readlink(f"/proc/{pid}/ns/net") for pid in pids}


def _tf_ports(nb) -> set[int]:
    """The TF ports of a notebook's workers, as its cluster handed them out (a forked worker's
    /proc/PID/environ shows its template's start-up environment, not the TF_CONFIG it was given)."""
    code = ("import json\nfrom mwnotebook.frontend.notebook import magics as _m\n"
            "print('PORTS', json.dumps([c['cluster']['worker'][c['task']['index']] "
            "for c in _m._magics.session.cluster.tf_configs]))")
    _, out, _ = nb.execute(code, timeout=30)
    line = next(line for line in out.splitlines() if line.startswith("PORTS "))
    return {int(address.rsplit(":", 1)[1]) for address in json.loads(line[len("PORTS "):])}


def test_8a_tf_ports_taken_by_another_process(seed_code):
    """Another program holds 200 ports (100 plain listeners, 100 SO_REUSEPORT listeners, as TF's own
    gRPC server binds); a host-network cluster must pick others and still run the seed."""
    holder = subprocess.Popen([sys.executable, "-c", _PORT_HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        taken = {int(p) for p in holder.stdout.readline().split()}
        assert len(taken) == 200
        before = descendants()
        t0 = time.monotonic()
        with Cluster(workers=2, cpu=True, network="host") as cluster:
            ports = {int(a.rsplit(":", 1)[1]) for a in cluster.tf_configs[0]["cluster"]["worker"]}
            result = cluster.run(seed_code, timeout=180)
            ok = seed_lines_ok([result.stdout(i) for i in range(2)])
            pids = descendants() - before
        left, _ = wait_gone(pids, timeout=5, modules=MW_MODULES)
        kill_all(left)
        record("8a TF ports taken by another process", recovered=ok and not ports & taken, orphans=len(left),
               note=f"--network host; cluster ports {sorted(ports)}; {time.monotonic() - t0:.1f} s")
        assert not ports & taken, f"the cluster chose ports another process holds: {ports & taken}"
        assert ok
        assert not left
    finally:
        holder.kill()
        holder.wait()


_PORT_HOLDER = """
import socket, sys, time
socks = []
for reuse in (False, True):
    for _ in range(100):
        s = socket.socket()
        if reuse:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("0.0.0.0", 0)); s.listen(); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks), flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_8b_two_notebooks_start_clusters_at_the_same_moment(notebook_factory, seed_code):
    a, b = notebook_factory(), notebook_factory()
    barrier = threading.Barrier(2)
    out: dict[str, tuple] = {}

    def go(name: str, nb) -> None:
        barrier.wait()
        out[name] = nb.execute(MWTRAIN + seed_code, timeout=300)

    t0 = time.monotonic()
    threads = [threading.Thread(target=go, args=(n, nb)) for n, nb in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(320)
    elapsed = time.monotonic() - t0
    ok = {n: out.get(n) is not None and out[n][0]["content"]["status"] == "ok"
          and sorted(worker_lines(out[n][1])) == EXPECTED for n in ("a", "b")}
    wa, wb = a.workers(WORKER_MODULES), b.workers(WORKER_MODULES)
    ports_a, ports_b = _tf_ports(a), _tf_ports(b)
    everything = a.workers(CLUSTER_MODULES) | b.workers(CLUSTER_MODULES)  # the templates stay with their notebooks
    for nb in (a, b):
        nb.execute("%mwcluster stop", timeout=30)
    left, _ = wait_gone(everything, timeout=5, modules=MW_MODULES)
    kill_all(left)
    shared = ports_a & ports_b
    record("8b two notebooks start clusters at once", recovered=all(ok.values()), orphans=len(left),
           note=(f"ports {sorted(ports_a)} / {sorted(ports_b)}"
                 f"{' (same numbers, separate network namespaces)' if shared else ''}; {elapsed:.1f} s"))
    assert all(ok.values()), {n: (out[n][0]["content"], out[n][1][-2000:]) for n in out}
    assert len(wa) == 2 and len(wb) == 2 and not wa & wb
    if shared:  # the same port numbers are only fine in separate network namespaces
        assert not _netns(wa) & _netns(wb), f"both clusters use ports {shared} on the same network"
    assert not left
