"""A real JupyterHub for tests/hub: the hub (this Python's jupyterhub) with configurable-http-proxy
(npm), the dummy authenticator and the local-process spawner, students who are real system users
(``useradd``), and a notebook kernel of a student reached as a browser reaches it: through the hub's
proxy, the Jupyter server's REST API and the kernel's websocket.

The students' single-user environment is the venv tools/test.sh makes ($MWNOTEBOOK_HUB_VENV,
default /opt/mwnotebook-hub/venv): Debian's python3 with the wheel built by ``python -m build``
installed with ``[tensorflow-cpu,lab]`` and the hub's jupyterhub, without Node.js on PATH.

Everything started here ends at :meth:`Hub.close`: every server stopped by the hub, the hub (which
stops its proxy), then any process left of a student (by uid), then the students themselves
(``userdel -r``).
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

from .processes import end_processes

#: The students' single-user environment (made by tools/test.sh).
HUB_VENV = Path(os.environ.get("MWNOTEBOOK_HUB_VENV", "/opt/mwnotebook-hub/venv"))
#: The class cap the hub sets for every student (c.Spawner.environment): the seed cell's two workers
#: fit; a third is refused.
CLASS_CAP = 2
#: How often the single-user servers report activity to the hub and the hub polls the proxy's
#: routes (s). JupyterHub's defaults are 300 s each; short here so a test sees what the hub sees.
ACTIVITY_INTERVAL = 5
#: The single-user server's own culling (Jupyter Server's kernel culler, which never culls a busy
#: kernel) for the last student of :func:`start_hub`: idle kernels after 5 s, looked for every 2 s
#: (docs/guide/teaching.md recommends an hour), also with a client connected (the test's websocket).
INSIDE_CULLING = ["--MappingKernelManager.cull_idle_timeout=5", "--MappingKernelManager.cull_interval=2",
                  "--MappingKernelManager.cull_busy=False", "--MappingKernelManager.cull_connected=True"]


#: Where :func:`quiet_training` writes the time its training ended, in the student's home (the test,
#: root, reads it: with the notebook's tab closed nothing of the cell reaches the test otherwise).
TRAINED_FILE = "mwnotebook-trained-at"


def quiet_training(seconds: float, options: str = "--workers 2") -> str:
    """A cell that trains on its workers (an all-reduce every 10 ms) for ``seconds`` printing nothing
    after "training", then each worker writes the time it ended to ``~/TRAINED_FILE`` (:meth:`Hub.trained_at`).
    A worker lost mid-cell fails the all-reduce: the file is written only by a training run that ended.

    The workers agree when to stop: each step all-reduces "my time is not up yet" and all stop at the
    first step where one worker's is. (Each looking at its own clock alone, one worker could stop a
    step before the other, whose last all-reduce then waited for ever: worker 0 done, worker 1
    running, both alive, until the cell's --timeout.)"""
    return f"""%%mwtrain {options}
import os, time
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()

@tf.function
def step(going):
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: going), axis=None)

all_going = float(step(tf.constant(1.0)))
print("training", flush=True)
end = time.monotonic() + {seconds}
while float(step(tf.constant(1.0 if time.monotonic() < end else 0.0))) == all_going:
    time.sleep(0.01)
with open(os.path.expanduser("~/{TRAINED_FILE}"), "w") as done:  # each worker, as the student
    done.write(repr(time.time()))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _utc(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(timezone.utc)


@dataclass
class Student:
    """A system user with a hub account and an API token of their own."""

    name: str
    uid: int
    token: str = ""


def processes_of(uid: int) -> list[psutil.Process]:
    """Every live (not zombie) process whose real uid is ``uid``."""
    found = []
    for proc in psutil.process_iter(["uids", "status"]):
        try:
            if proc.info["uids"] and proc.info["uids"].real == uid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def uid_of(pid: int) -> int:
    """The real uid of ``pid``, read from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise RuntimeError(f"no Uid line for {pid}")


