#!/usr/bin/env bash
# Build the documentation site into docs/_build/html/, offline, warnings as errors.
# Usage: bash tools/docs.sh   (--no-execute is accepted and changes nothing: nothing is executed)
#
# Needs no root, no test hosts and no artifacts/: the lesson pages are the executed copies committed in
# notebooks/executed/ (tools/docs_lessons.py checks each and writes docs/lessons/executed/; the lesson
# index includes the learning path notebooks/README.md). A lesson without a copy, with a failed cell or
# a chart without its picture fails the build; `python tools/refresh_lessons.py` makes the copies.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -c 'import sphinx, myst_nb, pydata_sphinx_theme, sphinx_design' 2>/dev/null \
  || python3 -m pip install -q -e '.[docs]'
python3 tools/docs_lessons.py "$@"
rm -rf docs/_build/html docs/_build/doctrees
# -W --keep-going: every warning is reported, then fails the build; -n: every reference must resolve.
python3 -m sphinx -b html -W --keep-going -n -q -j auto docs docs/_build/html
echo "tools/docs.sh: docs/_build/html/index.html ($(find docs/_build/html -name '*.html' -not -path '*/_static/*' | wc -l) pages)"
