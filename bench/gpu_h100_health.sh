#!/usr/bin/env bash
# Device visit of the health runs (2026-11-24), one GPU (nvidia-h100-x1). NVLink SHARP off.
# Usage: bench/gpu_h100_health.sh OUTDIR NCCL_TESTS_BUILD [PHASE]   (PHASE all, the default, or v2:
#   v2 - the GPU tests, the start figures with RUNS=8 and the start profile, health_gpu.py;
#   or final: the GPU tests, all of issue 14's figures at this commit (3 collectives x10, 11
#   collectives x3, start x8 with explain on/off), the lone GPU's health figure repeated 6 times
#   at 4M, 64M and 256M, and health_gpu.py with --bw-size 256M)                   (~7 min)
#   or rss: explain's peak memory by part (bench/explain_rss.py), then `ncclbench health` and
#   health_gpu.py at the defaults                                                  (~3 min)
#   1. the GPU test suite (tests/gpu, health's GPU test included) and the topology tests
#   2. issue 14's start figures at this commit, explain on vs off (the topology thread now starts
#      beside NCCL's communicator set-up): all_reduce 8 B - 1 GiB, alternating runs of nccl-tests,
#      ncclbench and ncclbench with NCCLBENCH_EXPLAIN=0 (bench/stability.py)
#   3. issue 15's single-GPU path: `ncclbench health` as a user types it (table, JSON, drain file,
#      stored scan, `ncclbench report` of the scan), then bench/health_gpu.py --ngpus 1 (issue 17's
#      health phase at N=1: healthy scan saving a baseline, a second judged against it, then one
#      with ncclbench's own memory-bound kernel on the GPU; the figure with and without it) (~7 min)
# The nccl-tests build is not part of this project (built from NVIDIA's repository on the device).
set -u
OUT=$1; NT=$2; PHASE=${3:-all}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src PYTHONUNBUFFERED=1 NCCLBENCH_DB=/tmp/ncclbench-health.sqlite
W=$OUT/w; mkdir -p $W
echo "commit $(python3 bench/provenance.py)"; nvidia-smi -L
python3 -m compileall -q src >/dev/null 2>&1  # as pip install does: no source compiled at start
NCCL_TESTS_BUILD=$NT timeout 200 python3 -m pytest tests/gpu tests/test_explain_topology.py -v -rfs -p no:cacheprovider \
  > $W/gpu_tests.txt 2>&1
echo "pytest rc=$?"; grep -aE "FAILED|ERROR" $W/gpu_tests.txt | head; tail -2 $W/gpu_tests.txt
if [ "$PHASE" = rss ]; then
  timeout 200 python3 bench/explain_rss.py --runs 5 --out $W/rss > $W/rss.log 2>&1; echo "rss rc=$?"; cat $W/rss.log
  timeout 60 python3 -m ncclbench health > $W/health.txt 2>&1; echo "health rc=$?"; cat $W/health.txt
  timeout 200 python3 bench/health_gpu.py --ngpus 1 --out $W/health_gpu --scan-timeout 30 > $W/health_gpu.log 2>&1
  echo "health_gpu rc=$?"; head -30 $W/health_gpu/health_gpu.md
  exit 0
fi
if [ "$PHASE" = final ]; then
  ALL=all_reduce,all_gather,broadcast,reduce_scatter,reduce,alltoall,alltoallv,scatter,gather,sendrecv,hypercube
  python3 bench/stability.py --nccl-tests-build $NT --collectives all_reduce,reduce_scatter,scatter \
    --args "-b 8 -e 64K -f 4" --runs 10 --out $W/final-3 2>>$W/stab.err; echo "final-3 rc=$?"; cat $W/final-3.md
  python3 bench/stability.py --nccl-tests-build $NT --collectives $ALL --args "-b 8 -e 128K -f 2" \
    --runs 3 --out $W/final-11 2>>$W/stab.err; echo "final-11 rc=$?"; cat $W/final-11.md
  python3 bench/stability.py --nccl-tests-build $NT --collectives all_reduce --args "-b 8 -e 1G -f 4" \
    --runs 8 --variant no-explain:NCCLBENCH_EXPLAIN=0 --out $W/final-start 2>>$W/stab.err; cat $W/final-start.md
  for s in 4M 64M 256M; do for i in 1 2 3 4 5 6; do
    timeout 60 python3 -m ncclbench health --phases local --bw-size $s --no-store --json $W/local-$s-$i.json > /dev/null 2>&1
  done; done
  python3 - $W > $W/local-repeat.md <<'PY'
