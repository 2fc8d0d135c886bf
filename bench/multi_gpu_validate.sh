#!/usr/bin/env bash
# Issue 17: multi-GPU validation of explain, health and tune, and parity after the refactor and the
# stability work -- on however many GPUs the machine has (passes on one; the checks that need two
# or more say so). NVLink SHARP stays off. Every phase writes under OUTDIR and fits one 10-minute
# device call on 4-8 GPUs; run the phases as separate calls.
#
# Usage: bench/multi_gpu_validate.sh PHASE NGPUS OUTDIR NCCL_TESTS_BUILD
#   explain  routes (profiler plugin and NCCL's log) agree per size (bench/explain_routes_gpu.py);
#            topology facts vs nvidia-smi / topo -m / nvlink -s (tests/gpu/test_explain_gpu.py);
#            every collective -b 8 -e 8G -f 4 judged, its lines kept for a person to read; explain on
#            vs off alternating (bench/explain_gpu.py)
#   health   a healthy scan of the host's GPUs, then one GPU slowed by ncclbench's own memory-bound
#            kernel (bench/gpu_hog.py via bench/health_gpu.py): the scan must name that GPU alone
#   tune     all_reduce and all_gather 8 B - 1 GiB with --verify (gains claimed and confirmed, or
#            NCCL's default best)
#   parity   all eleven collectives 8 B - 8 GiB, separate alternating runs of both tools
#            (bench/compare_nccl_tests.py --repeats R); the spread figures of issue 14
#            (bench/stability.py under mpirun); with 8 GPUs also -g 8 in one process
# The nccl-tests build is not part of this project: build it (MPI=1) from NVIDIA's repository.
set -u
PHASE=$1; N=$2; OUT=$3; NT=$4
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src PYTHONUNBUFFERED=1 NCCLBENCH_DB=${NCCLBENCH_DB:-/tmp/ncclbench-validate.sqlite}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x PYTHONPATH -x NCCLBENCH_DB -x PYTHONUNBUFFERED -x LD_LIBRARY_PATH"
ALL=all_reduce,all_gather,broadcast,reduce_scatter,reduce,alltoall,alltoallv,scatter,gather,sendrecv,hypercube
W=$OUT/w; mkdir -p $W
echo "phase $PHASE on $N GPU(s); commit $(python3 bench/provenance.py)"
nvidia-smi -L > $W/gpus.txt 2>&1; nvidia-smi topo -m > $W/topo-m.txt 2>&1; nvidia-smi nvlink -s > $W/nvlink-s.txt 2>&1
if [ "$PHASE" = explain ]; then
  timeout 120 python3 bench/explain_routes_gpu.py --ngpus $N --out $W/routes > $W/routes.txt 2>&1
  echo "routes rc=$?"; tail -2 $W/routes.txt
  timeout 150 python3 -m pytest tests/gpu/test_explain_gpu.py tests/test_explain_topology.py -q -rfs -p no:cacheprovider \
    > $W/explain_tests.txt 2>&1; echo "explain tests rc=$?"; tail -2 $W/explain_tests.txt
  for c in ${COLLS:-$(echo $ALL | tr , ' ')}; do
    timeout 150 python3 -m ncclbench ${c}_perf -b 8 -e ${MAXB:-8G} -f 4 -J $W/judged-$c.json > $W/judged-$c.txt 2>&1
    echo "$c rc=$? $(grep -a '^# Plateau' $W/judged-$c.txt | head -1)"; done
  timeout 300 python3 bench/explain_gpu.py --ngpus $N --runs ${RUNS:-6} --out $W/explain_gpu > $W/explain_gpu.log 2>&1
  echo "explain_gpu rc=$?"
fi
if [ "$PHASE" = health ]; then
  timeout 500 python3 bench/health_gpu.py --ngpus $N --out $W/health > $W/health.log 2>&1
  echo "health rc=$?"; tail -15 $W/health.log
fi
if [ "$PHASE" = tune ]; then
  for c in all_reduce all_gather; do
    timeout 280 python3 -m ncclbench tune $c -b 8 -e ${MAXB:-1G} -f 4 --verify --out $W/tune-$c > $W/tune-$c.txt 2>&1
    echo "tune $c rc=$?"; tail -12 $W/tune-$c.txt; done
fi
if [ "$PHASE" = parity ]; then
  timeout 480 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus $N --collectives ${COLLS:-$ALL} \
    --min 8 --max ${MAXB:-8G} --graph 0 --repeats ${REPEATS:-2} --mpirun "$MPIRUN" --out $W/parity > $W/parity.log 2>&1
  echo "parity rc=$?"; tail -15 $W/parity.log
  L=(); [ "$N" -gt 1 ] && L=(--launcher "$MPIRUN -np $N")
  timeout 300 python3 bench/stability.py --nccl-tests-build $NT --collectives all_reduce,reduce_scatter,scatter \
    --args "-b 8 -e 64K -f 4" --runs ${RUNS:-10} "${L[@]}" --out $W/stability > $W/stability.log 2>&1
  echo "stability rc=$?"; cat $W/stability.md 2>/dev/null
  if [ "$N" -ge 8 ]; then
    timeout 120 $NT/all_reduce_perf -b 8 -e 1G -f 4 -g 8 > $W/g8.nccl_tests.txt 2>&1; echo "nccl-tests -g 8 rc=$?"
    timeout 180 python3 -m ncclbench all_reduce_perf -b 8 -e 1G -f 4 -g 8 > $W/g8.ncclbench.txt 2>&1; echo "ncclbench -g 8 rc=$?"
  fi
fi
