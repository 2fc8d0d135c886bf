#!/usr/bin/env bash
# Device visit for the recorded GPU figures (NVLS off). Writes tarballs/logs to OUTDIR.
# Usage: bench/gpu_validate.sh PHASE OUTDIR NCCL_TESTS_BUILD
#   PHASE small: GPU test suite, enqueue cost per call path, the 8 B - 64 KiB comparison
#                (eager and -G 20) on 4 GPUs, then on GPUs 0,1; all_reduce -g 4 in one process
#                (both tools) and ncclbench -t 2 -g 2
#   PHASE 4gpu:  call-path diagnostics (loop_anatomy, enqueue_cost), then the -b 8 -e 8G
#                comparison on 4 GPUs, $REPEATS (2) alternating runs
#   PHASE 2gpu:  the -b 8 -e 8G comparison on GPUs 0,1, then busbw >= 64 MiB with -n 40 on 4 GPUs
#                for the collectives whose large sizes scatter most between runs
# (session 1 ran an earlier version of this script: see bench/results/gpu-h200x4-2026-11-21.md)
# The GPU image has no nccl4py: install its wheel into the python3 that runs ncclbench first
# (`python3 -m pip install --no-deps nccl4py-*.whl`), else the timed loop falls back to ctypes
# (`ncclbench list` prints "timed NCCL calls: ...").
set -u
PHASE=$1; OUT=$2; NT=$3
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 NCCLBENCH_NO_STORE=1 LD_LIBRARY_PATH=/tmp/ncclhome/lib
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
FWD="-x NCCL_NVLS_ENABLE -x PYTHONPATH -x NCCLBENCH_NO_STORE -x PYTHONUNBUFFERED -x LD_LIBRARY_PATH"
ALL=all_reduce,all_gather,broadcast,reduce_scatter,reduce,alltoall,alltoallv,scatter,gather,sendrecv,hypercube
mkdir -p $OUT/w
G4="-b 8 -e 8G -f 2 -g 4"
if [ "$PHASE" = small ]; then
  nvidia-smi topo -m > $OUT/w/topo.txt 2>&1; python3 -m ncclbench list > $OUT/w/list.txt 2>&1; tail -3 $OUT/w/list.txt
  timeout 200 python3 -m pytest tests/gpu -q -p no:cacheprovider > $OUT/w/gpu_tests.txt 2>&1; tail -3 $OUT/w/gpu_tests.txt
  echo "== enqueue cost per call path (4 processes, 2000 ops)"
  for c in ${ENQUEUE:-broadcast sendrecv alltoallv hypercube}; do
    timeout 90 $MPIRUN $FWD -np 4 python3 bench/enqueue_cost.py 2000 $c 2>&1 | grep -avE "^#|^ *$" | tail -6; done
  timeout 200 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 4 --collectives $ALL \
     --max 64K --graph-max 64K --out $OUT/w/small4 2>&1 | tail -14
  CUDA_VISIBLE_DEVICES=0,1 timeout 170 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 2 \
     --collectives $ALL --max 64K --graph-max 64K --out $OUT/w/small2 2>&1 | tail -14
  echo "== one process driving 4 GPUs: all_reduce $G4 (both tools), and ncclbench -t 2 -g 2"
  timeout 60 $NT/all_reduce_perf $G4 > $OUT/w/g4.nccl_tests.txt 2>&1; echo nccl-tests rc=$?
  timeout 90 python3 -m ncclbench all_reduce_perf $G4 > $OUT/w/g4.ncclbench.txt 2>&1; echo ncclbench rc=$?
  timeout 60 python3 -m ncclbench all_reduce_perf -b 8 -e 1G -f 8 -t 2 -g 2 > $OUT/w/t2g2.ncclbench.txt 2>&1; echo t2g2 rc=$?
  for f in g4.nccl_tests g4.ncclbench t2g2.ncclbench; do echo "-- $f"
    grep -aE "^ +(8|1048576|134217728|1073741824|8589934592) |Avg bus|wrong|Rank" $OUT/w/$f.txt | head -14; done
fi
if [ "$PHASE" = 4gpu ]; then  # call-path diagnostics, then the whole sweep, 4 GPUs, $REPEATS times
  python3 -c "import nccl.bindings.nccl as b; print('nccl4py drives', b.get_library_path())" 2>&1 | tail -1
  for c in broadcast sendrecv; do for p in ctypes nccl4py; do
    NCCLBENCH_CALLS=$p timeout 90 $MPIRUN $FWD -x NCCLBENCH_CALLS -np 4 python3 bench/loop_anatomy.py $c 100 2>&1 | tail -10; done; done
  for c in broadcast sendrecv alltoallv; do
    timeout 90 $MPIRUN $FWD -np 4 python3 bench/enqueue_cost.py 2000 $c 2>&1 | grep -avE "^#|^ *$" | tail -6; done
  timeout 560 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 4 --collectives $ALL \
     --graph 0 --repeats ${REPEATS:-2} --out $OUT/w/cmp4 2>&1 | tail -14
fi
if [ "$PHASE" = 2gpu ]; then  # the whole sweep on GPUs 0,1 only (nothing else running), $REPEATS times
  CUDA_VISIBLE_DEVICES=0,1 timeout 330 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 2 \
     --collectives $ALL --graph 0 --repeats ${REPEATS:-2} --out $OUT/w/cmp2 2>&1 | tail -14
  # busbw >= 64 MiB only, longer runs (-n 40), for the collectives whose sizes scatter most run to run
  timeout 240 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 4 \
     --collectives ${NOISY:-alltoall,gather,reduce_scatter,all_gather} --min 64M --graph 0 --extra "-n 40" \
     --repeats 2 --out $OUT/w/busbw4 2>&1 | tail -7
fi
tar -C $OUT -czf $OUT/$PHASE.tgz w && rm -rf $OUT/w
