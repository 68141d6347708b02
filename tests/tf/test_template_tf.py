"""Worker templates: workers forked from a process that has TensorFlow imported.

Real templates, real forked kernels, real two-worker MultiWorkerMirroredStrategy runs on CPU.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from mwnotebook import Cluster, WorkerDiedError
from mwnotebook.engine.loop import background_loop
from mwnotebook.launchers.local.handles import ForkedKernelHandle, LocalKernelHandle
from mwnotebook.launchers.local.template_pool import pool
from testbed.processes import WORKER_MODULES, alive_workers, is_worker, wait_gone
from testbed.seed_cell import expected_line

pytestmark = pytest.mark.tf

TEMPLATE_MODULE = "mwnotebook.processes.worker_template"


def _template_of(cluster: Cluster):
    template = cluster.launcher.template
    assert template is not None, "the cluster did not use a worker template"
    return template


def _handles(cluster: Cluster) -> list:
    return [w.handle for w in cluster.workers]


@pytest.fixture(scope="module")
def forked_cluster():
    with Cluster(workers=2, cpu=True) as cluster:
        cluster.start()
        yield cluster


def test_forked_workers_print_the_seeds_exact_lines(forked_cluster, seed_code, no_orphans):
    template = _template_of(forked_cluster)
    for handle in _handles(forked_cluster):
        assert isinstance(handle, ForkedKernelHandle)
        proc = psutil.Process(handle.pid)
        assert proc.ppid() == template.pid  # forked from the template, not a fresh interpreter
        assert is_worker(proc)  # named as a worker kernel in the process list
    # Each worker got its own TF_CONFIG after the fork, and the notebook's parent pid is not left over.
    probe = forked_cluster.run("import os, json\nprint(json.loads(os.environ['TF_CONFIG'])['task']['index'], "
                               "'MWNOTEBOOK_PARENT_PID' in os.environ)")
    assert [probe.stdout(i).split() for i in range(2)] == [["0", "False"], ["1", "False"]]
    result = forked_cluster.run(seed_code, timeout=240)
    for i in range(2):
        assert result.stdout(i) == expected_line(i) + "\n"  # exactly the hand launch's output


def test_template_never_starts_the_tensorflow_runtime(forked_cluster, seed_code):
    """The template has imported TensorFlow, yet after forking workers that ran the seed it still
    has no eager context (nothing listed devices, ran an op or configured collectives in it)."""
    template = _template_of(forked_cluster)
    forked_cluster.run("import tensorflow as tf\nprint(len(tf.config.list_physical_devices()))")
    status = background_loop().run(template.status())
    assert status["tensorflow_imported"] is True
    assert status["tf_keras_imported"] is True  # TF_USE_LEGACY_KERAS=1 workers get tf_keras preloaded
    assert status["context_created"] is False and status["context_initialized"] is False
    assert template.ready_info()["context_created"] is False  # also at the time it said it was ready


def test_forked_workers_inherit_the_templates_objects_frozen(forked_cluster):
    # The template froze what it loaded (gc.freeze): a worker's collections never scan those
    # ~350,000 objects, which stay shared with the template (processes/worker_template.py).
    answers = forked_cluster.query("import gc\nprint(gc.get_freeze_count() > 100_000, len(gc.get_objects()) < 50_000)")
    assert answers == ["True True\n", "True True\n"]


def test_the_context_check_detects_a_created_context():
    """The check used above fails where it should: in a process that ran one TensorFlow op."""
    code = ("import tensorflow as tf\nfrom mwnotebook.processes.worker_template import status\n"
            "before = status()['context_created']\ntf.constant(1.0) + 1\n"
            "import json; print(json.dumps([before, status()['context_created'], status()['context_initialized']]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [False, True, True], out.stderr[-2000:]


def test_a_restart_after_a_failure_forks_fresh_workers(forked_cluster):
    template = _template_of(forked_cluster)
    old = {h.pid for h in _handles(forked_cluster)}
    with pytest.raises(WorkerDiedError):
        forked_cluster.run("import os\nif os.environ['MWNOTEBOOK_WORKER_INDEX'] == '1':\n    os._exit(3)\n"
                           "import time\ntime.sleep(30)", timeout=60)
    result = forked_cluster.run("import os\nprint(os.getppid())")
    new = _handles(forked_cluster)
    assert {h.pid for h in new}.isdisjoint(old)
    assert all(isinstance(h, ForkedKernelHandle) for h in new)
    assert [int(result.stdout(i)) for i in range(2)] == [template.pid] * 2
    assert not alive_workers(old)


_NOTEBOOK = textwrap.dedent("""
    import json, sys, time
    from mwnotebook import Cluster
    a = Cluster(workers=2, cpu=True).start()
    b = Cluster(workers=2, cpu=True, env={"TF_MWNOTEBOOK_TEST_TEMPLATE": "b"}).start()  # another template
    print(json.dumps({
        "templates": [c.launcher.template.pid for c in (a, b)],
        "workers": [[i.pid for i in c.status()] for c in (a, b)]}), flush=True)
    time.sleep(600)
