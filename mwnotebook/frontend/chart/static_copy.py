"""The final chart as a MIME bundle for every way a saved notebook gets rendered.

* ``application/vnd.plotly.v1+json``: JupyterLab / VS Code draw an interactive chart;
* ``text/html``: the SVG picture, which a script replaces with the interactive chart when plotly.js
  can be loaded (nbconvert HTML online); GitHub (no scripts) and offline viewers keep the picture;
* ``image/svg+xml`` and ``text/plain``: the picture and the status as text.
"""

from __future__ import annotations

import json
from typing import Any

_PLOTLY_JS_VERSION_FALLBACK = "3.1.0"


def _plotly_js_version() -> str:
    try:
        from plotly.offline import get_plotlyjs_version

        return str(get_plotlyjs_version())
    except ImportError:
        return _PLOTLY_JS_VERSION_FALLBACK


def static_bundle(figure: dict[str, Any], svg: str, text: str, box_id: str) -> dict[str, Any]:
    fig_json = json.dumps(figure, allow_nan=False)  # figure_dict wrote non-finite values as null
    script = (
        "(function(){{var box=document.getElementById('{}');var fig={};"
        "function draw(){{box.innerHTML='';window.Plotly.newPlot(box,fig.data,fig.layout,{{responsive:true}});}}"
        "if(window.Plotly){{draw();return;}}var s=document.createElement('script');"
        "s.src='https://cdn.plot.ly/plotly-{}.min.js';s.onload=draw;document.head.appendChild(s);}})();"
    ).format(box_id, fig_json.replace("</", "<\\/"), _plotly_js_version())
    return {
        "application/vnd.plotly.v1+json": json.loads(fig_json),
        "text/html": f'<div id="{box_id}" class="mw-static-chart">{svg}</div><script>{script}</script>',
        "image/svg+xml": svg,
        "text/plain": text,
    }
