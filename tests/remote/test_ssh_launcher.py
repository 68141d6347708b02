"""SSHLauncher against real sshd test hosts (network namespaces): kernels, forwarding, signals,
cleanup and start errors. No TensorFlow here; the cluster-level tests are in test_remote_cluster.py.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.asynchronous import AsyncKernelClient

from mwnotebook.config.tf_config import tf_config_json
from mwnotebook.errors import ClusterStartError
from mwnotebook.launchers.base import KernelHandle, Launcher
from mwnotebook.launchers.remote.kernel_handle import RemoteKernelHandle
from mwnotebook.launchers.ssh.launcher import SSHLauncher
from testbed import netns_hosts
from testbed.processes import running

pytestmark = [pytest.mark.remote, pytest.mark.integration, pytest.mark.timeout(180)]

PY = sys.executable


def make_launcher(hosts: Any, **kw: Any) -> SSHLauncher:
    kw.setdefault("python", PY)
    kw.setdefault("require", ("ipykernel",))
    return SSHLauncher(hosts, **kw)


async def connect(handle: KernelHandle) -> AsyncKernelClient:
    kc = AsyncKernelClient()
    kc.load_connection_info(handle.connection_info)
    kc.start_channels()
    await kc.wait_for_ready(timeout=60)
    return kc


async def run(kc: AsyncKernelClient, code: str, timeout: float = 60) -> tuple[dict[str, Any], str]:
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    reply = await kc.execute_interactive(code, output_hook=hook, timeout=timeout)
    return reply["content"], "".join(out)


def listening_addresses(host: netns_hosts.TestHost, pid: int) -> set[str]:
    """Local addresses that process ``pid`` listens on inside the host's namespace."""
    ss = host.exec("ss", "-ltnpH").stdout
    return {line.split()[3].rsplit(":", 1)[0] for line in ss.splitlines() if f"pid={pid}," in line}


def command_lines() -> str:
    texts = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                texts.append((entry / "cmdline").read_bytes().decode(errors="replace"))
            except OSError:
                pass
    return "\n".join(texts)


def test_two_hosts_run_code_over_forwarded_channels(ssh_home: netns_hosts.TestNet) -> None:
    net = ssh_home
    hosts = net.hosts

    async def scenario() -> None:
        launcher = make_launcher([h.alias for h in hosts])
        assert isinstance(launcher, Launcher)
        handles: list[RemoteKernelHandle] = []
        try:
            addresses = await launcher.tf_addresses(2)
            assert [a.rsplit(":", 1)[0] for a in addresses] == [h.address for h in hosts]
            handles = list(await asyncio.gather(*(
                launcher.start(i, {"TF_CONFIG": tf_config_json(addresses, i),
                                   "MWNOTEBOOK_WORKER_INDEX": str(i)}) for i in range(2))))
            for i, (handle, host) in enumerate(zip(handles, hosts)):
                assert isinstance(handle, KernelHandle)
                assert handle.host == host.alias and handle.index == i
                # The kernel runs on its host (in its namespace), listening on loopback only.
                assert handle.pid in netns_hosts.ns_pids(host.netns)
                assert listening_addresses(host, handle.pid) == {"127.0.0.1"}
                info = handle.connection_info
                assert info["ip"] == "127.0.0.1" and info["transport"] == "tcp"
                # Connection file: private directory and file on the host.
                assert os.stat(handle.remote_dir).st_mode & 0o777 == 0o700
                assert os.stat(Path(handle.remote_dir, "kernel.json")).st_mode & 0o777 == 0o600

                kc = await connect(handle)
                try:
                    reply, out = await run(kc, (
                        "import os, json\n"
                        "cfg = json.loads(os.environ['TF_CONFIG'])\n"
                        "print(os.environ['MWNOTEBOOK_WORKER_INDEX'], cfg['task']['index'],"
                        " os.getpid())"))
                finally:
                    kc.stop_channels()
                assert reply["status"] == "ok"
                assert out.split() == [str(i), str(i), str(handle.pid)]

            # The TF ports are held on each host until close(): a plain bind there fails.
            for address, host in zip(addresses, hosts):
                port = address.rsplit(":", 1)[1]
                probe = host.exec(PY, "-c", (
                    "import socket,sys\ns=socket.socket()\n"
                    f"try:\n s.bind(('0.0.0.0',{port}))\nexcept OSError as e:\n sys.exit(e.errno)"))
                assert probe.returncode == errno.EADDRINUSE, probe.stderr

            # The signing key is on no command line anywhere on the machine.
            cmdlines = command_lines()
            for handle in handles:
                assert handle.connection_info["key"] not in cmdlines
        finally:
            await launcher.close()
        for handle in handles:
            assert not await handle.is_alive()
            assert not Path(handle.remote_dir).exists()

    asyncio.run(scenario())


