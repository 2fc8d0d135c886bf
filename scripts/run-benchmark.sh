#!/usr/bin/env bash
# The main job (README "Set-up", step 1): install ncclbench and run all_reduce.
# With NVIDIA GPUs: the NCCL backend, one process per visible GPU, 8 B to 8 GiB.
# Without: ncclbench says so and runs the CPU backend (real MPI collectives on
# host memory, 4 processes, 8 B to 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
.venv/bin/python -m pip install -q -e '.[cu13,mpi,test]'
export PATH="$PWD/.venv/bin:$PATH" NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
if ncclbench list | grep -q "GPUs visible: [1-9]"; then
  exec ncclbench all_reduce_perf -b 8 -e 8G -f 2 "$@"
else
  echo "ncclbench: no NVIDIA GPU here: running the CPU backend (MPI on host memory, 4 processes)" >&2
  exec ncclbench all_reduce_perf -b 8 -e 64M -f 2 --backend mpi --nprocs 4 "$@"
fi
