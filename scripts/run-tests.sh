#!/usr/bin/env bash
# The project's test command (README "Set-up", step 2; CI runs it through .ci/run).
# Creates .venv, installs ncclbench with its test extra (mpi4py + the MPICH wheel,
# libnccl from NVIDIA's wheel for the binding tests, matplotlib), the Debian
# packages some tests drive for real (chromium for the HTML report screenshot,
# iproute2 for network-namespace hosts, slurm-wlm and munge for a one-node Slurm),
# then runs ruff, mypy and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  need=""
  command -v chromium >/dev/null || need="$need chromium"
  command -v ip >/dev/null || need="$need iproute2"
  [ -x /usr/sbin/slurmctld ] || command -v slurmctld >/dev/null || need="$need slurm-wlm"  # tests/test_slurm.py
  [ -x /usr/sbin/munged ] || command -v munged >/dev/null || need="$need munge"
  if [ -n "$need" ]; then
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
  fi
fi
export PATH="$PWD/.venv/bin:$PATH"
# Lint and types first (config in pyproject.toml); a finding fails the run before the tests start.
.venv/bin/ruff check src tests bench
.venv/bin/mypy
exec .venv/bin/python -m pytest -q "$@"
