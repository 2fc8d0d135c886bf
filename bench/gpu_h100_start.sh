#!/usr/bin/env bash
# Device visit of the start runs (2026-11-24), one GPU (nvidia-h100-x1). NVLink SHARP off.
# Usage: bench/gpu_h100_start.sh OUTDIR NCCL_TESTS_BUILD [PHASE]
#   start (default): the GPU tests, where a GPU run's start memory goes step by step
#     (bench/start_memory.py), issue 14's start figures (first row, peak RSS; explain on and off,
#     8 alternating runs with nccl-tests) and the start profile                       (~5 min)
#   final: the GPU tests (not with SKIP_TESTS=1) and all of issue 14's figures at this commit
#     (3 collectives x10, 11 collectives x3, start x RUNS with explain off and the early cuInit
#     off beside the default)                                                          (~6 min)
#   spread: issue 14's spread figure on 30 alternating runs (three blocks of 10) and the start
#     figures with the paired first-row column                                        (~7 min)
#   placement: each CPU in turn, both tools pinned to it (bench/placement_probe.py)    (~3 min)
# The nccl-tests build is not part of this project (built from NVIDIA's repository on the device).
set -u
OUT=$1; NT=$2; PHASE=${3:-start}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src PYTHONUNBUFFERED=1 NCCLBENCH_DB=/tmp/ncclbench-start.sqlite
W=$OUT/w; mkdir -p $W
echo "commit $(python3 bench/provenance.py)"; nvidia-smi -L
python3 -m compileall -q src >/dev/null 2>&1  # as pip install does: no source compiled at start
[ -z "${SKIP_TESTS:-}" ] && NCCL_TESTS_BUILD=$NT timeout 200 python3 -m pytest tests/gpu tests/test_explain_topology.py tests/test_kernel_source.py \
  -v -rfs -p no:cacheprovider > $W/gpu_tests.txt 2>&1
echo "pytest rc=$?"; grep -aE "FAILED|ERROR" $W/gpu_tests.txt | head; tail -2 $W/gpu_tests.txt
START_ARGS="--collectives all_reduce --args '-b 8 -e 1G -f 4' --runs ${RUNS:-8} --variant no-explain:NCCLBENCH_EXPLAIN=0"
# no-warmup: cuInit not started early in a thread (cuda/driver_warmup.py). BYTECODE=1 adds: what
# the start would be where Python's bytecode of the dependencies exists (pip install writes it;
# this image sets PYTHONDONTWRITEBYTECODE=1 and ships cuda.pathfinder and pynvml without it): the
# first run of the variant writes .pyc under /tmp/pyc, the later ones read it.
START_VARIANTS="--variant no-store:NCCLBENCH_NO_STORE=1 --variant no-warmup:NCCLBENCH_DRIVER_WARMUP=0"
[ -n "${BYTECODE:-}" ] && START_VARIANTS="$START_VARIANTS --variant bytecode:PYTHONDONTWRITEBYTECODE=,PYTHONPYCACHEPREFIX=/tmp/pyc"
if [ "$PHASE" = start ]; then
  timeout 120 python3 bench/start_memory.py --repeat 3 --out $W/mem > $W/mem.log 2>&1; echo "mem rc=$?"; cat $W/mem.log
  eval timeout 300 python3 bench/stability.py --nccl-tests-build $NT $START_ARGS $START_VARIANTS --out $W/start 2>$W/start.err
  echo "start rc=$?"; cat $W/start.md 2>/dev/null | head -30
  timeout 60 python3 bench/start_profile.py --runs 5 --top 40 > $W/start_profile.txt 2>&1; head -45 $W/start_profile.txt
  sed -n '/== timeline/,$p' $W/start_profile.txt
  exit 0
fi
# Issue 14's spread figure: all_reduce, reduce_scatter and scatter, $1 alternating runs, into $W/$2.
spread3() {
  python3 bench/stability.py --nccl-tests-build $NT --collectives all_reduce,reduce_scatter,scatter \
    --args "-b 8 -e 64K -f 4" --runs $1 --out $W/$2 2>>$W/stab.err; echo "$2 rc=$?"; cat $W/$2.md
}
# Issue 14's start figures with explain off and the early cuInit off beside the default, into $W/$1.
start_figures() {
  eval python3 bench/stability.py --nccl-tests-build $NT $START_ARGS --variant no-warmup:NCCLBENCH_DRIVER_WARMUP=0 \
    --out $W/$1 2>>$W/stab.err
  cat $W/$1.md
}
if [ "$PHASE" = final ]; then
  ALL=all_reduce,all_gather,broadcast,reduce_scatter,reduce,alltoall,alltoallv,scatter,gather,sendrecv,hypercube
  spread3 10 final-3
  python3 bench/stability.py --nccl-tests-build $NT --collectives $ALL --args "-b 8 -e 128K -f 2" \
    --runs 3 --out $W/final-11 2>>$W/stab.err; echo "final-11 rc=$?"; cat $W/final-11.md
  start_figures final-start
  exit 0
fi
if [ "$PHASE" = spread ]; then
  spread3 ${SPREAD_RUNS:-30} spread-3
  start_figures spread-start
  exit 0
fi
if [ "$PHASE" = placement ]; then
  nproc; lscpu | grep -iE "^CPU\(s\)|Thread|Core|Socket|NUMA|Model name" ; grep -iE "nvidia|CPU0" /proc/interrupts | head -12
  timeout 400 python3 bench/placement_probe.py --nccl-tests-build $NT --rounds ${ROUNDS:-3} --out $W/placement \
    > $W/placement.log 2>&1; echo "placement rc=$?"; cat $W/placement.log
  exit 0
fi
echo "unknown phase $PHASE"; exit 2
