"""``%mwcluster start --ps 1 --workers 2 --coordinator notebook`` in a real notebook kernel (real
ipykernel driven like a Jupyter front end, real TensorFlow on CPU): the servers start, the kernel
itself is the coordinator and trains the tutorial's model; a second cluster is refused with the
reason and the first one is untouched; ``--force`` connects anyway; stop leaves no server behind
(engine/roles/notebook_coordinator.py).

One kernel walks through the steps in order (the second-cluster refusal needs a kernel that has
connected once, and a fresh kernel per step would triple the cost)."""

from __future__ import annotations

import json
import re
import time

import psutil
import pytest

from testbed.notebook_kernel import Notebook
from testbed.processes import MW_MODULES, descendants, wait_gone
from testbed.ps_cells import PS_FIT, assert_fit_trains

pytestmark = [pytest.mark.tf, pytest.mark.slow]

START = "%mwcluster start --ps 1 --workers {workers} --cpu --coordinator notebook"

#: The parameter-server tutorial's Keras path, run in the notebook's own kernel.
FIT = PS_FIT

STATUS = ("import json; print(json.dumps([(i.role, i.task, i.address, i.pid, i.state) for i in "
          "get_ipython().find_magic('mwcluster').__self__.session.cluster.status()]))")


def losses(text: str) -> list[float]:
    match = re.search(r"^losses (.*)$", text, re.M)
    assert match, text[-3000:]
    return [float(v) for v in match.group(1).split()]


def listening_ports(pid: int) -> dict[int, str]:
    """Ports ``pid`` listens on (TCP) -> the address bound."""
    return {c.laddr.port: c.laddr.ip for c in psutil.Process(pid).net_connections("tcp")
            if c.status == psutil.CONN_LISTEN}


def server_pids(nb: Notebook) -> set[int]:
    return descendants(nb.pid)


@pytest.fixture
def notebook():
    nb = Notebook()
    reply, _, _ = nb.execute("%load_ext mwnotebook", timeout=60)
    assert reply["content"]["status"] == "ok", reply["content"]
    yield nb
    nb.close()


def test_the_notebook_coordinates_once_refuses_a_second_cluster_and_stop_leaves_no_server(notebook):
    nb = notebook
    # bad combinations are usage errors before anything starts
    _, text, _ = nb.execute("%mwcluster start --workers 2 --coordinator notebook", timeout=60)
    assert "--coordinator notebook needs --ps P" in text, text
    _, text, _ = nb.execute("%mwcluster start --ps 1 --coordinator notebook --network private", timeout=60)
    assert "cannot use --network private" in text, text
    assert not server_pids(nb)

    # the opt-in: servers only, the open ports said plainly
    reply, notice, _ = nb.execute(START.format(workers=2), timeout=240)
    assert reply["content"]["status"] == "ok", notice
    assert "WITHOUT authentication on all interfaces" in notice and "cannot stop it" in notice, notice
    first = server_pids(nb)
    assert len(first) == 3, first  # worker-0, worker-1, ps-0: no coordinator kernel
    _, text, _ = nb.execute(STATUS, timeout=60)
    rows = json.loads(text.strip())
    assert [r[:2] for r in rows] == [["coordinator (notebook)", "chief:0"], ["worker server", "worker:0"],
                                     ["worker server", "worker:1"], ["parameter server", "ps:0"]], rows
    assert rows[0][3] == nb.pid and rows[0][4] == "notebook", rows
    assert {r[3] for r in rows[1:]} == first
    chief_port = int(rows[0][2].rsplit(":", 1)[1])
    for row in rows[1:]:  # every address that listens is named at start
        assert f"{row[1].replace(':', '-')} {row[2]}" in notice, (row, notice)
    assert f"its own gRPC server on port {chief_port}" in notice, notice

    # the kernel trains the tutorial's model itself, loss falling
    reply, text, _ = nb.execute(FIT.replace("EPOCHS", "3"), timeout=300)
    assert reply["content"]["status"] == "ok", text[-3000:]
    values = losses(text)
    assert_fit_trains(values, 3)
    assert "INFO:tensorflow" not in text, text[-3000:]  # TF's interactive INFO level: a line per closure
    # its own gRPC server: the chief's port, on every interface
    assert listening_ports(nb.pid).get(chief_port) in ("::", "0.0.0.0"), listening_ports(nb.pid)

    # the status's devices column asks the servers too (ps and workers here: CPU only)
    _, _, outputs = nb.execute("%mwcluster status", timeout=120)
    text = "".join(m["content"].get("data", {}).get("text/plain", "") for m in outputs)
    assert text.count("1 CPU, 0 GPU (CUDA_VISIBLE_DEVICES=-1)") == 3, text

    # a second cluster in this kernel: refused with the reason, the running one untouched
    _, text, _ = nb.execute(START.format(workers=1), timeout=60)
    assert "can safely do that only once" in text and "crashed the whole process" in text, text
    assert "--force" in text
    assert server_pids(nb) == first
    reply, text, _ = nb.execute("print(model.evaluate(tf.keras.utils.experimental.DatasetCreator(dataset_fn), "
                                "steps=2, verbose=0) > 0)", timeout=120)
    assert reply["content"]["status"] == "ok" and "True" in text, text[-3000:]

    # stop: every server gone; the kernel's own server is said to stay
    _, text, _ = nb.execute("%mwcluster stop", timeout=60)
    assert "cannot be stopped" in text, text
    left, _ = wait_gone(first, timeout=20, modules=MW_MODULES)  # generous: kills are asynchronous on a loaded machine
    assert not left, left
    _, text, _ = nb.execute("import os; print(os.environ.get('TF_CONFIG'))", timeout=30)
    assert text.strip() == "None", text  # the chief's TF_CONFIG is taken back

    # --force: a second cluster is connected; the kernel survives and trains on it
    reply, text, _ = nb.execute(START.format(workers=1) + " --force", timeout=240)
    assert reply["content"]["status"] == "ok", text
    assert "--force: connecting this kernel to a second cluster" in text, text
    second = server_pids(nb)
    assert len(second) == 2 and not second & first, second
    reply, text, _ = nb.execute(FIT.replace("EPOCHS", "2"), timeout=300)
    assert nb.km.is_alive(), "the kernel died on the forced second cluster"
    assert reply["content"]["status"] == "ok", text[-3000:]
    assert len(losses(text)) == 2
    nb.execute("%mwcluster stop", timeout=60)
    deadline = time.monotonic() + 20  # generous, see above
    while alive_servers(second) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive_servers(second)


def alive_servers(pids: set[int]) -> set[int]:
    return {p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE}
