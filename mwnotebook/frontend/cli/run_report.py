"""The self-contained HTML report ``mwnotebook run`` writes at the end: per-worker curves (plotly.js
inlined), each worker's state and output, and the failure. A kernel that is not a plain replica is
called by the name the run's text labels it with (``coordinator``, ``evaluator``: config/roles.py
``RoleLayout.kernel_names``, handed down by the command through the observer)."""

from __future__ import annotations

import html
import re
from datetime import datetime, timezone
from typing import Protocol

from mwnotebook.frontend.chart.lines import ChartLines
from mwnotebook.frontend.text.grouping import WorkerNames
from mwnotebook.shared.metrics import MetricsStore


class RunRecord(Protocol):
    """What the report reads of a run (``frontend/cli/command.py`` ``RunObserver`` collects it
    from the run's events)."""

    @property
    def workers(self) -> int: ...

    @property
    def metrics(self) -> MetricsStore: ...

    @property
    def states(self) -> list[str]: ...

    @property
    def errors(self) -> list[str]: ...

    @property
    def output(self) -> list[list[str]]: ...

    @property
    def names(self) -> WorkerNames: ...


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain(text: str, keep_color: bool) -> str:
    """``text`` without ANSI colour codes (kept for a terminal that shows them)."""
    return text if keep_color else _ANSI.sub("", text)


def _figures_html(observer: RunRecord, lines: ChartLines) -> str:
    store = observer.metrics
    local = sorted({name for name in store.metric_names() if not name.startswith("global_")},
                   key=lambda n: (n != "loss", n))
    if not local and not store.metric_names():
        return ('<p class="none">No metrics were reported, so there are no curves. Report them from the '
                "script with <code>mw.report(step=i, loss=...)</code> or the Keras callback.</p>")
    import plotly.io as pio  # only when there is something to draw

    from mwnotebook.frontend.chart.plotly_figure import per_worker_figure

    def figure(metric: str) -> object:
        names = [lines.series_name(w, metric) for w in range(observer.workers)]  # the chart's legend names
        return per_worker_figure(store, metric, observer.workers, names=names)

    metrics = local or [n[len("global_"):] for n in store.metric_names()]
    return "\n".join(pio.to_html(figure(metric), include_plotlyjs=(number == 0), full_html=False)
                     for number, metric in enumerate(metrics))


def render_report(script: str, observer: RunRecord, verdict: str, elapsed: float,
                  failure_text: str = "") -> str:
    """A self-contained HTML page: curves (plotly.js inlined), worker status and output."""
    esc = html.escape
    lines = ChartLines(observer.workers, kernel_names=observer.names)
    who = lines.short_name  # "worker 1", or the kernel's name ("coordinator")
    rows = "\n".join(
        f"<tr><td>{esc(who(i))}</td><td class='{esc(observer.states[i])}'>{esc(observer.states[i])}</td>"
        f"<td>{esc(observer.errors[i])}</td></tr>" for i in range(observer.workers))
    outputs = "\n".join(
        f"<details open><summary>{esc(who(i))} output</summary><pre>"
        f"{esc(plain(''.join(observer.output[i]), False)) or '(no output)'}</pre></details>"
        for i in range(observer.workers))
    failure = f"<h2>Failure</h2><pre class='failure'>{esc(failure_text)}</pre>" if failure_text else ""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>mwnotebook run: {esc(script)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: .3em .8em; }}
pre {{ background: #f6f6f6; padding: .8em; overflow-x: auto; max-height: 30em; }}
.failed {{ color: #b00; font-weight: bold; }} .done {{ color: #070; }} .failure {{ color: #b00; }}
.none {{ font-style: italic; }}
</style></head><body>
<h1>mwnotebook run: {esc(script)}</h1>
<p>{observer.workers} workers &middot; {esc(verdict)} &middot; {elapsed:.1f} s &middot; finished {when}</p>
<h2>Loss curves</h2>
{_figures_html(observer, lines)}
<h2>Workers</h2>
<table><tr><th>worker</th><th>state</th><th>error</th></tr>
{rows}
</table>
{failure}
<h2>Output</h2>
{outputs}
</body></html>
"""