""")


@pytest.mark.slow
def test_workers_and_templates_die_with_the_notebook_even_when_a_template_was_killed():
    """A 'notebook' process with two clusters (two templates). Killing one template leaves its
    workers running; killing the notebook then ends every template and every worker."""
    notebook = subprocess.Popen([sys.executable, "-c", _NOTEBOOK], stdout=subprocess.PIPE, text=True,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        line = notebook.stdout.readline()
        assert line, "the notebook process did not start its clusters"
        info = json.loads(line)
        templates, workers = info["templates"], info["workers"]
        assert len(set(templates)) == 2
        os.kill(templates[0], signal.SIGKILL)
        time.sleep(1.5)  # three parent-watch periods
        assert alive_workers(set(workers[0])) == set(workers[0])  # the running cell would survive
        os.kill(notebook.pid, signal.SIGKILL)
        notebook.wait(10)
        everything = set(workers[0]) | set(workers[1])
        assert not wait_gone(everything, 10, WORKER_MODULES)[0]
        assert not wait_gone(templates[1], 10, (TEMPLATE_MODULE,))[0], \
            "the template that was not killed outlived the notebook"
    finally:
        if notebook.poll() is None:
            notebook.kill()
            notebook.wait()


def test_no_template_option_starts_fresh_interpreters(no_orphans):
    with Cluster(workers=1, template=False) as cluster:
        result = cluster.run("import sys\nprint('tensorflow' in sys.modules)")
        assert result.stdout(0).strip() == "False"  # nothing preloaded: a fresh interpreter
        assert isinstance(_handles(cluster)[0], LocalKernelHandle)
        assert not isinstance(_handles(cluster)[0], ForkedKernelHandle)


def test_a_dead_template_falls_back_to_fresh_interpreters_with_a_notice(forked_cluster, caplog):
    """Runs last in this module: it kills the shared template."""
    template = _template_of(forked_cluster)
    isolated = forked_cluster.network_isolated
    os.kill(template.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while template.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    with caplog.at_level(logging.WARNING, logger="mwnotebook.launchers.local.launcher"):
        forked_cluster.restart()
    assert any("no worker template" in r.getMessage() for r in caplog.records)
    handles = _handles(forked_cluster)
    assert all(not isinstance(h, ForkedKernelHandle) for h in handles)
    result = forked_cluster.run("import os, json\nprint(json.loads(os.environ['TF_CONFIG'])['task']['index'])")
    assert [result.stdout(i).strip() for i in range(2)] == ["0", "1"]
    assert forked_cluster.network_isolated == isolated
    # The next cluster gets a fresh template from the pool.
    assert template not in [t for t in pool.templates() if t.alive()]
