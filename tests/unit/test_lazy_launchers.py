"""``mwnotebook.launchers`` imports no backend by itself (mwnotebook/launchers/__init__.py), and the
start-up environment is the worker rule's own (mwnotebook/config/worker_env.py ``startup_env``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from mwnotebook import ClusterSpec
from mwnotebook.config.worker_env import startup_env, worker_envs

ROOT = Path(__file__).resolve().parents[2]


def test_the_launchers_package_imports_without_jupyter_client_or_asyncssh() -> None:
    code = textwrap.dedent("""
        import sys
        BLOCKED = ("jupyter_client", "zmq", "asyncssh")
        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{name} is blocked by the test")
                return None
        sys.meta_path.insert(0, Blocker())
        import mwnotebook.launchers
        from mwnotebook.launchers import KernelHandle, Launcher
        import mwnotebook.launchers.capabilities
        print("LOADED", sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED))
        print("BACKENDS", sorted(m for m in sys.modules if m.count(".") > 2 and m.startswith("mwnotebook.launchers.")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, check=False)
    assert out.returncode == 0, out.stderr
    assert "LOADED []" in out.stdout and "BACKENDS []" in out.stdout, out.stdout


def test_the_local_launcher_is_still_there_when_asked_for() -> None:
    import mwnotebook.launchers as launchers
    from mwnotebook.launchers.local.launcher import LocalLauncher

    assert launchers.LocalLauncher is LocalLauncher
    assert "LocalLauncher" in launchers.__all__


def test_startup_env_is_a_workers_env_without_its_turn() -> None:
    spec = ClusterSpec(workers=3, cpu=True, env={"TF_XLA_FLAGS": "--x"}, xla=True)
    shared = startup_env(spec)
    real = worker_envs(spec, ["h:1", "h:2", "h:3"])
    per_worker = {"TF_CONFIG", "MWNOTEBOOK_WORKER_INDEX"}
    for env in real:
        assert {k: v for k, v in env.items() if k not in per_worker} == \
               {k: v for k, v in shared.items() if k not in per_worker}
    assert shared["TF_XLA_FLAGS"] == "--x --tf_xla_cpu_global_jit"


def test_the_started_processes_import_without_jupyter_client() -> None:
    """A worker kernel's entry, a worker template and the netns holder load none of the notebook's
    side (the worker kernel's ipykernel brings its own zmq only when it serves)."""
    code = textwrap.dedent("""
        import sys
        BLOCKED = ("jupyter_client", "zmq", "asyncssh")
        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{name} is blocked by the test")
                return None
        sys.meta_path.insert(0, Blocker())
        import mwnotebook.processes.netns_holder, mwnotebook.processes.worker_template
        import mwnotebook.processes.worker_kernel, mwnotebook.processes.runtime.containment
        print("NOTEBOOK_SIDE", sorted(m for m in sys.modules
                                      if m.startswith(("mwnotebook.engine", "mwnotebook.launchers", "mwnotebook.frontend"))))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, check=False)
    assert out.returncode == 0, out.stderr
    assert "NOTEBOOK_SIDE []" in out.stdout, out.stdout
