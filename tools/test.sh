#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run the whole suite.
# Usage: bash tools/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

# Every binary a test uses, with the Debian package that has it. A missing one is installed here,
# so that on CI (MWNOTEBOOK_NO_SKIPS=1, set by .ci/run) no tier can skip for want of a tool.
need_apt=()
have() { command -v "$1" >/dev/null || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
need() {  # need PACKAGE BINARY...: install PACKAGE unless every BINARY is there
  local pkg=$1; shift
  for bin in "$@"; do
    if ! have "$bin"; then need_apt+=("$pkg"); return; fi
  done
}
need chromium chromium                                  # tests/browser (headless, via Playwright)
need openssh-server sshd                                # tests/remote test hosts
need openssh-client ssh ssh-keygen                      # tests/remote, tests/slurm login node
need iproute2 ip                                        # network namespaces for test hosts
need util-linux unshare nsenter                         # private namespaces of workers
# A real Slurm for tests/slurm (munged, slurmctld, slurmd; started by the tests themselves, no systemd)
need slurm-wlm salloc srun sbatch squeue scancel scontrol sinfo slurmctld slurmd
need munge munged
need nodejs node                                        # widgets built with npm at pip install time
need npm npm
need graphviz dot                                       # the docs' diagrams (tests/unit/test_docs_diagrams.py)
need passwd useradd userdel                             # tests/hub: the students are real system users
# tests/hub: the students' venv is made by Debian's python3 (venv needs its ensurepip)
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}"
  else
    sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}"
  fi
fi
for bin in chromium sshd ssh ssh-keygen ip unshare nsenter salloc srun sbatch squeue scancel scontrol sinfo \
           slurmctld slurmd munged node npm useradd userdel; do
  have "$bin" || { echo "tools/test.sh: $bin is still missing after the install above" >&2; exit 1; }
done

# ray: tests/ray starts a real Ray cluster (a head and two nodes on loopback addresses) and runs the
# workers on it; without Ray that tier would skip, and a skip fails CI.
python3 -m pip install -q -e '.[tensorflow-cpu,test,docs,ray]'
# tests/hub: a real JupyterHub (the test extra's, run by this Python) spawns each student's server as
# a system user. Their single-user environment is what a teacher installs: the wheel, built once here
# (`python -m build`), with [tensorflow-cpu,lab] and the hub's own jupyterhub version, in a venv of
# Debian's /usr/bin/python3 that students can read (pyenv's Python lives under /root, mode 700), and
# with Node.js off PATH (a student's machine need not have it: the wheel carries the built JavaScript).
# The venv is kept while it holds the same wheel (its sha256) and hub version; a new wheel replaces
# only mwnotebook in it. The proxy, configurable-http-proxy, comes from the npm registry.
# Measured (load 7-11): the wheel build 48-120 s every run; a new venv 286 s in all (the build included),
# the venv after a changed wheel 150 s (the build included). The wheel is reproducible (two builds of one
# tree: one sha256), so an unchanged package keeps the venv.
# Root only (the tier makes system users; a non-root run skips it, as tests/remote and tests/slurm).
if [ "$(id -u)" = 0 ]; then
  hub_venv=${MWNOTEBOOK_HUB_VENV:-/opt/mwnotebook-hub/venv}
  hub_wheels=$(mktemp -d)
  python3 -m build --wheel --outdir "$hub_wheels" . >"$hub_wheels/build.log" 2>&1 \
    || { cat "$hub_wheels/build.log" >&2; echo "tools/test.sh: the wheel did not build (above)" >&2; exit 1; }
  wheel=$(ls "$hub_wheels"/mwnotebook-*.whl)
  hub_version=$(python3 -c 'import jupyterhub; print(jupyterhub.__version__)')
  hub_key="$(sha256sum "$wheel" | cut -d' ' -f1) jupyterhub==$hub_version"
  if [ "$(cat "$hub_venv/mwnotebook-wheel.key" 2>/dev/null)" != "$hub_key" ]; then
    rm -f "$hub_venv/mwnotebook-wheel.key"
    [ -x "$hub_venv/bin/python" ] || /usr/bin/python3 -m venv "$hub_venv"
    # PATH is the venv's bin only: no node, no npm during the install
    PATH="$hub_venv/bin" "$hub_venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel"
    PATH="$hub_venv/bin" "$hub_venv/bin/python" -m pip install -q "$wheel[tensorflow-cpu,lab]" "jupyterhub==$hub_version"
    echo "$hub_key" >"$hub_venv/mwnotebook-wheel.key"
  fi
  rm -rf "$hub_wheels"
  export MWNOTEBOOK_HUB_VENV=$hub_venv
  [ "$(configurable-http-proxy --version 2>/dev/null)" = 5.3.0 ] \
    || npm install -g --no-audit --no-fund --loglevel=error configurable-http-proxy@5.3.0
