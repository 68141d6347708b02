"""Reading a tagged line a remote cell prints (``TAG {json}``), shared by the remote tier's runtime
tests (tests/remote/test_remote_worker_runtime.py, test_remote_plain_kernel.py)."""

from __future__ import annotations


def tagged_line(result: object, worker: int, tag: str) -> str:
    """The rest of ``worker``'s first stdout line that starts with ``tag``; its whole stdout if none
    does (so a failed assert shows what the worker printed)."""
    out = result.stdout(worker)  # type: ignore[attr-defined]
    return next((line[len(tag) + 1:] for line in out.splitlines() if line.startswith(tag + " ")), "") or out
