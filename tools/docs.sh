#!/usr/bin/env bash
# Build the documentation site into docs/_build/html/, offline, warnings as errors.
# Usage: bash tools/docs.sh [--no-execute]   (--no-execute: a lesson without an executed copy fails)
#
# The lesson gallery renders the executed copies the test suite saves in artifacts/ (tools/test.sh runs
# this after pytest); a missing copy of a lesson that runs on this machine alone is executed here with
# nbclient (tools/docs_lessons.py says which test makes the others). A lesson that failed, or that
# reports metrics but has no chart picture, fails the build.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -c 'import sphinx, myst_nb, pydata_sphinx_theme, sphinx_design' 2>/dev/null \
  || python3 -m pip install -q -e '.[docs]'
python3 tools/docs_lessons.py "$@"
rm -rf docs/_build/html docs/_build/doctrees
# -W --keep-going: every warning is reported, then fails the build; -n: every reference must resolve.
python3 -m sphinx -b html -W --keep-going -n -q -j auto docs docs/_build/html
echo "tools/docs.sh: docs/_build/html/index.html ($(find docs/_build/html -name '*.html' -not -path '*/_static/*' | wc -l) pages)"