def test_interrupt_and_kill_are_seen(ssh_home: netns_hosts.TestNet) -> None:
    host = ssh_home.hosts[0]

    async def scenario() -> None:
        launcher = make_launcher(host.alias)
        try:
            handle = await launcher.start(0, {})
            assert netns_hosts.parent_pid(handle.pid) == launcher.templates[0].pid  # forked
            kc = await connect(handle)
            try:
                msg_id = kc.execute("import time\nfor _ in range(600): time.sleep(0.1)")
                await asyncio.sleep(1.0)
                started = time.monotonic()
                await handle.interrupt()
                while True:
                    reply = await kc.get_shell_msg(timeout=20)
                    if reply["parent_header"].get("msg_id") == msg_id:
                        break
                assert reply["content"]["status"] == "error"
                assert reply["content"]["ename"] == "KeyboardInterrupt"
                assert time.monotonic() - started < 10
                assert await handle.is_alive() and handle.exit_description() == ""

                os.kill(handle.pid, signal.SIGKILL)  # the kernel dies on its host
                await asyncio.wait_for(handle.wait(), 10)
                assert not await handle.is_alive()
                assert handle.exit_description() == "killed by SIGKILL"
            finally:
                kc.stop_channels()
        finally:
            await launcher.close()

    asyncio.run(scenario())


