"""Which line of the chart a record is drawn on: a cell kernel's, or a ``--ps`` worker server's.

Lines are numbered like the cell's kernels (``0 .. kernels-1``: under ``--ps`` kernel 0 is the
coordinator, then the evaluator if there is one), and a ``--ps`` cluster's worker servers come after
them (``kernels + i`` for worker server ``i``), so a server's curve never shares an index with the
evaluator's ``val_*`` lines or the coordinator's own records. The global line comes after all
(``count``, see feed.py). A record names its worker server with the ``server`` key, which the
coordinator's ``mw.report(..., worker=...)`` / ``scheduled=`` sets (worker/_remote.py).

Without worker servers (every ``MultiWorkerMirroredStrategy`` cluster) a record is drawn on its
kernel's line and nothing here changes what is drawn.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mwnotebook.config.roles import RoleLayout
from mwnotebook.frontend.chart.series import worker_series_name

log = logging.getLogger(__name__)

SERVER_KEY = "server"


@dataclass(frozen=True)
class ChartLines:
    """The chart's lines of one cell: ``kernels`` cell kernels, then ``servers`` worker servers."""

    kernels: int
    servers: int = 0
    #: Kernels that are not plain replicas (``{0: "coordinator", 1: "evaluator"}``): the names the
    #: cell's text is labelled with (config/roles.py ``RoleLayout.kernel_names``), handed in.
    kernel_names: Mapping[int, str] = field(default_factory=dict)

    @property
    def count(self) -> int:
        """Lines other than the global one."""
        return self.kernels + self.servers

    def line_of(self, kernel: int, record: Mapping[str, Any]) -> int:
        """The line of ``kernel``'s ``record``: its worker server's when it names one."""
        server = record.get(SERVER_KEY)
        if server is None or not self.servers:
            return kernel
        if type(server) is int and 0 <= server < self.servers:
            return self.kernels + server
        log.debug("record names worker server %r, not one of 0..%d: drawn on kernel %d's line",
                  server, self.servers - 1, kernel)
        return kernel

    def split(self, kernel: int, records: Sequence[Mapping[str, Any]]) -> list[tuple[int, Sequence[Mapping[str, Any]]]]:
        """``records`` of ``kernel`` grouped by line, each group in arrival order."""
        if not self.servers:
            return [(kernel, records)]
        groups: dict[int, list[Mapping[str, Any]]] = {}
        for record in records:
            groups.setdefault(self.line_of(kernel, record), []).append(record)
        return list(groups.items())

    def is_server(self, line: int) -> bool:
        return self.kernels <= line < self.count

    def short_name(self, line: int) -> str:
        """The widget's name of ``line`` (``worker 1``, ``coordinator``)."""
        if self.is_server(line):
            return f"worker {line - self.kernels}"
        return self.kernel_names.get(line, f"worker {line}")

    def series_name(self, line: int, metric: str, failed_error: str | None = None) -> str:
        """The legend name of ``line`` for ``metric``: ``worker i (local loss)`` for a worker
        server, ``coordinator (loss)`` for a named kernel, else the kernel's worker name."""
        if self.is_server(line):
            return worker_series_name(line - self.kernels, metric)
        name = self.kernel_names.get(line)
        if name is None:
            return worker_series_name(line, metric, failed_error)
        name = f"{name} ({metric})"
        return name if failed_error is None else f"{name} - failed: {failed_error or 'error'}"


def chart_lines(layout: RoleLayout, names: Mapping[int, str]) -> ChartLines:
    """The lines of ``layout``'s cell (worker servers under --ps), its kernels called by ``names``
    (the same names the cell's text is labelled with)."""
    servers = layout.workers if layout.parameter_server else 0
    return ChartLines(len(layout.cell_tasks()), servers, dict(names))