class HubError(RuntimeError):
    """The hub or a student's server answered with an error status."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:2000]}")
        self.status = status


@dataclass
class CellResult:
    """What a cell sent back: its text (streams and each display's latest text/plain, in order),
    the execute reply's status, and the error's name and value when it failed."""

    text: str
    status: str
    ename: str = ""
    evalue: str = ""
    messages: int = 0
    msg_id: str = ""

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


class _Output:
    """One request's messages as they come: streams and each display's latest text/plain, in order."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.displays: dict[str, int] = {}
        self.reply: dict[str, Any] | None = None
        self.idle = False
        self.count = 0

    def text(self) -> str:
        return "".join(self.parts)

    def add(self, msg: dict[str, Any]) -> None:
        self.count += 1
        kind, content = msg["header"]["msg_type"], msg["content"]
        if msg["channel"] == "shell" and kind == "execute_reply":
            self.reply = content
        elif kind == "status" and content.get("execution_state") == "idle":
            self.idle = True
        elif kind == "stream":
            self.parts.append(content["text"])
        elif kind in ("display_data", "execute_result", "update_display_data"):
            text = content.get("data", {}).get("text/plain", "")
            text = text if text.endswith("\n") or not text else text + "\n"
            display = content.get("transient", {}).get("display_id")
            if display and display in self.displays:
                self.parts[self.displays[display]] = text
            elif kind != "update_display_data":
                if display:
                    self.displays[display] = len(self.parts)
                self.parts.append(text)
        elif kind == "error":
            self.parts.append("\n".join(content.get("traceback", [])) + "\n")


class HubKernel:
    """A notebook kernel in a student's server, started through the hub's proxy (REST) and driven
    over its websocket, as JupyterLab does."""

    def __init__(self, hub: Hub, student: Student) -> None:
        import websocket  # websocket-client: a dependency of jupyter_server

        self.hub, self.student = hub, student
        self.id = str(hub.api("POST", f"/user/{student.name}/api/kernels", token=student.token,
                              body={"name": "python3"})["id"])
        ws_url = hub.url.replace("http://", "ws://") + f"/user/{student.name}/api/kernels/{self.id}/channels"
        self.session = uuid.uuid4().hex
        self.ws = websocket.create_connection(ws_url, header=[f"Authorization: token {student.token}"], timeout=10)
        self._outputs: dict[str, _Output] = {}

    def execute(self, code: str, timeout: float = 300.0, until: str | None = None) -> CellResult:
        """Run ``code``; wait (a hang bound, not a timing) for its reply and its idle status, or with
        ``until`` only until its output holds that text (the cell goes on: status "running", and
        :meth:`collect` with the result's ``msg_id`` reads on)."""
        return self.collect(self.send(code), timeout, until)

    def collect(self, msg_id: str, timeout: float = 300.0, until: str | None = None) -> CellResult:
        """Read the output of the request ``msg_id`` (see :meth:`execute`)."""
        import websocket

        out = self._outputs.setdefault(msg_id, _Output())
        deadline = time.monotonic() + timeout
        while not (out.idle and out.reply is not None):
            if until is not None and until in out.text():
                return CellResult(out.text(), "running", messages=out.count, msg_id=msg_id)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no reply in {timeout} s; so far:\n{out.text()[-3000:]}")
            try:
                raw = self.ws.recv()
            except websocket.WebSocketTimeoutException:
                continue
            msg = json.loads(raw)
            parent = msg.get("parent_header", {}).get("msg_id")
            if parent in self._outputs:
                self._outputs[parent].add(msg)
        reply = out.reply
        return CellResult(out.text(), reply["status"], reply.get("ename", ""), reply.get("evalue", ""), out.count,
                          msg_id)

    def send(self, code: str) -> str:
        """Send ``code`` to run; returns the request's id."""
        msg_id = uuid.uuid4().hex
        self._outputs[msg_id] = _Output()
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "username": self.student.name, "session": self.session,
                       "msg_type": "execute_request", "version": "5.3",
                       "date": datetime.now(timezone.utc).isoformat()},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True},
        }))
        return msg_id

    def close(self) -> None:
        """Close the websocket and shut the kernel down (its workers end with it)."""
        try:
            self.ws.close()
        except OSError:
            pass
        try:
            self.hub.api("DELETE", f"/user/{self.student.name}/api/kernels/{self.id}", token=self.student.token)
        except (HubError, OSError):
            pass


