#!/usr/bin/env bash
# Device visit for the recorded GPU figures (NVLS off). Writes tarballs/logs to OUTDIR.
# Usage: bench/gpu_validate.sh PHASE OUTDIR NCCL_TESTS_BUILD
#   PHASE tests:  GPU test suite, copy and enqueue cost per call path, all_reduce -g 4 in one
#                 process 8 B - 1 MiB (both tools)                              (~6 min on 4 H200)
#   PHASE probe:  hypercube's copy made each way (bench/hypercube_copy.py, 4 and 2 GPUs); hypercube
#                 8 B - 4 KiB both tools with -C 0 and -C 1 (time, then enqueue time per op);
#                 all_reduce -g 4 both tools; the GPU tests for -G across GPUs and hypercube's
#                 copy in every layout                                          (~5 min)
#   PHASE hccycles: hypercube 8 B - 64 KiB, both tools, -N 20 cycles per run (per-size medians of 20
#                 samples), 2 runs each, on 4 GPUs then GPUs 0,1              (~2 min)
#   PHASE fixes:  the hypercube runs' fixes on 4 GPUs: hypercube -g 4 both tools (#wrong), -G 5 with -g 4
#                 and -g 2, hypercube_copy.py (the tool's rotated ops), hypercube -N 20 with
#                 -c 0 and -c 1; then the GPU suite (kernels, nccl, multi-GPU) (~9 min)
#   PHASE small:  the 8 B - 64 KiB comparison, eager, $SMALL_REPEATS (3) alternating runs, on 4
#                 GPUs (hypercube also with -G 20), then on GPUs 0,1             (~8 min)
#   PHASE busbw4: busbw >= 64 MiB on 4 GPUs, every collective, $REPEATS (5) runs  (~11 min: split
#                 with COLLS=a,b,... over two calls)
#   PHASE busbw2: the same on GPUs 0,1, $REPEATS (3) runs                        (~7 min)
# (the 2026-11-21 runs before these ran earlier versions: see bench/results/gpu-h200x4-2026-11-21*.md)
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
SMALL="--max 64K --graph 0 --repeats ${SMALL_REPEATS:-3}"
COLLS=${COLLS:-$ALL}
if [ "$PHASE" = tests ]; then
  nvidia-smi topo -m > $OUT/w/topo.txt 2>&1; python3 -m ncclbench list > $OUT/w/list.txt 2>&1; tail -3 $OUT/w/list.txt
  timeout 400 python3 -m pytest tests/gpu -v -rfs --durations=10 -p no:cacheprovider > $OUT/w/gpu_tests.txt 2>&1
  grep -aE "PASSED|FAILED|ERROR|SKIPPED" $OUT/w/gpu_tests.txt | grep -avc PASSED; tail -16 $OUT/w/gpu_tests.txt
  echo "== copy cost per call (1 process; 200 copies of 4 B, under the launch queue's depth)"
  timeout 60 python3 bench/copy_cost.py 200 4 2>&1 | tee $OUT/w/copy_cost.jsonl
  echo "== enqueue cost per call path (4 processes, 2000 ops)"
  for c in ${ENQUEUE:-hypercube alltoallv}; do
    timeout 90 $MPIRUN $FWD -np 4 python3 bench/enqueue_cost.py 2000 $c 2>&1 | grep -avE "^#|^ *$" | tail -6; done
  echo "== one process driving 4 GPUs: all_reduce -b 8 -e 1M -f 2 -g 4 (both tools)"
  timeout 60 $NT/all_reduce_perf -b 8 -e 1M -f 2 -g 4 > $OUT/w/g4.nccl_tests.txt 2>&1; echo nccl-tests rc=$?
  timeout 90 python3 -m ncclbench all_reduce_perf -b 8 -e 1M -f 2 -g 4 > $OUT/w/g4.ncclbench.txt 2>&1; echo ncclbench rc=$?
  for f in g4.nccl_tests g4.ncclbench; do echo "-- $f"
    grep -aE "^ +(8|1024|65536|1048576) |Avg bus|timed loop" $OUT/w/$f.txt | head -8; done
