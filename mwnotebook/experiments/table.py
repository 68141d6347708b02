"""The run history as a table (``%mwruns``, ``mw_runs``) and what changed between two runs
(``%mwruns --diff A B``). Pure: no IPython, no display."""

from __future__ import annotations

import difflib
import math
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mwnotebook.experiments.history import GLOBAL, RunRecord

#: The columns every row has, in order (the final metric values follow).
COLUMNS = ("run", "started", "seconds", "workers", "hosts", "outcome", "restarts", "options", "cell",
           "logged")


def _final_columns(record: RunRecord) -> dict[str, float]:
    """Final values as columns: a global metric by its name, a worker's as ``worker-<i>/<name>``."""
    columns = {name: value for name, value in record.final.get(GLOBAL, {}).items()}
    for key in sorted((k for k in record.final if k != GLOBAL), key=lambda k: (len(k), k)):
        for name, value in record.final[key].items():
            columns[f"worker-{key}/{name}"] = value
    return columns


def rows(records: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """One plain dict per run, latest first (the columns of :data:`COLUMNS`, then final values)."""
    out = []
    for record in sorted(records, key=lambda r: r.number, reverse=True):
        row: dict[str, Any] = {
            "run": record.number, "started": record.started, "seconds": round(record.duration, 3),
            "workers": record.workers, "hosts": ",".join(dict.fromkeys(record.hosts)),
            "outcome": record.outcome, "restarts": record.restarts, "options": record.line.strip(),
            "cell": record.short_hash, "logged": ", ".join(f"{k}: {v}" for k, v in record.logged.items()),
        }
        row.update(_final_columns(record))
        out.append(row)
    return out


def frame(records: Sequence[RunRecord]) -> Any:
    """The table as a pandas DataFrame (``started`` as local date and time) when pandas can be
    imported, else the list of :func:`rows`."""
    table = rows(records)
    try:
        import pandas as pd
    except ImportError:
        return table
    result = pd.DataFrame(table, columns=list(COLUMNS) + [c for r in table for c in r if c not in COLUMNS])
    result = result.loc[:, ~result.columns.duplicated()]
    result["started"] = pd.to_datetime([datetime.fromtimestamp(t) for t in result["started"]])
    return result.set_index("run")


def _number(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.4g}"


def text_rows(records: Sequence[RunRecord], metrics: int = 3) -> tuple[list[str], list[list[str]]]:
    """The header and cells of the ``%mwruns`` table: the first ``metrics`` global final values."""
    names: list[str] = []
    for record in records:
        for name in record.final.get(GLOBAL, {}):
            if name not in names:
                names.append(name)
    names = names[:metrics]
    header = ["run", "started", "time", "workers", "outcome", "options", "cell", *names, "logged"]
    body = []
    for record in sorted(records, key=lambda r: r.number, reverse=True):
        outcome = record.outcome + (f" ({record.restarts} restart{'s' if record.restarts > 1 else ''})"
                                    if record.restarts else "")
        if record.error:
            outcome += f": {record.error}"
        final = record.final.get(GLOBAL, {})
        body.append([str(record.number), time.strftime("%H:%M:%S", time.localtime(record.started)),
                     f"{record.duration:.1f} s", str(record.workers), outcome, record.line.strip() or "-",
                     record.short_hash, *(_number(final[n]) if n in final else "" for n in names),
                     ", ".join(record.logged) or ("not recorded" if record.not_logged else "")])
    return header, body


def diff(a: RunRecord, b: RunRecord) -> list[str]:
    """What changed from run ``a`` to run ``b``: each option set differently, then the cell's changed
    lines (a unified diff without context)."""
    lines = [f"run {a.number} -> run {b.number}"]
    names = list(dict.fromkeys([*a.options, *b.options]))
    changed = [n for n in names if a.options.get(n) != b.options.get(n)]
    if changed:
        lines.append("options:")
        for name in changed:
            lines.append(f"  --{name.replace('_', '-')}: {a.options.get(name, '(not set)')} -> "
                         f"{b.options.get(name, '(not set)')}")
    else:
        lines.append("options: the same")
    if a.cell_hash == b.cell_hash:
        lines.append("cell: the same")
    else:
        lines.append("cell:")
        body = difflib.unified_diff(a.cell.splitlines(), b.cell.splitlines(), f"run {a.number}",
                                    f"run {b.number}", n=0, lineterm="")
        lines.extend("  " + line for line in body)
    return lines
