"""``%mwruns``, ``mw_runs`` and :func:`runs`: the kernel's run history shown, compared and sent again.

``%mwruns`` shows a table of every ``%%mwtrain`` run (latest first); ``--diff A B`` what changed
between two runs (options and cell lines); ``--log N --tensorboard DIR`` / ``--mlflow [EXPERIMENT]``
sends a kept run again (after a directory could not be written or a tracking server was down).
The history itself is mwnotebook/experiments/history.py; the table's rows are experiments/table.py.
"""

from __future__ import annotations

import argparse
import html
import logging
import sys
import threading
from typing import Any

from IPython.display import publish_display_data

from mwnotebook.config.options import add_experiment_arguments
from mwnotebook.experiments import table
from mwnotebook.experiments.history import RunHistory
from mwnotebook.experiments.outlets import Outlets, send

log = logging.getLogger(__name__)


def mwruns_parser(parser_class: type[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser = parser_class(prog="%mwruns", add_help=False, description=(
        "The runs of this kernel's %%mwtrain cells, latest first (also as data: mw_runs, mwnotebook.runs()). "
        "Kept across a kernel restart."))
    parser.add_argument("--diff", nargs=2, type=int, metavar=("A", "B"), default=None,
                        help="what changed from run A to run B: the options and the cell's lines")
    parser.add_argument("--log", type=int, metavar="N", default=None,
                        help="send run N again, with --tensorboard DIR and/or --mlflow [EXPERIMENT]")
    add_experiment_arguments(parser)
    return parser


def option_text(value: Any) -> str:
    """An option's value as a run's parameter (``--env A=1 --env B=2``: ``A=1,B=2``)."""
    if isinstance(value, (list, tuple)):
        return ",".join("=".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v) for v in value)
    return str(value)


def preload_in_background() -> threading.Thread:
    """Import pandas while the user types: ``mw_runs`` is a DataFrame from the first run's end on, and
    importing pandas there would add ~0.5 s to that cell (0.52 s measured under load 7)."""
    def load() -> None:
        try:
            import pandas  # noqa: F401
        except Exception:  # no pandas: mw_runs is a list of rows
            log.debug("pandas could not be imported", exc_info=True)

    thread = threading.Thread(target=load, name="mwnotebook-runs-preload", daemon=True)
    thread.start()
    return thread


def publish(shell: Any, history: RunHistory) -> None:
    """``mw_runs`` in the user's namespace: the history as data (a DataFrame with pandas)."""
    if shell is not None and len(history):
        shell.user_ns["mw_runs"] = table.frame(history.records())


def after_run(shell: Any, history: RunHistory, number: int, outlets: Outlets) -> None:
    """At a run's end, whatever the end: send it where the line asked, say in one line what could not
    be sent, and refresh ``mw_runs``. Never raises: the cell's own outcome stands."""
    try:
        if outlets:
            _record, missed = send(history, number, outlets)
            if missed:
                print(missed, file=sys.stderr)
        publish(shell, history)
    except Exception as exc:  # the history is a by-product of the run: it must not fail the cell
        print(f"mwnotebook: run {number} is in the run history, but: {type(exc).__name__}: {exc}", file=sys.stderr)


def mwruns(shell: Any, history: RunHistory, ns: argparse.Namespace) -> None:
    from IPython.core.error import UsageError

    outlets = Outlets(tensorboard=ns.tensorboard, mlflow=ns.mlflow)
    try:
        if ns.diff is not None:
            a, b = (history.get(n) for n in ns.diff)
            print("\n".join(table.diff(a, b)))
        elif ns.log is not None:
            if not outlets:
                raise UsageError("%mwruns --log N: say where to: --tensorboard DIR and/or --mlflow [EXPERIMENT]")
            outlets.check()
            record, missed = send(history, ns.log, outlets)
            if missed:
                print(missed, file=sys.stderr)
            else:
                print(f"mwnotebook: run {record.number} recorded: "
                      + ", ".join(f"{k} {v}" for k, v in record.logged.items()))
            publish(shell, history)
        elif outlets:
            raise UsageError("%mwruns: --tensorboard and --mlflow go with --log N (which run to send)")
        elif not len(history):
            print("mwnotebook: no %%mwtrain run in this kernel yet")
        else:
            publish_display_data(table_bundle(history))
    except KeyError as exc:
        raise UsageError(f"%mwruns: {exc.args[0]}") from None
    except Exception as exc:
        from mwnotebook.errors import ConfigError

        if isinstance(exc, ConfigError):
            raise UsageError(f"%mwruns: {exc}") from None
        raise


def table_bundle(history: RunHistory) -> dict[str, str]:
    """The ``%mwruns`` table as text and HTML."""
    header, body = table.text_rows(history.records())
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(header)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *body]]
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in body)
    return {"text/plain": "\n".join(lines),
            "text/html": f"<table class='mwnotebook-runs'><thead><tr>{cells}</tr></thead><tbody>{rows}</tbody></table>"}


def runs() -> Any:
    """The runs of this kernel's ``%%mwtrain`` cells, latest first: a pandas DataFrame indexed by run
    number (the list of row dicts when pandas is not installed), with each run's options, outcome,
    duration, workers and the final value of every metric (global by name, ``worker-<i>/<name>``)."""
    from IPython import get_ipython

    shell = get_ipython()
    magics = shell.magics_manager.registry.get("MWMagics") if shell is not None else None
    if magics is None:
        raise RuntimeError("mwnotebook: no run history here: run %load_ext mwnotebook and a %%mwtrain cell first")
    return table.frame(magics.session.runs.records())
