"""The CPU and memory table under ``%mwcluster status``: each worker's figures as read on its own
host (``mwnotebook/engine/usage.py``: psutil on this machine, the remote agent's /proc reading on
SSH and Slurm hosts)."""

from __future__ import annotations

import html
from collections.abc import Sequence

from mwnotebook.engine.usage import WorkerUsage

_MIB = 1024 * 1024


def _row(u: WorkerUsage) -> list[str]:
    cpu = "-" if u.cpu_percent is None else f"{u.cpu_percent:.0f}"
    memory = "-" if u.memory_bytes is None else f"{u.memory_bytes / _MIB:.0f}"
    limit = "-" if u.memory_limit is None else f"{u.memory_limit / _MIB:.0f}"
    note = u.note
    if u.near_limit and u.memory_limit:
        used = u.limit_used if u.limit_used is not None else u.memory_bytes or 0
        shared = " with this host's other workers" if used != u.memory_bytes else ""
        note = f"NEAR ITS MEMORY LIMIT ({used / u.memory_limit:.0%}{shared})"
    return [str(u.index), u.host or "-", str(u.pid or "-"), cpu, memory, limit, note]


def usage_bundle(usages: Sequence[WorkerUsage]) -> dict[str, str]:
    """Text and HTML: worker, host, pid, CPU % (of one core, since the previous status), resident MiB,
    the memory limit it lives under; a worker near that limit says so in its note (with the share of
    the limit used, its own or with the workers of its host under the same limit: engine/usage.py)."""
    headers = ["worker", "host", "pid", "CPU %", "memory MiB", "limit MiB", "note"]
    rows = [_row(u) for u in usages]
    caption = "CPU and memory, read on each worker's host"
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = [caption] + ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [headers, *rows]]
    head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td style='text-align:left'>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    page = (f"<table class='mwnotebook-table mw-usage'><caption style='text-align:left'>{html.escape(caption)}"
            f"</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    return {"text/plain": "\n".join(lines), "text/html": page}
