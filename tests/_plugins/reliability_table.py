"""The reliability table (benchmarks/reliability_table.md): one row per fault scenario.

Each scenario records its row *before* it asserts, so the table printed at the end of the session
(and written to ``artifacts/reliability.json``) also shows the rows of scenarios that failed.

Under pytest-xdist the scenarios run in worker processes while the table is printed by the
controlling one, so every process keeps its rows in a file of its own under
``artifacts/reliability-rows/``; the process that prints merges them. The controlling (or only)
process clears that folder when it starts, so rows of an earlier run never show.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROWS_DIR = Path(__file__).resolve().parents[2] / "artifacts" / "reliability-rows"
TABLE = ROWS_DIR.parent / "reliability.json"


@dataclass
class Row:
    scenario: str
    limit_s: float | None
    detected_s: float | None  # fault injected -> first worker reported failed (None: no such event)
    failed_s: float | None  # fault injected -> the cell raised (what the user waits for)
    recovered: bool | None  # the next cell on the same cluster/notebook succeeded (None: not applicable)
    orphans: int | None  # mwnotebook processes left alive that should be gone
    note: str = ""
    passed: bool = field(default=False)


_ROWS: list[Row] = []


def _process_name() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def record(scenario: str, *, limit_s: float | None = None, detected_s: float | None = None,
           failed_s: float | None = None, recovered: bool | None = None, orphans: int | None = None,
           note: str = "", ok: bool = True) -> Row:
    """Add (or replace) the table row of ``scenario``; call before asserting. ``ok=False`` marks a
    failure the other columns do not show."""
    within = limit_s is None or (failed_s is not None and failed_s < limit_s)
    row = Row(scenario, limit_s, _round(detected_s), _round(failed_s), recovered, orphans, note,
              passed=bool(ok and within and recovered is not False and not orphans))
    _ROWS[:] = [r for r in _ROWS if r.scenario != scenario]
    _ROWS.append(row)
    ROWS_DIR.mkdir(parents=True, exist_ok=True)
    (ROWS_DIR / f"{_process_name()}.json").write_text(json.dumps([asdict(r) for r in _ROWS]))
    return row


def all_rows() -> list[Row]:
    """Every process's rows, in scenario order."""
    rows: dict[str, Row] = {}
    for path in sorted(ROWS_DIR.glob("*.json")) if ROWS_DIR.is_dir() else []:
        for data in json.loads(path.read_text()):
            rows[data["scenario"]] = Row(**data)
    return sorted(rows.values(), key=lambda r: _scenario_key(r.scenario))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return str(value)


def format_table(rows: list[Row]) -> str:
    head = ("scenario", "limit s", "detected s", "failed s", "recovered", "orphans", "ok", "note")
    lines = [[r.scenario, _cell(r.limit_s), _cell(r.detected_s), _cell(r.failed_s), _cell(r.recovered),
              _cell(r.orphans), "ok" if r.passed else "FAIL", r.note] for r in rows]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(head)]
    fmt = " | ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*head), "-+-".join("-" * w for w in widths)]
    out += [fmt.format(*line) for line in lines]
    return "\n".join(out)


def _scenario_key(name: str) -> tuple[int, str]:
    match = re.match(r"(\d+)", name)
    return (int(match.group(1)) if match else 99, name)


def pytest_configure(config: pytest.Config) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ:
        shutil.rmtree(ROWS_DIR, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if "PYTEST_XDIST_WORKER" in os.environ:
        return
    rows = all_rows()
    if not rows:
        return
    terminalreporter.write_sep("=", "mwnotebook reliability table")
    terminalreporter.write_line(format_table(rows))
    TABLE.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    terminalreporter.write_line(f"(written to {TABLE})")