@dataclass
class Hub:
    """A running JupyterHub: its public URL (the proxy), the test service's admin token, its students."""

    url: str
    hub_api: str
    token: str
    root: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    students: list[Student] = field(default_factory=list)
    #: The token of the hub's "idle-culler" service (its role: what jupyterhub-idle-culler needs).
    culler_token: str = ""

    # -- HTTP ---------------------------------------------------------------------------------------
    def request(self, method: str, path: str, token: str | None = None, body: Any = None,
                timeout: float = 30.0) -> tuple[int, Any]:
        """``method`` ``path`` on the proxy's address with ``token`` (default: the admin service's);
        returns the status and the decoded JSON body (None when empty); raises nothing on 4xx/5xx."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Authorization": f"token {token or self.token}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw, status = response.read(), response.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode(errors="replace")
        return status, decoded

    def api(self, method: str, path: str, token: str | None = None, body: Any = None) -> Any:
        status, decoded = self.request(method, path, token, body)
        if status >= 400:
            raise HubError(status, str(decoded))
        return decoded

    # -- users and servers ----------------------------------------------------------------------------
    def user(self, name: str) -> dict[str, Any]:
        return dict(self.api("GET", f"/hub/api/users/{name}"))

    def last_activity(self, name: str) -> tuple[datetime | None, datetime | None]:
        """What the hub reports as the user's and their default server's last activity."""
        model = self.user(name)
        server = (model.get("servers") or {}).get("", {})
        return _utc(model.get("last_activity")), _utc(server.get("last_activity"))

    def ready(self, name: str) -> bool:
        server = (self.user(name).get("servers") or {}).get("")
        return bool(server and server.get("ready"))

    def start_server(self, student: Student, timeout: float = 180.0) -> None:
        """Start the student's server unless it runs; wait until the hub says it is ready (a hang bound)."""
        if self.ready(student.name):
            return
        status, body = self.request("POST", f"/hub/api/users/{student.name}/server")
        if status not in (201, 202, 400):  # 400: already starting or running
            raise HubError(status, str(body))
        deadline = time.monotonic() + timeout
        while not self.ready(student.name):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"{student.name}'s server did not start:\n{self.log_tail()}")
            time.sleep(0.3)

    def stop_server(self, name: str) -> None:
        """Ask the hub to stop the server (the admin API); returns once the hub has taken it."""
        status, body = self.request("DELETE", f"/hub/api/users/{name}/server")
        if status not in (202, 204, 400):
            raise HubError(status, str(body))

    def wait_stopped(self, name: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while (self.user(name).get("servers") or {}).get(""):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}'s server still listed {timeout} s after its stop")
            time.sleep(0.2)

    def trained_at(self, student: Student) -> datetime | None:
        """When the student's :func:`quiet_training` cell ended its training (None: not yet, or never)."""
        path = Path(pwd.getpwnam(student.name).pw_dir) / TRAINED_FILE
        try:
            return datetime.fromtimestamp(float(path.read_text()), timezone.utc)
        except (OSError, ValueError):
            return None

    def cluster_documents(self, student: Student) -> list[dict[str, Any]]:
        """The state documents of the student's clusters (mwnotebook/registry/document.py), read as root
        from their Jupyter runtime directory."""
        directory = Path(pwd.getpwnam(student.name).pw_dir) / ".local/share/jupyter/runtime/mwnotebook"
        found = []
        for path in sorted(directory.glob("cluster-*.json")):
            try:
                found.append(dict(json.loads(path.read_text())))
            except (OSError, ValueError):
                continue
        return found

    def cluster_summary(self, student: Student) -> str:
        """What the student's clusters are doing, for a failure's message: state, cell, last error,
        each worker's state and whether its process runs."""
        lines = []
        for d in self.cluster_documents(student):
            workers = [(w.get("index"), w.get("pid"), w.get("state"), w.get("alive"),
                        psutil.pid_exists(w["pid"]) if isinstance(w.get("pid"), int) else None, w.get("last_error"))
                       for w in d.get("workers") or []]
            lines.append(f"{d.get('id')}: {d.get('state')} cell={d.get('cell')} last_cell={d.get('last_cell')} "
                         f"restarts={d.get('restarts')} last_error={d.get('last_error')!r} workers={workers}")
        return "\n".join(lines) or "no cluster"

    def cell_ended(self, student: Student, since: datetime) -> datetime | None:
        """When the student's cluster went idle after a cell that ended after ``since``: ``last_cell.ended``
        of its state file (mwnotebook/registry/document.py), read as root from the student's Jupyter
        runtime directory while their server runs; None while the cell runs or with no cluster."""
        ended = []
        for document in self.cluster_documents(student):
            if document.get("state") == "idle" and (document.get("last_cell") or {}).get("ended"):
                ended.append(float(document["last_cell"]["ended"]))
        last = datetime.fromtimestamp(max(ended), timezone.utc) if ended else None
        return last if last is not None and last > since else None

    def forget_training(self, student: Student) -> None:
        """Remove what an earlier :func:`quiet_training` cell wrote."""
        (Path(pwd.getpwnam(student.name).pw_dir) / TRAINED_FILE).unlink(missing_ok=True)

    def kernel(self, student: Student) -> HubKernel:
        return HubKernel(self, student)

    def clusters(self, owner: Student, token: str | None = None) -> tuple[int, Any]:
        """``GET /user/OWNER/mwnotebook/api/clusters`` with ``token`` (default: the owner's own)."""
        return self.request("GET", f"/user/{owner.name}/mwnotebook/api/clusters", token=token or owner.token)

    def log_tail(self, chars: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    # -- the class ------------------------------------------------------------------------------------
    def give_tokens(self) -> None:
        """Each student a hub account (the admin API) and an API token of their own."""
        for student in self.students:
            status, body = self.request("POST", f"/hub/api/users/{student.name}")
            if status not in (201, 409):  # 409: the hub already has the account
                raise HubError(status, str(body))
            model = self.api("POST", f"/hub/api/users/{student.name}/tokens",
                             body={"note": "tests/hub", "expires_in": 7200})
            student.token = str(model["token"])

    def close(self) -> None:
        """Stop every server (through the hub), the hub and its proxy, then whatever a student still
        runs, then remove the students."""
        if self.process.poll() is None:
            for student in self.students:
                try:
                    self.stop_server(student.name)
                except (HubError, OSError):
                    pass
            for student in self.students:
                try:
                    self.wait_stopped(student.name, timeout=60)
                except (RuntimeError, HubError, OSError):
                    pass
            procs = [psutil.Process(self.process.pid), *psutil.Process(self.process.pid).children(recursive=True)]
            end_processes(procs, grace=15)
        try:
            self.process.wait(10)  # reaped: its Popen knows it ended
        except subprocess.TimeoutExpired:
            pass
        for student in self.students:
            end_processes(processes_of(student.uid), grace=5)
            remove_user(student.name)


def add_user(name: str) -> int:
    """A system user ``name`` with a home; one left by an earlier run is removed first."""
    remove_user(name)
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True,
                   capture_output=True, text=True)
    return pwd.getpwnam(name).pw_uid


