"""Sphinx configuration of mwnotebook's documentation (built by ``bash tools/docs.sh``).

The build is offline: no intersphinx, no theme assets from a CDN, lessons rendered from executed
copies prepared by ``tools/docs_lessons.py`` (never executed by Sphinx itself).
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))

import mwnotebook  # noqa: E402

project = "mwnotebook"
author = "the mwnotebook authors"
copyright = "the mwnotebook authors"  # noqa: A001 - Sphinx's name
release = version = mwnotebook.__version__

extensions = [
    "myst_nb",
    "sphinx_design",
]

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints", "lessons/_run/*.md"]
suppress_warnings = [
    # The chart's bundle also holds plotly's JSON, which the HTML pages do not draw (the SVG is shown).
    "mystnb.unknown_mime_type",
    # Lesson notebooks' own heading levels (lesson 06 goes from H1 to H3).
    "myst.header",
]

# Options stay as typed: no "--" turned into a dash, no curly quotes.
smartquotes = False

# MyST: the user guide is Markdown.
myst_enable_extensions = ["colon_fence", "deflist", "attrs_inline"]
myst_heading_anchors = 3

# MyST-NB: lessons are executed before the build (tools/docs_lessons.py); Sphinx never runs a kernel.
nb_execution_mode = "off"
# The chart's saved picture: the SVG, not the HTML variant (whose script would fetch plotly.js from a
# CDN when the page is opened; the pages must work offline).
nb_mime_priority_overrides = [
    ("html", "image/svg+xml", 5),
    ("html", "application/vnd.plotly.v1+json", None),
]
nb_merge_streams = True
# No ipywidgets loader from a CDN on lesson pages: a saved lesson holds no widget (the chart's end state is
# the picture above), and the pages must work offline.
nb_ipywidgets_js: dict[str, dict[str, str]] = {}

# The reference pages (docs/reference/*.md) are plain Markdown made from the code by
# tools/docs_reference.py and committed, so that they read on GitHub as on the site.

html_theme = "pydata_sphinx_theme"
html_title = f"mwnotebook {release}"
html_static_path = ["_static"]
html_css_files = ["mw.css"]
html_theme_options = {
    "navigation_with_keys": False,
    "header_links_before_dropdown": 5,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_end": [],
    # the reference tables need the width; their pages are one table each
    "secondary_sidebar_items": {"**": ["page-toc"], "reference/magics": [], "reference/cli": []},
}
html_sidebars = {"index": [], "lessons/index": []}
html_show_sourcelink = False
