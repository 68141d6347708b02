"""IOPub messages as a kernel sends them, for unit tests of the code that reads them.

Only the fields mwnotebook reads: ``msg_type``, ``content`` and, where asked, the parent's
``msg_id`` (how output is matched to the request that caused it).
"""

from __future__ import annotations

from typing import Any


def message(msg_type: str, content: dict[str, Any], parent: str | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"msg_type": msg_type, "content": content}
    if parent is not None:
        msg["parent_header"] = {"msg_id": parent}
    return msg


def stream(text: str, name: str = "stdout", parent: str | None = None) -> dict[str, Any]:
    """A ``stream`` message: ``text`` printed on ``name`` (stdout or stderr)."""
    return message("stream", {"name": name, "text": text}, parent)


def status(state: str = "idle", parent: str | None = None) -> dict[str, Any]:
    """A ``status`` message (``idle`` ends a request's output; ``busy`` starts it)."""
    return message("status", {"execution_state": state}, parent)


def display_data(data: dict[str, Any], metadata: dict[str, Any] | None = None,
                 parent: str | None = None) -> dict[str, Any]:
    return message("display_data", {"data": data, "metadata": metadata or {}}, parent)
