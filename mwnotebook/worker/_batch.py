"""The reporter's buffered entries as published records: which may go now, and their JSON form.

An entry is ``(step, wall time, values)`` as :class:`~mwnotebook.worker._report.Reporter` buffers
it. Entries holding ``RemoteValue``s (a ``--ps`` coordinator, worker/_remote.py) may go only once
those are ready; the others always can. Values become plain numbers here, at flush time.
"""

from __future__ import annotations

import logging
from typing import Any

from mwnotebook.worker._remote import FAILED, READY, WAITING, DroppedValue, has_remote, record_state, resolve
from mwnotebook.worker._values import _json_value

log = logging.getLogger(__name__)

Entry = tuple[Any, float, dict[str, Any]]


def split_ready(buffer: list[Entry], drop_waiting: bool) -> tuple[list[Entry], list[Entry]]:
    """``(to publish now, to keep)``, each in buffer order. Entries of aborted or failed steps are
    dropped (one log line); waiting ones are kept, or dropped too when ``drop_waiting``."""
    batch, keep, failed = [], [], 0
    for entry in buffer:
        current = record_state(entry[0], entry[2])
        if current == WAITING and not drop_waiting:
            keep.append(entry)
        elif current == READY:
            batch.append(entry)
        else:
            failed += current == FAILED
    if failed:
        log.warning("mwnotebook.worker.report: dropped %d record(s) of scheduled steps that were aborted "
                    "or failed (e.g. a lost worker server)", failed)
    return batch, keep


def to_records(batch: list[Entry], worker: int | None) -> list[dict[str, Any]]:
    """Plain JSON records of ``batch`` (its RemoteValues are ready: fetching them does not wait)."""
    records = []
    dropped: list[str] = []
    for step, stamp, values in batch:
        if has_remote(step, values):
            try:
                step, values = resolve(step, values)
            except DroppedValue as exc:
                dropped.append(str(exc))
                continue
        record: dict[str, Any] = {"step": _json_value(step), "time": stamp}
        if worker is not None:
            record["worker"] = worker
        for name, value in values.items():
            record[name] = _json_value(value)
        records.append(record)
    if dropped:
        log.warning("mwnotebook.worker.report: dropped %d record(s) whose scheduled step failed: %s",
                    len(dropped), dropped[0])
    return records