def test_lost_connection_kills_the_remote_kernel(ssh_home: netns_hosts.TestNet) -> None:
    host = ssh_home.hosts[1]

    async def scenario() -> None:
        launcher = make_launcher(host.alias)
        try:
            handle = await launcher.start(0, {})
            kernel_pid = handle.pid
            assert kernel_pid is not None
            template_pid = launcher.templates[0].pid
            assert template_pid is not None and netns_hosts.parent_pid(kernel_pid) == template_pid
            # Kill the sshd processes serving our connection: the TCP connection drops.
            sessions = [pid for pid in host.leftover_pids()
                        if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sshd:")]
            assert sessions
            for pid in sessions:
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while running(kernel_pid) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert not running(kernel_pid), "remote kernel outlived its connection"
            while running(template_pid) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert not running(template_pid), "the template outlived its connection"
            await asyncio.wait_for(handle.wait(), 10)
            assert "lost the SSH connection" in handle.exit_description()
        finally:
            await launcher.close()

    asyncio.run(scenario())


def test_several_workers_per_host_and_tf_address_override(ssh_home: netns_hosts.TestNet) -> None:
    h0, h1 = ssh_home.hosts

    async def scenario() -> None:
        launcher = make_launcher(f"{h0.alias}*2,root@{h1.address}",
                                 tf_address=f"{h1.address}=10.99.0.1")
        try:
            addresses = await launcher.tf_addresses(3)
            assert addresses[0].startswith(f"{h0.address}:")
            assert addresses[1].startswith(f"{h0.address}:") and addresses[0] != addresses[1]
            assert addresses[2].startswith("10.99.0.1:")
            handles = await asyncio.gather(*(launcher.start(i, {}) for i in range(3)))
            assert [h.host for h in handles] == [h0.alias, h0.alias, f"root@{h1.address}"]
            assert {h.pid for h in handles[:2]} <= netns_hosts.ns_pids(h0.netns)
            assert handles[2].pid in netns_hosts.ns_pids(h1.netns)
            # The test sshd allows 2 sessions per connection (MaxSessions 2): the port holder,
            # the worker template and two kernels on h0 need a second connection there, and so do
            # the holder, template and kernel on h1.
            assert sorted(link.connections for link in launcher.links.values()) == [2, 2]
            assert len(launcher.templates) == 2
        finally:
            await launcher.close()

    asyncio.run(scenario())


def _venv(path: Path, system_site: bool, block: str | None = None) -> str:
    args = [PY, "-m", "venv", "--without-pip", str(path)]
    if system_site:
        args.insert(4, "--system-site-packages")
    subprocess.run(args, check=True, timeout=60)
    if block:
        site = next(path.glob("lib/python*/site-packages"))
        (site / "zz_block.pth").write_text(
            "import sys, importlib.abc; exec(\"class _Block(importlib.abc.MetaPathFinder):\\n"
            " def find_spec(self, name, path=None, target=None):\\n"
            f"  if name.split('.')[0] == '{block}': raise ModuleNotFoundError(name)\\n"
            "sys.meta_path.insert(0, _Block())\")\n")
    return str(path / "bin" / "python")


@pytest.fixture(scope="module")
def broken_pythons(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("pythons")
    return {
        "bare": _venv(root / "bare", system_site=False),
        "no_tf": _venv(root / "no_tf", system_site=True, block="tensorflow"),
    }


@pytest.mark.parametrize("case", [
    "unreachable", "silent", "refused", "auth", "hostkey", "no_python", "no_python_start",
    "no_ipykernel", "no_tensorflow", "kernel_crash",
])
def test_start_errors_name_the_host_quickly(case: str, ssh_home: netns_hosts.TestNet,
                                            broken_pythons: dict[str, str],
                                            tmp_path: Path) -> None:
    h0, h1 = ssh_home.hosts
    silent = socket.socket()  # accepts TCP (backlog) but never says a word of SSH
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    host, kw, expect = {
        "unreachable": (f"root@{ssh_home.address(99)}", {}, "cannot connect|no SSH answer"),
        "silent": (f"root@127.0.0.1:{silent.getsockname()[1]}", {}, "no SSH answer within 10 s"),
        "refused": (f"root@{h0.address}:2222", {}, f"connection to root@{h0.address}:2222 was refused"),
        "auth": (f"nosuchuser@{h0.alias}", {}, "authentication as 'nosuchuser' was refused.*IdentityFile: "
                 + str(ssh_home.home / ".ssh" / "id_ed25519")),
        "hostkey": (f"{h1.alias}-badkey", {}, f"host key of {h1.address} has CHANGED.*known_hosts_mismatch:1"),
        "no_python": (h0.alias, {"python": "/nonexistent/python3"}, "was not found on the host"),
        "no_python_start": (h1.alias, {"python": "/nonexistent/python3"},
                            "was not found on the host"),
        "no_ipykernel": (h1.alias, {"python": broken_pythons["bare"]}, "lacks ipykernel"),
        "no_tensorflow": (h0.alias, {"python": broken_pythons["no_tf"],
                                     "require": ("ipykernel", "tensorflow")}, "lacks tensorflow"),
        # A fresh interpreter (a forked kernel does not run ipykernel_launcher.py from PYTHONPATH).
        "kernel_crash": (h1.alias, {"template": False}, "the kernel exit code 3.*broken on purpose"),
    }[case]
    env = {}
    if case == "kernel_crash":
        # Both kernels the agent may start: ipykernel_launcher, and mwnotebook's worker kernel
        # (started where the host can import it: remote_agent.py has_worker_kernel).
        crash = "import sys\nprint('broken on purpose', file=sys.stderr)\nsys.exit(3)\n"
        (tmp_path / "ipykernel_launcher.py").write_text(crash)
        (tmp_path / "mwnotebook" / "processes").mkdir(parents=True)
        (tmp_path / "mwnotebook" / "__init__.py").write_text("")
        (tmp_path / "mwnotebook" / "processes" / "__init__.py").write_text("")
        (tmp_path / "mwnotebook" / "processes" / "worker_kernel.py").write_text(crash)
        env = {"PYTHONPATH": str(tmp_path)}

    async def scenario() -> ClusterStartError:
        launcher = make_launcher(host, **kw)
        started = time.monotonic()
        try:
            with pytest.raises(ClusterStartError) as info:
                if case not in ("kernel_crash", "no_python_start"):  # start() alone: a restart
                    await launcher.tf_addresses(1)
                await launcher.start(0, env)
            elapsed = time.monotonic() - started
            assert elapsed < 12, f"took {elapsed:.1f} s to report {case}"
            return info.value
        finally:
            await launcher.close()

    try:
        error = asyncio.run(scenario())
    finally:
        silent.close()
    assert re.search(expect, str(error), re.S), str(error)
    assert str(error).startswith(host + ":")
    assert error.host == host
    if case in ("kernel_crash", "no_python_start"):
        assert error.worker == 0
