#!/usr/bin/env bash
# Device visits of the stability runs (2026-11-24), one GPU (nvidia-h100-x1). NVLink SHARP off.
# Usage: bench/gpu_h100_stability.sh PHASE OUTDIR NCCL_TESTS_BUILD
#   facts:     what the machine is: nvidia-smi (-q, topo -m, nvlink -s), NVML fields, sysfs NICs,
#              CPU/NUMA/frequency settings; NCCL INFO logs of both tools at one rank (fixtures for
#              the explain log parser and the importer: ALL subsystems to a file, INIT+TUNING+COLL
#              interleaved with the table, NCCL_ALGO/PROTO forced)                    (~40 s)
#   stability: issue 14 diagnosis at the commit it runs: alternating runs of both tools, the
#              NO_STORE variant, pinned to the GPU's NUMA-local cores; all 11 collectives'
#              small-message time; start time and RSS of an 8 B - 1 GiB sweep         (~6 min)
#   after:     the GPU test suite (NCCL_TESTS_BUILD set: the clamp test compares rows with nccl-tests);
#              alternating runs of nccl-tests, ncclbench (C timed loop), ncclbench with
#              NCCLBENCH_NATIVE=0 (the Python loop) and the tree in $BEFORE (the commit before the
#              run plan, for issue 12's "same rows and timings"): 3 collectives 8 B - 64 KiB x10,
#              11 collectives 8 B - 128 KiB x3, 3 collectives 64 MiB - 1 GiB x3; start profile;
#              the explain routes check (profiler plugin loads at one rank)             (~9 min)
#   final:     issue 14's figures at the commit it runs, SM clock and pstate logged every 100 ms
#              beside them (nvidia-smi, read only): 3 collectives 8 B - 64 KiB x10, 11 collectives
#              8 B - 128 KiB x3, 8 B - 1 GiB x5 (start, RSS), start profile; GPU tests and the
#              topology facts against nvidia-smi                                      (~6 min)
#   explain:   issue 18 on one GPU: the GPU tests (facts vs nvidia-smi, a judged run's lines, the
#              profiler plugin), `ncclbench topo`, one judged all_reduce 8 B - 1 GiB to read by eye,
#              and bench/explain_gpu.py (explain on vs off, alternating runs)          (~7 min)
# The nccl-tests build is not part of this project (built from NVIDIA's repository on the device).
set -u
PHASE=$1; OUT=$2; NT=$3
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src PYTHONUNBUFFERED=1 NCCLBENCH_DB=/tmp/ncclbench-stability.sqlite
W=$OUT/w; mkdir -p $W
ALL=all_reduce,all_gather,broadcast,reduce_scatter,reduce,alltoall,alltoallv,scatter,gather,sendrecv,hypercube
if [ "$PHASE" = facts ]; then
  nvidia-smi > $W/nvidia-smi.txt 2>&1; nvidia-smi -q > $W/nvidia-smi-q.txt 2>&1
  nvidia-smi topo -m > $W/topo-m.txt 2>&1; nvidia-smi nvlink -s > $W/nvlink-s.txt 2>&1
  nvidia-smi nvlink -c > $W/nvlink-c.txt 2>&1
  python3 bench/nvml_dump.py > $W/nvml.json 2>&1; head -c 1500 $W/nvml.json; echo
  { for d in /sys/class/infiniband/*/ports/*; do echo "$d: $(cat $d/rate $d/state $d/link_layer 2>&1 | tr '\n' '|')"; done
    for n in /sys/class/net/*; do echo "$n: speed=$(cat $n/speed 2>&1) oper=$(cat $n/operstate 2>&1) dev=$(readlink -f $n/device 2>&1)"; done
    lsmod 2>&1 | grep -E "nvidia|peermem|ib_|mlx" ; ls /sys/kernel/mm/memory_peers 2>&1
    lscpu; cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>&1
    ls /sys/devices/system/cpu/cpu0/cpuidle 2>&1; cat /proc/cmdline; nproc; free -g
    for b in $(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader); do
      b=$(echo $b | tr 'A-F' 'a-f' | sed 's/^0000\(....\)/\1/'); echo "gpu $b local_cpulist=$(cat /sys/bus/pci/devices/$b/local_cpulist 2>&1) numa=$(cat /sys/bus/pci/devices/$b/numa_node 2>&1)"; done
  } > $W/host.txt 2>&1; tail -5 $W/host.txt
  python3 -m ncclbench list > $W/list.txt 2>&1; python3 -m ncclbench --version >> $W/list.txt 2>&1; cat $W/list.txt
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALL NCCL_DEBUG_FILE=$W/nccl-all.%h.%p.log \
    python3 -m ncclbench all_reduce_perf -b 8 -e 1M -f 4 > $W/ncclbench-all.txt 2>&1
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING,COLL $NT/all_reduce_perf -b 8 -e 1M -f 4 > $W/nt-interleaved.txt 2>&1
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_P2P_DISABLE=1 \
    $NT/all_reduce_perf -b 8 -e 64K -f 8 > $W/nt-forced.txt 2>&1
  NCCL_DEBUG=INFO $NT/reduce_scatter_perf -b 8 -e 1M -f 4 > $W/nt-info-rs.txt 2>&1
  wc -l $W/*.log $W/nt-*.txt
fi
if [ "$PHASE" = stability ]; then
  B=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr 'A-F' 'a-f' | sed 's/^0000\(....\)/\1/')
  CPUS=$(cat /sys/bus/pci/devices/$B/local_cpulist 2>/dev/null || echo 0-$(($(nproc)-1)))
  echo "GPU $B local cpus $CPUS"
  python3 bench/stability.py --nccl-tests-build $NT --collectives all_reduce,reduce_scatter,scatter \
    --args "-b 8 -e 64K -f 4" --runs ${RUNS:-12} --variant nostore:NCCLBENCH_NO_STORE=1 --out $W/stab-3 2>>$W/stab.err
  python3 bench/stability.py --nccl-tests-build $NT --collectives all_reduce,reduce_scatter,scatter \
    --args "-b 8 -e 64K -f 4" --runs ${RUNS:-12} --wrap "taskset -c $CPUS" --out $W/stab-3-pinned 2>>$W/stab.err
  python3 bench/stability.py --nccl-tests-build $NT --collectives $ALL --args "-b 8 -e 128K -f 2" \
    --runs 3 --out $W/stab-11 2>>$W/stab.err
  python3 bench/stability.py --nccl-tests-build $NT --collectives all_reduce --args "-b 8 -e 1G -f 4" \
    --runs 5 --out $W/stab-start 2>>$W/stab.err
fi
if [ "$PHASE" = after ]; then
  NB="--variant python-loop:NCCLBENCH_NATIVE=0"
  [ -n "${BEFORE:-}" ] && NB="$NB --variant before:PYTHONPATH=$BEFORE/src:${SITE:-/tmp/site}"
  NCCL_TESTS_BUILD=$NT timeout 170 python3 -m pytest tests/gpu -v -rfs -p no:cacheprovider > $W/gpu_tests.txt 2>&1
  echo "pytest rc=$?"; grep -aE "PASSED|FAILED|ERROR|SKIPPED" $W/gpu_tests.txt | grep -av PASSED | head -20; tail -3 $W/gpu_tests.txt
  python3 bench/stability.py --nccl-tests-build $NT --collectives all_reduce,reduce_scatter,scatter \
    --args "-b 8 -e 64K -f 4" --runs ${RUNS:-10} $NB --out $W/after-3 2>>$W/stab.err
  python3 bench/stability.py --nccl-tests-build $NT --collectives $ALL --args "-b 8 -e 128K -f 2" \
    --runs 3 $NB --out $W/after-11 2>>$W/stab.err
  python3 bench/stability.py --nccl-tests-build $NT --collectives all_reduce,all_gather,alltoall \
    --args "-b 64M -e 1G -f 2" --runs 3 $NB --out $W/after-large 2>>$W/stab.err
  timeout 60 python3 bench/start_profile.py --runs 5 --top 30 > $W/start_profile.txt 2>&1; tail -3 $W/start_profile.txt
  timeout 60 python3 bench/explain_routes_gpu.py --out $W/routes > $W/routes.txt 2>&1; tail -5 $W/routes.txt
fi
if [ "$PHASE" = final ]; then
  python3 -m compileall -q src >/dev/null 2>&1  # as pip install does: no source compiled at start
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,pstate,power.draw --format=csv -lms 100 > $W/clocks.csv 2>&1 &
  CLK=$!
  python3 bench/stability.py --nccl-tests-build $NT --collectives all_reduce,reduce_scatter,scatter \
    --args "-b 8 -e 64K -f 4" --runs ${RUNS:-10} --out $W/final-3 2>>$W/stab.err
  python3 bench/stability.py --nccl-tests-build $NT --collectives $ALL --args "-b 8 -e 128K -f 2" \
    --runs 3 --out $W/final-11 2>>$W/stab.err
  python3 bench/stability.py --nccl-tests-build $NT --collectives all_reduce --args "-b 8 -e 1G -f 4" \
    --runs 5 --variant no-explain:NCCLBENCH_EXPLAIN=0 --out $W/final-start 2>>$W/stab.err
  kill $CLK
  timeout 60 python3 bench/start_profile.py --runs 5 --top 30 > $W/start_profile.txt 2>&1; tail -2 $W/start_profile.txt
  NCCL_TESTS_BUILD=$NT timeout 120 python3 -m pytest tests/gpu tests/test_explain_topology.py -v -rfs -p no:cacheprovider > $W/gpu_tests.txt 2>&1
  echo "pytest rc=$?"; grep -aE "FAILED|ERROR" $W/gpu_tests.txt | head; tail -2 $W/gpu_tests.txt
fi
if [ "$PHASE" = explain ]; then
  python3 -m compileall -q src >/dev/null 2>&1
  NCCL_TESTS_BUILD=$NT timeout 150 python3 -m pytest tests/gpu tests/test_explain_topology.py -v -rfs -p no:cacheprovider > $W/gpu_tests.txt 2>&1
  echo "pytest rc=$?"; grep -aE "FAILED|ERROR" $W/gpu_tests.txt | head; tail -2 $W/gpu_tests.txt
  nvidia-smi --query-gpu=name,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current --format=csv > $W/smi.csv 2>&1
  timeout 60 python3 -m ncclbench topo > $W/topo.txt 2>&1; echo "topo rc=$?"; cat $W/topo.txt
  timeout 120 python3 -m ncclbench all_reduce_perf -b 8 -e 1G -f 4 -J $W/judged.json > $W/judged.txt 2>&1; echo "run rc=$?"
  grep -v "^ *[0-9]" $W/judged.txt | tail -25
  timeout 330 python3 bench/explain_gpu.py --ngpus 1 --runs ${RUNS:-8} --out $W/explain_gpu > $W/explain_gpu.log 2>&1
  echo "explain_gpu rc=$?"; cat $W/explain_gpu/explain_gpu.md 2>/dev/null | head -40
fi