fi
# tests/ray/test_ray_versions.py: a Ray head under another Python minor version than python3's (the
# version-mismatch error against a real cluster). The notebook's Ray version (with its client
# server: ray[client]) goes into a venv of the first other Python found (pyenv's 3.12, 3.13, 3.10,
# then python3.12, python3.13, python3.10 on PATH); once: a venv that already has that Ray is kept.
# Measured: 68 s (venv + pip install of ray[client] for Python 3.12, load 6-8), 7 s after (two Ray imports).
ray_version=$(python3 -c 'import ray; print(ray.__version__)')
other_env=${MWNOTEBOOK_RAY_OTHER_ENV:-$HOME/.cache/mwnotebook/ray-other-python}
if ! "$other_env/bin/python" -c "import grpc, ray, sys; sys.exit(ray.__version__ != '$ray_version')" 2>/dev/null; then
  here=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  pyenv_versions=${PYENV_ROOT:-$HOME/.pyenv}/versions
  other=""
  for py in "$pyenv_versions"/3.12*/bin/python3 "$pyenv_versions"/3.13*/bin/python3 "$pyenv_versions"/3.10*/bin/python3 \
            python3.12 python3.13 python3.10; do
    minor=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
    if [ "$minor" != "$here" ]; then other=$py; break; fi
  done
  if [ -z "$other" ]; then
    echo "tools/test.sh: no Python but $here here: tests/ray/test_ray_versions.py needs another minor version" >&2
    exit 1
  fi
  rm -rf "$other_env"
  "$other" -m venv "$other_env"
  "$other_env/bin/python" -m pip install -q "ray[client]==$ray_version"
fi
export MWNOTEBOOK_RAY_OTHER_PYTHON="$other_env/bin/python"
# tests/ray/test_ray_export.py: `ray job submit` of an exported job needs a head running Ray's dashboard,
# which needs ray[default] (aiohttp_cors, opencensus, ...). Only that test's own cluster runs it: a venv
# that sees this Python's packages (Ray, TensorFlow) and adds ray[default]'s, with a `ray` command of its
# own (the venv has no copy of Ray, so no console script). Measured: 8 s once.
dashboard_env=${MWNOTEBOOK_RAY_DASHBOARD_ENV:-$HOME/.cache/mwnotebook/ray-dashboard}
if ! "$dashboard_env/bin/python" -c "import aiohttp_cors, opencensus, ray, sys; sys.exit(ray.__version__ != '$ray_version')" 2>/dev/null \
    || [ ! -x "$dashboard_env/bin/ray" ]; then
  rm -rf "$dashboard_env"
  python3 -m venv --system-site-packages "$dashboard_env"
  "$dashboard_env/bin/python" -m pip install -q "ray[default]==$ray_version"
  printf '#!/bin/sh\nexec "%s/bin/python" -m ray.scripts.scripts "$@"\n' "$dashboard_env" >"$dashboard_env/bin/ray"
  chmod +x "$dashboard_env/bin/ray"
fi
export MWNOTEBOOK_RAY_DASHBOARD_ENV=$dashboard_env
# Static checks: lint first (under a second), then types (configured in pyproject.toml) while the suite
# runs: from a fresh clone mypy takes ~14 s of one core, and the suite's first minutes are mostly
# waiting on kernels. A type error still fails the run; its report is printed after the suite's.
python3 -m ruff check mwnotebook testbed tests benchmarks tools
types_log=$(mktemp)
python3 -m mypy >"$types_log" 2>&1 &
types_pid=$!
trap 'kill "$types_pid" 2>/dev/null || true; rm -f "$types_log"' EXIT
mkdir -p artifacts
status=0
# Three processes on two cores: most of the suite's time is waiting on kernels, detection windows and
# outages, not computing, and a third process fills waits that two leave idle. A module runs whole on one process; modules that share a session
# fixture or a machine-wide resource run on the same one (tests/_plugins/run_groups.py).
# Groups are handed out in the order tests/conftest.py gives the tests (--no-loadscope-reorder), not
# most tests first (that put the long few-test modules, soaks and lesson notebooks, last, where one
# process ran them alone): the longest measured group first when tests/_plugins/group_durations.json
# holds a measured run, else the suite's order (the many short unit tests last, filling the end).
# Each run writes what it measured per group and per process to artifacts/group_durations.json.
# (pytest-benchmark, where a machine has it, warns under xdist; the suite has no benchmark tests.)
python3 -m pytest -p no:benchmark -n "${MWNOTEBOOK_TEST_PROCESSES:-3}" --dist loadgroup --no-loadscope-reorder -ra --durations=20 "$@" \
  || status=$?
# The docs site (docs/_build/html), after the whole suite (no pytest arguments): its lesson pages are the
# executed copies committed in notebooks/executed/ (python tools/refresh_lessons.py makes them from the
# copies the lesson tests save in artifacts/); a failed lesson, a missing chart picture or a broken
# reference fails the run.
docs=0
if [ "$#" -eq 0 ]; then bash tools/docs.sh --no-execute || docs=$?; fi
if [ "$docs" -ne 0 ]; then
  echo "tools/test.sh: the docs build failed (above)" >&2
  [ "$status" -ne 0 ] || status=$docs
fi
types=0
wait "$types_pid" || types=$?
echo "mypy (types):"
cat "$types_log"
if [ "$types" -ne 0 ]; then
  echo "tools/test.sh: mypy found type errors (above)" >&2
  [ "$status" -ne 0 ] || status=$types
fi
exit "$status"
