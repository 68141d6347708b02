#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run the whole suite.
# Usage: bash tools/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v chromium >/dev/null || need_apt+=(chromium)
# Node.js and npm build the live chart widget's JavaScript during `pip install` (hatch_build.py)
command -v npm >/dev/null || need_apt+=(nodejs npm)
command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)
command -v ip >/dev/null || need_apt+=(iproute2)
command -v unshare >/dev/null || need_apt+=(util-linux)
# A real Slurm for tests/slurm (munged, slurmctld, slurmd; started by the tests themselves, no systemd)
command -v slurmctld >/dev/null || [ -x /usr/sbin/slurmctld ] || need_apt+=(slurm-wlm)
command -v munged >/dev/null || [ -x /usr/sbin/munged ] || need_apt+=(munge)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}"
  else
    sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}"
  fi
fi

python3 -m pip install -q -e '.[tensorflow-cpu,test]'
# Static checks first (a few seconds): lint, then types (configured in pyproject.toml).
python3 -m ruff check mwnotebook tests benchmarks tools
python3 -m mypy
mkdir -p artifacts
python3 -m pytest -ra --durations=20 "$@"