fi
if [ "$PHASE" = probe ]; then
  echo "== hypercube's copy made each way (JSON lines: time, enqueue, GPU time per op)"
  for nb in 64 4096; do
    timeout 60 $MPIRUN $FWD -np 4 python3 bench/hypercube_copy.py 200 $nb 2>&1 | grep -a '^[{(]' | tee -a $OUT/w/hypercube_copy.jsonl; done
  CUDA_VISIBLE_DEVICES=0,1 timeout 60 $MPIRUN $FWD -np 2 python3 bench/hypercube_copy.py 200 64 2>&1 | grep -a '^[{(]' | tee -a $OUT/w/hypercube_copy.jsonl
  echo "== hypercube 8 B - 4 KiB, 4 processes, -C 0 then -C 1 (enqueue time), both tools, twice"
  for rep in 1 2; do for C in 0 1; do
    timeout 40 $MPIRUN $FWD -np 4 $NT/hypercube_perf -b 8 -e 4K -f 8 -C $C > $OUT/w/hc.nt.C$C.$rep.txt 2>&1
    timeout 60 $MPIRUN $FWD -np 4 python3 -m ncclbench hypercube_perf -b 8 -e 4K -f 8 -C $C > $OUT/w/hc.nb.C$C.$rep.txt 2>&1
  done; done
  for f in $OUT/w/hc.*.txt; do echo "-- $(basename $f)"; grep -aE "^ +[0-9]+ " $f | awk '{print $1, $6, $10}' | tr '\n' ';'; echo; done
  echo "== one process driving 4 GPUs: all_reduce -b 8 -e 1M -f 2 -g 4 (both tools)"
  timeout 60 $NT/all_reduce_perf -b 8 -e 1M -f 2 -g 4 > $OUT/w/g4.nccl_tests.txt 2>&1; echo nccl-tests rc=$?
  timeout 90 python3 -m ncclbench all_reduce_perf -b 8 -e 1M -f 2 -g 4 > $OUT/w/g4.ncclbench.txt 2>&1; echo ncclbench rc=$?
  for f in g4.nccl_tests g4.ncclbench; do echo "-- $f"
    grep -aE "^ +(8|1024|65536|1048576) |Avg bus|timed loop" $OUT/w/$f.txt | head -8; done
  timeout ${PROBE_TESTS_S:-200} python3 -m pytest tests/gpu/test_multi_gpu.py -v -rfs -p no:cacheprovider \
     -k "graphs_across_gpus or hypercube_local_copy" > $OUT/w/gpu_tests_probe.txt 2>&1; echo pytest rc=$?
  grep -aE "PASSED|FAILED|ERROR|SKIPPED" $OUT/w/gpu_tests_probe.txt | tail -12; tail -3 $OUT/w/gpu_tests_probe.txt
fi
if [ "$PHASE" = hccycles ]; then
  timeout 150 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 4 --collectives hypercube \
     --max 64K --graph 0 --repeats 2 --extra "-N 20" --out $OUT/w/hc4 2>&1 | grep -a "^hypercube"
  CUDA_VISIBLE_DEVICES=0,1 timeout 120 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 2 \
     --collectives hypercube --max 64K --graph 0 --repeats 2 --extra "-N 20" --out $OUT/w/hc2 2>&1 | grep -a "^hypercube"
