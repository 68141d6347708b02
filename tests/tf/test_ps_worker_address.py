"""What TensorFlow's ``ClusterCoordinator`` does when a worker comes back on another address: the
fact behind a Slurm worker server moved off a failed node only at the next cell
(engine/roles/task_servers.py, docs/guide/slurm.md "Roles on Slurm").

A ps and two worker servers on loopback, the coordinator in a subprocess of its own (a process joins
one TensorFlow cluster once) scheduling steps all along: worker 1 is killed (the coordinator goes
on with worker 0), a server for worker 1 is started at a NEW address (the coordinator opens no
connection to it), then at its OLD address again (the coordinator connects and uses it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(300)]

EXPERIMENT = r'''
import json, os, socket, subprocess, sys, time
os.environ["CUDA_VISIBLE_DEVICES"] = ""

def free():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close(); return port

ports = {name: free() for name in ("chief", "w0", "w1", "ps", "w1new")}

def cluster(w1):
    return {"chief": [f"127.0.0.1:{ports['chief']}"], "ps": [f"127.0.0.1:{ports['ps']}"],
            "worker": [f"127.0.0.1:{ports['w0']}", f"127.0.0.1:{w1}"]}

SERVER = """
import json, sys, tensorflow as tf
c = json.loads(sys.argv[1])
tf.distribute.Server(tf.train.ClusterSpec(c["cluster"]), job_name=c["type"], task_index=c["index"],
                     protocol="grpc", start=True).join()
"""

def serve(spec, kind, index):
    return subprocess.Popen([sys.executable, "-c", SERVER, json.dumps({"cluster": spec, "type": kind, "index": index})],
                            stderr=subprocess.DEVNULL)

def connections(port):
    out = subprocess.run(["ss", "-tnH", "state", "established", f"( dport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    return len([line for line in out.splitlines() if line.strip()])

old = cluster(ports["w1"])
procs = [serve(old, "ps", 0), serve(old, "worker", 0)]
w1 = serve(old, "worker", 1)
import tensorflow as tf
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
    tf.train.ClusterSpec(old), task_type="chief", task_id=0, rpc_layer="grpc")
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    v = tf.Variable(0.0)

@tf.function
def step():
    v.assign_add(1.0)

def steps(n):
    for _ in range(n):
        coordinator.schedule(step)
    coordinator.join()
    return n

out = {}
steps(100)
out["both"] = connections(ports["w1"])
w1.kill(); w1.wait()
out["without_w1"] = steps(200)
moved = serve(cluster(ports["w1new"]), "worker", 1)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:  # the new server listens
    try:
        socket.create_connection(("127.0.0.1", ports["w1new"]), timeout=1).close(); break
    except OSError:
        time.sleep(0.2)
for _ in range(10):  # steps for some seconds: the coordinator's worker-1 thread looks for its worker
    steps(100); time.sleep(0.3)
out["to_new_address"] = connections(ports["w1new"])
moved.kill(); moved.wait()
back = serve(old, "worker", 1)
scheduled = 100 + 200 + 1000
out["to_old_address"] = 0
for _ in range(60):  # the coordinator finds it back within its retry interval
    scheduled += steps(50)
    out["to_old_address"] = connections(ports["w1"])
    if out["to_old_address"]:
        break
    time.sleep(0.5)
out["total"] = float(v.read_value())
out["scheduled"] = scheduled
print("RESULT", json.dumps(out), flush=True)
for p in procs + [back]:
    p.kill()
os._exit(0)
'''


def test_a_running_coordinator_takes_a_worker_back_only_on_its_old_address() -> None:
    done = subprocess.run([sys.executable, "-c", EXPERIMENT], capture_output=True, text=True, timeout=280)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, done.stdout[-2000:] + done.stderr[-3000:]
    out = json.loads(line[len("RESULT "):])
    assert out["both"] >= 1, out  # worker 1 in use before it is killed
    assert out["to_new_address"] == 0, out  # never connected at a new address
    assert out["to_old_address"] >= 1, out  # taken back on its old one
    assert out["total"] == out["scheduled"], out  # every step ran once: worker 0 carried on alone
