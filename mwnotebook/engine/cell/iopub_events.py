"""The engine's one reading of a worker's IOPub output: which messages are metrics, which are output.

Everything about how output is shown (labels, ``\\r`` lines, grouped results) is the front ends'
(``mwnotebook/frontend/text/relay.py``); the engine only turns messages into events.
"""

from __future__ import annotations

from typing import Any

from mwnotebook.shared.events import METRICS_MIME, Event, WorkerMetrics, WorkerOutput


def events_from_iopub(worker: int, msg: dict[str, Any]) -> list[Event]:
    """Turn one IOPub output message of ``worker`` into events.

    A ``display_data`` carrying :data:`METRICS_MIME` is metrics, never shown as output.
    """
    msg_type = msg["msg_type"]
    content = msg.get("content", {})
    if msg_type == "display_data" and METRICS_MIME in content.get("data", {}):
        payload = content["data"][METRICS_MIME] or {}
        records = tuple(dict(r, worker=worker) for r in payload.get("records", ()))
        return [WorkerMetrics(worker=worker, records=records)] if records else []
    return [WorkerOutput(worker=worker, msg_type=msg_type, content=content)]