fi
if [ "$PHASE" = fixes ]; then
  echo "== hypercube -g 4, one process (#wrong must be 0)"
  timeout 60 $NT/hypercube_perf -b 8 -e 2M -f 8 -g 4 > $OUT/w/hc_g4.nccl_tests.txt 2>&1; echo nccl-tests rc=$?
  timeout 90 python3 -m ncclbench hypercube_perf -b 8 -e 2M -f 8 -g 4 > $OUT/w/hc_g4.ncclbench.txt 2>&1; echo ncclbench rc=$?
  timeout 90 python3 -m ncclbench hypercube_perf -b 8 -e 2M -f 8 -g 4 -G 5 > $OUT/w/hc_g4G.ncclbench.txt 2>&1; echo "ncclbench -G 5 rc=$?"
  for f in hc_g4.nccl_tests hc_g4.ncclbench hc_g4G.ncclbench; do echo "-- $f"; grep -aE "^ +[0-9]+ |Out of bounds" $OUT/w/$f.txt; done
  for g in 2 4; do timeout 90 python3 -m ncclbench all_reduce_perf -b 8 -e 1M -f 32 -G 5 -g $g > $OUT/w/G_g$g.txt 2>&1
    echo "-- all_reduce -G 5 -g $g rc=$?"; grep -aE "^ +[0-9]+ |Out of bounds|failure|error" $OUT/w/G_g$g.txt | head -8; done
  echo "== hypercube_copy.py, 4 processes, 64 B"
  timeout 60 $MPIRUN $FWD -np 4 python3 bench/hypercube_copy.py 200 64 2>&1 | grep -a '^[{(]' | tee $OUT/w/hypercube_copy.jsonl
  echo "== hypercube 8 B - 4 KiB -N 20, 4 processes: nccl-tests, ncclbench -c 1, ncclbench -c 0"
  timeout 60 $MPIRUN $FWD -np 4 $NT/hypercube_perf -b 8 -e 4K -f 8 -N 20 > $OUT/w/hcN.nt.txt 2>&1
  for c in 1 0; do timeout 90 $MPIRUN $FWD -np 4 python3 -m ncclbench hypercube_perf -b 8 -e 4K -f 8 -N 20 -c $c > $OUT/w/hcN.nb.c$c.txt 2>&1; done
  python3 -c "
import sys; sys.path.insert(0, 'bench'); import compare_nccl_tests as c
for f in sys.argv[1:]:
    rows = c.parse_rows(open(f).read())
    print(f.split('/')[-1], ' '.join(f\"{s}:{r['oop_time']:.2f}/{r['ip_time']:.2f}\" for s, r in sorted(rows.items())))
" $OUT/w/hcN.*.txt
  timeout ${SUITE_S:-340} python3 -m pytest tests/gpu/test_kernels_gpu.py tests/gpu/test_nccl_gpu.py tests/gpu/test_multi_gpu.py \
     -v -rfs --durations=8 -p no:cacheprovider > $OUT/w/gpu_tests.txt 2>&1; echo pytest rc=$?
  grep -aE "FAILED|ERROR" $OUT/w/gpu_tests.txt | head -12; tail -12 $OUT/w/gpu_tests.txt
fi
if [ "$PHASE" = small ]; then
  timeout 250 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 4 --collectives $COLLS \
     $SMALL --out $OUT/w/small4 2>&1 | tail -14
  timeout 40 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 4 --collectives hypercube \
     --max 64K --graph-max 64K --out $OUT/w/small4hc 2>&1 | tail -3
  CUDA_VISIBLE_DEVICES=0,1 timeout 230 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 2 \
     --collectives $COLLS $SMALL --out $OUT/w/small2 2>&1 | tail -14
fi
if [ "$PHASE" = busbw4 ]; then
  timeout 570 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 4 --collectives $COLLS \
     --min 64M --graph 0 --repeats ${REPEATS:-5} --out $OUT/w/busbw4 2>&1 | tail -14
fi
if [ "$PHASE" = busbw2 ]; then  # GPUs 0,1 only, nothing else running
  CUDA_VISIBLE_DEVICES=0,1 timeout 570 python3 bench/compare_nccl_tests.py --nccl-tests-build $NT --ngpus 2 \
     --collectives $COLLS --min 64M --graph 0 --repeats ${REPEATS:-3} --out $OUT/w/busbw2 2>&1 | tail -14
fi
tar -C $OUT -czf $OUT/$PHASE.tgz w && rm -rf $OUT/w