def remove_user(name: str) -> None:
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return
    end_processes(processes_of(uid), grace=5)
    subprocess.run(["userdel", "--remove", name], capture_output=True, text=True)


def _config(port: int, hub_port: int, proxy_api_port: int, root: Path, token: str, culler_token: str,
            names: list[str]) -> str:
    venv = HUB_VENV
    return f"""\
# testbed/hub.py: one JupyterHub for the hub tier
c = get_config()  # noqa
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.pid_file = {str(root / "proxy.pid")!r}
c.JupyterHub.db_url = {"sqlite:///" + str(root / "jupyterhub.sqlite")!r}
c.JupyterHub.cookie_secret_file = {str(root / "cookie_secret")!r}
c.JupyterHub.pid_file = {str(root / "hub.pid")!r}
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {set(names)!r}
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [{str(venv / "bin" / "jupyterhub-singleuser")!r}]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
# the teacher's class cap, and activity reports every {ACTIVITY_INTERVAL} s (default 300)
c.Spawner.environment = {{
    "MWNOTEBOOK_MAX_WORKERS": "{CLASS_CAP}",
    "JUPYTERHUB_ACTIVITY_INTERVAL": "{ACTIVITY_INTERVAL}",
    "PATH": "{venv}/bin:/usr/local/bin:/usr/bin:/bin",
}}
c.JupyterHub.last_activity_interval = {ACTIVITY_INTERVAL}


def _inside_culling(spawner):  # the last student's server culls its own idle kernels
    if spawner.user.name == {names[-1]!r}:
        spawner.args = {INSIDE_CULLING!r}


c.Spawner.pre_spawn_hook = _inside_culling
# the tests' admin service, and jupyterhub-idle-culler's (run by the test that needs it, not by the hub)
c.JupyterHub.services = [
    {{"name": "mwtest", "api_token": {token!r}}},
    {{"name": "idle-culler", "api_token": {culler_token!r}}},
]
c.JupyterHub.load_roles = [
    {{"name": "mwtest", "services": ["mwtest"],
      "scopes": ["admin:users", "admin:servers", "tokens", "list:users", "read:users:activity"]}},
    {{"name": "idle-culler", "services": ["idle-culler"],
      "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]}},
]
"""


