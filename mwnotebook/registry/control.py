"""The owning kernel's control channel: a 0600 unix socket that takes ``interrupt``, ``restart``, ``stop``.

A request is one JSON line (``{"action": "stop"}``), the answer one JSON line (``{"ok": true}`` or
``{"ok": false, "code": "busy", "error": "..."}``). A refusal's ``code`` says what kind it is
(:data:`Code`: ``busy``, ``forbidden``, ``bad_request``); the server maps codes to HTTP statuses in
one table (server/service.py ``STATUS``), never by the error's words. Only a peer of this
process's own user is served (the socket is 0600 in a 0700 directory, and the peer's credentials
are checked: ``SO_PEERCRED``). The answer says the action was accepted; it then runs on its own
thread, so a kernel busy with a cell still obeys (the cluster's engine runs on a background loop),
and the caller sees its effect in the state file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, NamedTuple, get_args

log = logging.getLogger(__name__)

ACTIONS = ("interrupt", "restart", "stop")

#: Why an owner refused: another action is under way (``busy``), the peer may not ask
#: (``forbidden``), the request is not one it understands (``bad_request``).
Code = Literal["busy", "forbidden", "bad_request"]
CODES: tuple[Code, ...] = get_args(Code)
#: The owner could not be asked at all (no socket, no answer): said by the asking side only.
UNREACHABLE = "unreachable"


class Refusal(NamedTuple):
    """An owner's "no": its kind and the words for a person."""

    code: Code
    message: str
_MAX_REQUEST = 4096


#: A unix socket's path must fit in ``sockaddr_un.sun_path`` (108 bytes on Linux, with its NUL).
_SUN_PATH_MAX = 107


@contextlib.contextmanager
def reachable(path: Path) -> Iterator[str]:
    """A name for ``path`` that ``bind``/``connect`` accept, however long the directory's path is.

    A Jupyter runtime directory can be deep (a long home, a test's temporary folder), and a unix
    socket's path is capped at 107 bytes. A longer one is reached through an ``O_PATH`` handle on
    its directory (``/proc/self/fd/N/NAME``), so the socket still lives where the state file says.
    """
    name = os.fspath(path)
    if len(os.fsencode(name)) <= _SUN_PATH_MAX:
        yield name
        return
    directory = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{directory}/{path.name}"
    finally:
        os.close(directory)


class ControlError(RuntimeError):
    """The owner could not be asked (``code`` ``unreachable``) or refused the request (its :data:`Code`)."""

    def __init__(self, message: str, code: str = UNREACHABLE) -> None:
        super().__init__(message)
        self.code = code


def peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class ControlListener:
    """Serves the socket at ``path`` on a daemon thread; ``accept(action)`` returns a :class:`Refusal` or None.

    ``accept`` must return quickly: it decides and hands the work to another thread."""

    def __init__(self, path: Path, accept: Callable[[str], Refusal | None]) -> None:
        self.path = path
        self._accept = accept
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            with reachable(path) as name:
                self._sock.bind(name)
        finally:
            os.umask(old_umask)
        self._sock.listen(8)
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=f"mwnotebook-control-{path.stem}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                break
            with conn:
                try:
                    self._answer(conn)
                except Exception:  # one bad request must not end the channel
                    log.debug("control request failed", exc_info=True)

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        if peer_uid(conn) != os.getuid():
            _refuse(conn, Refusal("forbidden", "refused: another user"))
            return
        data = b""
        while b"\n" not in data and len(data) < _MAX_REQUEST:
            chunk = conn.recv(1024)
            if not chunk:
                break
            data += chunk
        try:
            request = json.loads(data.split(b"\n", 1)[0])
            action = request["action"]
        except (ValueError, KeyError, TypeError):
            _refuse(conn, Refusal("bad_request", "bad request: expected one JSON line with an action"))
            return
        if action not in ACTIONS:
            _refuse(conn, Refusal("bad_request", f"unknown action {action!r}; one of {', '.join(ACTIONS)}"))
            return
        refusal = self._accept(action)
        if refusal is None:
            _send(conn, {"ok": True})
        else:
            _refuse(conn, refusal)

    def close(self) -> None:
        """Stop serving and remove the socket file."""
        if self._closed:
            return
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self._sock.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2)


def _send(conn: socket.socket, answer: dict[str, Any]) -> None:
    conn.sendall(json.dumps(answer).encode() + b"\n")


def _refuse(conn: socket.socket, refusal: Refusal) -> None:
    _send(conn, {"ok": False, "code": refusal.code, "error": refusal.message})


def send(path: str | os.PathLike[str], action: str, timeout: float = 5.0) -> None:
    """Ask the owner listening at ``path`` to do ``action``; raises :class:`ControlError` if it can't."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    try:
        info = os.stat(path)
    except OSError as e:
        raise ControlError(f"the cluster's owner has no control socket at {path}: {e.strerror}") from e
    if info.st_uid != os.getuid():
        raise ControlError(f"refused: {path} belongs to uid {info.st_uid}, not to this user", "forbidden")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            with reachable(Path(path)) as name:
                sock.connect(name)
            sock.sendall(json.dumps({"action": action}).encode() + b"\n")
            data = b""
            while b"\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError as e:
            raise ControlError(f"the cluster's owner did not answer on {path}: {e}") from e
    try:
        answer = json.loads(data)
    except ValueError as e:
        raise ControlError(f"the cluster's owner gave no answer on {path}") from e
    if not isinstance(answer, dict):
        raise ControlError(f"the cluster's owner gave no answer on {path}")
    if not answer.get("ok"):
        code = answer.get("code")
        raise ControlError(str(answer.get("error") or "refused"), code if code in CODES else "busy")