import json, statistics, sys, glob
print("| --bw-size | local figure per scan, GB/s | median | (max-min)/median |"); print("|---|---|---:|---:|")
for s in ("4M", "64M", "256M"):
    v = []
    for f in sorted(glob.glob(f"{sys.argv[1]}/local-{s}-*.json")):
        d = json.load(open(f))
        v += [g["busbw"] for m in d["measurements"] if m.get("round") == "local r1" for g in m["groups"] if g.get("busbw")]
    if v:
        med = statistics.median(v)
        print(f"| {s} | {', '.join(f'{x:.1f}' for x in v)} | {med:.1f} | {(max(v) - min(v)) / med:.1%} |")
PY
  cat $W/local-repeat.md; rm -f $W/local-*-*.json
  timeout 200 python3 bench/health_gpu.py --ngpus 1 --out $W/health_gpu_256M --scan-timeout 30 --scan-args "--bw-size 256M" \
    > $W/health_gpu_256M.log 2>&1; echo "health_gpu 256M rc=$?"; head -30 $W/health_gpu_256M/health_gpu.md
  exit 0
fi
if [ "$PHASE" = v2 ]; then
  timeout 300 python3 bench/stability.py --nccl-tests-build $NT --collectives all_reduce --args "-b 8 -e 1G -f 4" \
    --runs ${RUNS:-8} --variant no-explain:NCCLBENCH_EXPLAIN=0 --out $W/start 2>$W/start.err
  echo "start rc=$?"; cat $W/start.md 2>/dev/null | head -30
  timeout 60 python3 bench/start_profile.py --runs 5 --top 30 > $W/start_profile.txt 2>&1; head -32 $W/start_profile.txt
  timeout 200 python3 bench/health_gpu.py --ngpus 1 --out $W/health_gpu --scan-timeout 30 > $W/health_gpu.log 2>&1
  echo "health_gpu rc=$?"; cat $W/health_gpu/health_gpu.md 2>/dev/null | head -30
  exit 0
fi
timeout 240 python3 bench/stability.py --nccl-tests-build $NT --collectives all_reduce --args "-b 8 -e 1G -f 4" \
  --runs ${RUNS:-5} --variant no-explain:NCCLBENCH_EXPLAIN=0 --out $W/start 2>$W/start.err
echo "start rc=$?"; cat $W/start.md 2>/dev/null | head -30
timeout 120 python3 -m ncclbench health --json $W/health.json --drain $W/drain.txt > $W/health.txt 2>&1
echo "health rc=$?"; cat $W/health.txt; echo "drain: $(cat $W/drain.txt 2>/dev/null | wc -l) lines"
timeout 30 python3 -m ncclbench history --health > $W/history.txt 2>&1; echo "history rc=$?"; tail -3 $W/history.txt
timeout 60 python3 -m ncclbench report health:latest -o $W/health-report.html > $W/report.txt 2>&1; echo "report rc=$?"
timeout 150 python3 bench/health_gpu.py --ngpus 1 --out $W/health_gpu --scan-timeout 30 > $W/health_gpu.log 2>&1
echo "health_gpu rc=$?"; tail -25 $W/health_gpu.log; cat $W/health_gpu/health_gpu.md 2>/dev/null | head -40
