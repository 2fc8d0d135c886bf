#!/usr/bin/env bash
# The main job (README "Set-up", step 1): install ncclbench into .venv and run all_reduce.
# With NVIDIA GPUs: the NCCL backend, one process per visible GPU, 8 B to 8 GiB, with
# NCCL's defaults (like a default nccl-tests run: nothing of the user's NCCL_* environment
# is set or changed here).  Without: ncclbench says so and runs the CPU backend (real MPI
# collectives on host memory, 4 processes, 8 B to 64 MiB).  Arguments are passed on
# (`scripts/run-benchmark.sh -e 1G`: later options win, as in nccl-tests).
#
# Installs the runtime extras only: [mpi] (mpi4py and the MPICH wheel, whose mpiexec the CPU
# backend starts), plus [cu13] (or [cu12] for a driver older than R580) where a GPU is seen;
# NCCLBENCH_EXTRAS overrides the choice.  pip runs only when .venv does not already hold this
# checkout with those extras, so a re-run needs no network (an offline cluster node).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if [ -z "${NCCLBENCH_EXTRAS:-}" ]; then
  NCCLBENCH_EXTRAS=mpi
  if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
    if [ "${driver%%.*}" -ge 580 ] 2>/dev/null; then NCCLBENCH_EXTRAS=cu13,mpi; else NCCLBENCH_EXTRAS=cu12,mpi; fi
  fi
fi

# What the installed .venv was made from: this checkout's pyproject.toml and the extras.
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $NCCLBENCH_EXTRAS"
stamp=.venv/.ncclbench-installed
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! .venv/bin/python -c 'import ncclbench' 2>/dev/null; then
  rm -f "$stamp"
  .venv/bin/python -m pip install -q -e ".[$NCCLBENCH_EXTRAS]"
  echo "$want" > "$stamp"
fi

export PATH="$PWD/.venv/bin:$PATH"
if ncclbench list | grep -q "GPUs visible: [1-9]"; then
  exec ncclbench all_reduce_perf -b 8 -e 8G -f 2 "$@"
else
  echo "ncclbench: no NVIDIA GPU here: running the CPU backend (MPI on host memory, 4 processes)" >&2
  exec ncclbench all_reduce_perf -b 8 -e 64M -f 2 --backend mpi --nprocs 4 "$@"
fi
