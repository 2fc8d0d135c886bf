#!/usr/bin/env bash
# Device visit for the recorded GPU figures (NVLS off). Writes tarballs/logs to OUTDIR.
# Usage: bench/gpu_validate.sh PHASE OUTDIR NCCL_TESTS_BUILD
#   PHASE 4gpu: GPU test suite, then the nccl-tests comparison on all GPUs, all collectives
#   PHASE 2gpu: the comparison on GPU pairs {0,1} and {2,3} in parallel (collectives split),
#               the every-datatype/op check, and the three launch variants
set -u
PHASE=$1; OUT=$2; NT=$3
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 NCCLBENCH_NO_STORE=1 LD_LIBRARY_PATH=/tmp/ncclhome/lib
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
FWD="-x NCCL_NVLS_ENABLE -x PYTHONPATH -x NCCLBENCH_NO_STORE -x PYTHONUNBUFFERED -x LD_LIBRARY_PATH"
ALL=all_reduce,all_gather,broadcast,reduce_scatter,reduce,alltoall,alltoallv,scatter,gather,sendrecv,hypercube
mkdir -p $OUT/w
if [ "$PHASE" = 4gpu ]; then
  nvidia-smi topo -m > $OUT/w/topo.txt 2>&1; python3 -m ncclbench list > $OUT/w/list.txt 2>&1; tail -3 $OUT/w/list.txt
  timeout 150 python3 -m pytest tests/gpu -q -x -p no:cacheprovider > $OUT/w/gpu_tests.txt 2>&1; tail -3 $OUT/w/gpu_tests.txt
  timeout 430 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 4 --collectives $ALL \
     --graph-max 64K --out $OUT/w/cmp4 2>&1 | tail -16
fi
if [ "$PHASE" = 2gpu ]; then
  echo "== enqueue cost, 2 and 4 processes"
  timeout 60 $MPIRUN $FWD -np 2 python3 bench/enqueue_cost.py 2000 2>&1 | tail -3
  timeout 60 $MPIRUN $FWD -np 4 python3 bench/enqueue_cost.py 2000 2>&1 | tail -3
  A=all_reduce,all_gather,broadcast,reduce_scatter,reduce,alltoall; B=alltoallv,scatter,gather,sendrecv,hypercube
  CUDA_VISIBLE_DEVICES=0,1 timeout 300 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 2 \
     --collectives $A --graph-max 64K --out $OUT/w/cmp2a > $OUT/w/cmp2a.log 2>&1 &
  CUDA_VISIBLE_DEVICES=2,3 timeout 300 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 2 \
     --collectives $B --graph-max 64K --out $OUT/w/cmp2b > $OUT/w/cmp2b.log 2>&1 &
  wait; tail -8 $OUT/w/cmp2a.log; tail -7 $OUT/w/cmp2b.log
  timeout 200 python3 bench/check_all_types.py --launcher "$MPIRUN $FWD -np 4" --out $OUT/w/types 2>&1 | tail -12
  echo "== launch variants (all_reduce 8 B - 1 GiB, 4 GPUs)"
  timeout 90 python3 -m ncclbench all_reduce_perf -b 8 -e 1G -f 8 > $OUT/w/launch_self.txt 2>&1; echo self rc=$?
  timeout 90 $MPIRUN $FWD -np 4 python3 -m ncclbench all_reduce_perf -b 8 -e 1G -f 8 > $OUT/w/launch_mpirun.txt 2>&1; echo mpirun rc=$?
  for r in 0 1 2 3; do RANK=$r WORLD_SIZE=4 LOCAL_RANK=$r LOCAL_WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 \
     timeout 90 python3 -m ncclbench all_reduce_perf -b 8 -e 1G -f 8 > $OUT/w/launch_torchrun.$r.txt 2>&1 & done; wait
  for f in self mpirun torchrun.0; do echo "-- $f"; grep -aE "^ +(8|1073741824) |Out of|ncclbench|Rank  0" $OUT/w/launch_$f.txt; done
fi
if [ "$PHASE" = small ]; then
  timeout 60 $MPIRUN $FWD -np 4 python3 bench/enqueue_cost.py 2000 2>&1 | tail -3
  A=all_reduce,all_gather,broadcast,reduce_scatter,reduce,alltoall; B=alltoallv,scatter,gather,sendrecv,hypercube
  timeout 240 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 4 --collectives $ALL \
     --max 64K --graph-max 64K --out $OUT/w/small4 2>&1 | tail -14
  CUDA_VISIBLE_DEVICES=0,1 timeout 150 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 2 \
     --collectives $A --max 64K --graph-max 64K --out $OUT/w/small2a > $OUT/w/small2a.log 2>&1 &
  CUDA_VISIBLE_DEVICES=2,3 timeout 150 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 2 \
     --collectives $B --max 64K --graph-max 64K --out $OUT/w/small2b > $OUT/w/small2b.log 2>&1 &
  wait; tail -8 $OUT/w/small2a.log; tail -7 $OUT/w/small2b.log
fi
tar -C $OUT -czf $OUT/$PHASE.tgz w && rm -rf $OUT/w
