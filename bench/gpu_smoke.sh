#!/usr/bin/env bash
# One device visit: GPU tests, the launch variants and a short nccl-tests comparison.
# Usage: bench/gpu_smoke.sh OUTDIR NCCL_TESTS_BUILD_DIR   (NVLS stays off)
set -u
OUT=$1; NT=${2:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 NCCLBENCH_NO_STORE=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x PYTHONPATH -x NCCLBENCH_NO_STORE -x PYTHONUNBUFFERED"
mkdir -p $OUT/logs; L=$OUT/logs
nvidia-smi topo -m > $L/topo.txt 2>&1
python3 -m ncclbench list > $L/list.txt 2>&1
echo "== gpu tests"; timeout 300 python3 -m pytest tests/gpu -q -x -p no:cacheprovider > $L/gpu_tests.txt 2>&1; tail -3 $L/gpu_tests.txt
NG=$(nvidia-smi -L | wc -l)
echo "== self-launch ($NG GPUs)"; timeout 120 python3 -m ncclbench all_reduce_perf -b 8 -e 1G -f 4 > $L/self.txt 2>&1; echo rc=$?; tail -22 $L/self.txt
echo "== mpirun -np $NG"; timeout 120 $MPI -np $NG python3 -m ncclbench all_reduce_perf -b 8 -e 1G -f 4 > $L/mpirun.txt 2>&1; echo rc=$?; grep -E "^ +(8|1073741824) |Out of|Avg" $L/mpirun.txt
echo "== torchrun-style env"; for r in $(seq 0 $((NG-1))); do RANK=$r WORLD_SIZE=$NG LOCAL_RANK=$r LOCAL_WORLD_SIZE=$NG MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 timeout 120 python3 -m ncclbench all_reduce_perf -b 8 -e 1G -f 4 > $L/torchrun.$r.txt 2>&1 & done; wait; grep -E "^ +(8|1073741824) |Out of|Avg" $L/torchrun.0.txt
echo "== -g $NG one process"; timeout 120 python3 -m ncclbench all_reduce_perf -b 8 -e 256M -f 8 -g $NG > $L/g.txt 2>&1; echo rc=$?; grep -E "Out of|Avg|rror" $L/g.txt
if [ -n "$NT" ] && [ -x "$NT/all_reduce_perf" ]; then
  echo "== compare"; timeout 400 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus $NG --collectives all_reduce,alltoall,broadcast --max 1G --graph-max 64K --out $L/cmp 2>&1 | tail -8
fi
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $OUT/logs
