"""The one "die with my owner" helper (mwnotebook/processes/shipped/owner_watch.py), with real
processes: the watches fire when the owner ends, and the helper travels with the shipped sources
that import it (processes/shipped/__init__.py ``bundle``) to where mwnotebook is not installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from mwnotebook.processes import shipped
from mwnotebook.processes.shipped import owner_watch

HANG_BOUND = 20  # seconds; generous on a loaded 2-core machine, only there so a bug can't hang the run


def _run(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter that can import only the helper (by its file, as shipped)."""
    return subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                          timeout=HANG_BOUND, cwd=Path(owner_watch.__file__).parent, check=False)


@pytest.mark.parametrize("use_pidfd", [True, False])
def test_watch_process_fires_when_the_owner_ends(use_pidfd: bool) -> None:
    out = _run(textwrap.dedent(f"""
        import os, subprocess, sys, time
        sys.path.insert(0, ".")
        import owner_watch
        owner = subprocess.Popen(["sleep", "60"])
        owner_watch.watch_process(owner.pid, lambda: os._exit(7), open_one={use_pidfd})
        time.sleep(0.3)
        print("still here", flush=True)
        owner.kill()  # not reaped: a zombie is gone too
        time.sleep({HANG_BOUND})
        print("not noticed")
    """))
    assert out.returncode == 7 and out.stdout == "still here\n", (out.stdout, out.stderr)


def test_watch_process_of_a_process_already_gone_fires_at_once() -> None:
    out = _run("import os, sys; sys.path.insert(0, '.'); import owner_watch\n"
               "owner_watch.watch_process(2 ** 22 + 1, lambda: os._exit(5))\nprint('returned')")
    assert out.returncode == 5 and out.stdout == "", (out.stdout, out.stderr)


def test_watch_parent_fires_when_the_parent_ends() -> None:
    """Parent A starts B (which watches A, with no death signal) and exits; B must end by itself."""
    child = ("import os, sys, time; sys.path.insert(0, '.'); import owner_watch\n"
             "owner_watch.watch_parent(int(sys.argv[1]), lambda: os._exit(0))\n"
             "print('watching', flush=True)\ntime.sleep(600)\n")
    out = _run(textwrap.dedent(f"""
        import os, subprocess, sys
        b = subprocess.Popen([sys.executable, "-I", "-c", {child!r}, str(os.getpid())],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert b.stdout.readline() == "watching\\n"  # the parent is alive while B starts watching
        print(b.pid, flush=True)
    """))
    pid = int(out.stdout)
    deadline = time.monotonic() + HANG_BOUND
    while owner_watch.process_gone(pid) is False and time.monotonic() < deadline:
        time.sleep(0.1)
    gone = owner_watch.process_gone(pid)
    if not gone:
        os.kill(pid, 9)
    assert gone, "the child outlived its parent"


def test_die_with_parent_is_set_on_linux() -> None:
    assert owner_watch.die_with_parent(0) is sys.platform.startswith("linux")  # 0: clear it again


def test_a_bundle_runs_without_mwnotebook_and_brings_the_helper() -> None:
    """What a remote host gets: the agent's and the template's sources with the helper, runnable
    where the package cannot be imported."""
    for filename, uses in (("remote_agent.py", "ns['remote_kernel'].owner_watch"), ("remote_template.py", "ns['owner_watch']")):
        source = shipped.bundle(filename)
        source.encode("ascii")  # the remote interpreter may read stdin as ASCII
        out = subprocess.run(
            [sys.executable, "-I", "-c",
             "import sys\nclass Blocker:\n    def find_spec(self, name, path=None, target=None):\n"
             "        if name.split('.')[0] == 'mwnotebook': raise ImportError('blocked')\n"
             "sys.meta_path.insert(0, Blocker())\n"
             "ns = {'__name__': 'shipped_test'}\nexec(sys.stdin.read(), ns)\n"
             f"print({uses} is sys.modules['owner_watch'], {uses}.watch_process.__name__)"],
            input=source, capture_output=True, text=True, timeout=HANG_BOUND, cwd="/", check=False)
        assert out.returncode == 0 and out.stdout.split() == ["True", "watch_process"], (filename, out.stderr)


def test_shipped_files_get_the_package_copy_when_imported() -> None:
    from mwnotebook.processes.shipped import remote_agent, remote_template

    assert remote_agent.remote_kernel.owner_watch is owner_watch and remote_template.owner_watch is owner_watch


BUSY = """
import os, sys, time
sys.path.insert(0, {shipped!r})
import owner_watch
undo = owner_watch.exit_on_hangup(0, lambda: os._exit(5))
print("armed", flush=True)
started = time.monotonic()
while time.monotonic() - started < {busy_s}:  # busy in Python, reading nothing (like an import)
    pass
undo()
print("not noticed", flush=True)
"""


def _busy_reader(busy_s: float) -> subprocess.Popen[str]:
    code = BUSY.format(shipped=str(Path(owner_watch.__file__).parent), busy_s=busy_s)
    proc = subprocess.Popen([sys.executable, "-I", "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "armed\n"
    return proc


def test_exit_on_hangup_fires_when_the_channel_closes_while_busy() -> None:
    proc = _busy_reader(HANG_BOUND)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("ping 30\n")  # data is not a hang-up
    proc.stdin.flush()
    time.sleep(0.3)
    assert proc.poll() is None, "data on the channel ended the process"
    proc.stdin.close()
    assert proc.wait(HANG_BOUND) == 5
    proc.stdout.close()


def test_exit_on_hangup_is_undone() -> None:
    proc = _busy_reader(0.5)
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.readline() == "not noticed\n"
    proc.stdin.close()
    assert proc.wait(HANG_BOUND) == 0
    proc.stdout.close()


def test_a_remote_template_ends_when_its_channel_closes_while_it_loads(tmp_path: Path) -> None:
    """The template's imports take seconds (TensorFlow) with nothing reading its channel: a launcher
    that closes the channel then (a failed start) must not leave it loading on the host."""
    (tmp_path / "mw_slow_module.py").write_text(
        "import time\nstarted = time.monotonic()\nwhile time.monotonic() - started < 60:\n    pass\n")
    code = (f"import sys\nsys.path[:0] = [{str(Path(owner_watch.__file__).parent)!r}, {str(tmp_path)!r}]\n"
            "import remote_template\n"
            "remote_template.run({'preload': ['mw_slow_module'], 'env': {}}, lambda *a, **k: None, 0)\n"
            "print('loaded', flush=True)\n")
    sockets = Path(tempfile.mkdtemp(prefix="mwow-", dir="/tmp"))  # a unix socket path must stay short
    env = {**os.environ, "TMPDIR": str(sockets)}
    proc = subprocess.Popen([sys.executable, "-I", "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        deadline = time.monotonic() + HANG_BOUND
        while not list(sockets.glob("mwnotebook-*")) and time.monotonic() < deadline:
            time.sleep(0.05)  # the template made its socket's directory: it is loading now
        assert list(sockets.glob("mwnotebook-*")), "the template did not start"
        proc.stdin.close()
        assert proc.wait(HANG_BOUND) == 0 and proc.stdout.read() == ""
        assert not list(sockets.glob("mwnotebook-*")), "the template left its socket's directory"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        shutil.rmtree(sockets, ignore_errors=True)