def start_hub(root: Path, names: list[str]) -> Hub:
    """Make the students ``names`` (system users) and start a hub that allows them, in ``root``;
    wait until its API answers. The last student's server culls its own idle kernels
    (:data:`INSIDE_CULLING`). Stop it all with :meth:`Hub.close`."""
    students = [Student(name, add_user(name)) for name in names]
    port, hub_port, proxy_api_port = _free_port(), _free_port(), _free_port()
    token, culler_token = secrets.token_hex(32), secrets.token_hex(32)
    config = root / "jupyterhub_config.py"
    config.write_text(_config(port, hub_port, proxy_api_port, root, token, culler_token, names))
    log_path = root / "hub.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "MWNOTEBOOK_MAX"))}
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=root, env=env,
                                   stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    hub = Hub(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{hub_port}/hub/api", token, root, process,
              log_path, students, culler_token)
    deadline = time.monotonic() + 90
    while True:
        try:
            status, _ = hub.request("GET", "/hub/api/", timeout=5)
            if status == 200:
                break
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            hub.close()
            raise RuntimeError(f"JupyterHub did not start:\n{hub.log_tail()}")
        time.sleep(0.3)
    hub.give_tokens()
    return hub


class Watch:
    """Polls ``probe`` on a thread every ``interval`` s and keeps what it returns (a measurement
    taken while the test does something else)."""

    def __init__(self, probe: Any, interval: float = 1.0) -> None:
        self.samples: list[tuple[float, Any]] = []
        self._stop = threading.Event()
        self._probe, self._interval = probe, interval
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic() - start, self._probe()))
            except Exception as e:  # a failed probe is kept as a sample, the watch goes on
                self.samples.append((time.monotonic() - start, e))
            self._stop.wait(self._interval)

    def stop(self) -> list[tuple[float, Any]]:
        self._stop.set()
        self._thread.join(10)
        return self.samples


def record(name: str, value: Any) -> None:
    """Keep a measurement of the hub tier in artifacts/hub.json (read by the report, never asserted)."""
    path = Path(__file__).resolve().parents[1] / "artifacts" / "hub.json"
    path.parent.mkdir(exist_ok=True)
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        found = {}
    found[name] = value
    path.write_text(json.dumps(found, indent=1, default=str) + "\n")
