#!/usr/bin/env bash
# GPU figures on a 2-GPU machine (nvidia-h100-x2 / nvidia-h200-x2), one device call of at most
# 600 s per invocation.  Run from the repo root:
#
#   bench/gpu_2gpu.sh OUT STEP [STEP ...]
#
# STEP is one of (each under `timeout` with its own budget, overridable from the environment):
#   explain    issue 30: bench/explain_curve_gpu.py (11 collectives healthy, cut at -e 32M..8G, and
#              the injected causes); EXPLAIN_S (330), EXPLAIN_ARGS (more options: --steps, --nccl-tests DIR)
#   gate       issue 31: bench/gate_trials.py gpu --ngpus 2 (calibrated injections, 20 trials);
#              GATE_S (560), the script's own --budget-s is GATE_S - 40
#   gate_latency  issue 31 item 3: bench/gate_trials.py gpu --ngpus GATE_NGPUS (2) --only latency (the +30 % latency case
#              and its control, every run measured with --gate, 20 trials); GATE_LATENCY_S (260), the
#              script's own --budget-s is GATE_LATENCY_S - 30; GATE_LATENCY_ARGS: more of its options
#              (--gate-rounds 10 --hog-all-cores)
#   gate_bind  issue 31 item 3: bench/gate_rounds_ab.py, the gated latency figure's run-to-run spread with the
#              ranks unbound, bound to their GPU's NUMA-local cores, or their launching thread to one core
#              (--cpu-bind none|numa|core, alternating); GATE_BIND_S (120), GATE_BIND_RUNS (6),
#              GATE_BIND_ROUNDS (5), GATE_BIND_MODES ("unbound,bind numa,bind core")
#   health     issue 29: bench/health_fleet_gpu.py over fake hosts (needs .gpuwork/ipr, made by
#              bench/fetch_iproute2.sh); HEALTH_S (430); HEALTH_CASES picks cases (its --cases)
#   gpu_tests  pytest tests/gpu with the time left (the log says how far it got)
# Each step writes OUT/<step>/ (its output in OUT/<step>/log.txt) and appends
# "step rc seconds [note]" to OUT/summary.txt at once, so a cut loses nothing already measured.
# A step starts only while the total (GPU_TOTAL_S, 560 s) leaves it STEP_MIN_S (60 s).
# GPU_DRY=1 echoes each command instead (control flow on a CPU machine).
# The commit recorded is bench/provenance.py's (NCCLBENCH_COMMIT, else the COMMIT file, else git).
# NVLink SHARP stays off on the lent machines: the variables below are this script's, never the
# product's (ncclbench leaves users' NCCL settings alone).
set -u
OUT=${1:?usage: bench/gpu_2gpu.sh OUT STEP [STEP ...]}
shift
TOTAL_S=${GPU_TOTAL_S:-560}
STEP_MIN_S=${STEP_MIN_S:-60}
KILL_GRACE_S=${KILL_GRACE_S:-10}
EXPLAIN_S=${EXPLAIN_S:-330}
GATE_S=${GATE_S:-560}
GATE_LATENCY_S=${GATE_LATENCY_S:-260}
HEALTH_S=${HEALTH_S:-430}
GATE_BIND_S=${GATE_BIND_S:-120}
DRY=${GPU_DRY:-}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.txt
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
dbdir=$(mktemp -d)
trap 'rm -rf "$dbdir"' EXIT
export NCCLBENCH_DB=$dbdir/r.sqlite
PY=${PYTHON:-python3}
COMMIT=$("$PY" bench/provenance.py)
START=$SECONDS

left() { echo $(( TOTAL_S - (SECONDS - START) )); }
say() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME BUDGET CMD...: run CMD in OUT/NAME under min(BUDGET, time left), or skip it.
step() {
  local name=$1 budget=$2; shift 2
  local l; l=$(left)
  [ "$budget" -gt "$l" ] && budget=$l
  if [ "$budget" -lt "$STEP_MIN_S" ]; then
    say "$name skip 0 (${budget} s for it, ${l} s left of ${TOTAL_S}; a step needs ${STEP_MIN_S})"
    return 0
  fi
  local d=$OUT/$name t0=$SECONDS rc note="" dur=$((budget - KILL_GRACE_S))
  mkdir -p "$d"
  echo "== $name: up to ${budget} s, $(date -u +%T): $*"
  if [ -n "$DRY" ]; then
    echo "$*" > "$d/log.txt"; rc=0
  else
    timeout -s INT -k "$KILL_GRACE_S" "$dur" "$@" > "$d/log.txt" 2>&1
    rc=$?
  fi
  { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && note=" (cut at its budget, ${budget} s)"
  say "$name $rc $((SECONDS - t0))${note}"
  tail -n 4 "$d/log.txt" | cut -c1-300
}

{
  echo "# gpu_2gpu at commit $COMMIT, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), budget ${TOTAL_S} s, steps: $*${DRY:+ (dry run)}"
  echo "# step rc seconds [note]"
} > "$SUMMARY"
{ echo "commit $COMMIT"; if command -v nvidia-smi >/dev/null; then nvidia-smi -L 2>&1;
  nvidia-smi topo -m 2>&1 | head -5; else echo "no nvidia-smi"; fi;
  "$PY" -c "import nccl.core" 2>/dev/null && echo "nccl4py importable" || echo "nccl4py not importable"; } \
  | tee "$OUT/machine.txt"

for s in "$@"; do
  case $s in
    explain) step explain "$EXPLAIN_S" "$PY" bench/explain_curve_gpu.py "$OUT/explain/ec" --ngpus 2 \
               --budget-s $((EXPLAIN_S - 30)) ${EXPLAIN_ARGS:-} ;;
    gate) step gate "$GATE_S" "$PY" bench/gate_trials.py gpu --ngpus 2 --trials 20 --budget-s $((GATE_S - 40)) \
            --out "$OUT/gate" --results "$OUT/gate/gate-trials-gpu.md" ;;
    gate_latency) step gate_latency "$GATE_LATENCY_S" "$PY" bench/gate_trials.py gpu --ngpus "${GATE_NGPUS:-2}" --only latency \
                    --trials 20 --budget-s $((GATE_LATENCY_S - 30)) --args=--no-explain ${GATE_LATENCY_ARGS:-} --out "$OUT/gate_latency" \
                    --results "$OUT/gate_latency/gate-trials-gpu-latency.md" ;;
    gate_bind) step gate_bind "$GATE_BIND_S" "$PY" bench/gate_rounds_ab.py "$OUT/gate_bind" --runs "${GATE_BIND_RUNS:-6}" \
                 --rounds "${GATE_BIND_ROUNDS:-5}" --ngpus "${GATE_NGPUS:-2}" --modes "${GATE_BIND_MODES:-unbound,bind numa,bind core}" \
                 --budget-s $((GATE_BIND_S - 20)) ;;
    health) step health "$HEALTH_S" "$PY" bench/health_fleet_gpu.py "$OUT/health/hf" --iproute2 .gpuwork/ipr \
              --budget-s $((HEALTH_S - 30)) ${HEALTH_CASES:+--cases "$HEALTH_CASES"} ;;
    gpu_tests) step gpu_tests "$(left)" "$PY" -m pytest tests/gpu -v -rfs -p no:cacheprovider
      log=$OUT/gpu_tests/log.txt
      if [ -f "$log" ]; then
        pct=$(grep -oE "\[ *[0-9]+%\]" "$log" | tail -n 1 | tr -d '[] ')
        last=$(grep -E "^=+ .* in [0-9.]+s" "$log" | tail -n 1 | tr -d '=' | xargs)
        say "# gpu_tests reached ${pct:-0%}; pytest said: ${last:-nothing (cut before its summary)}"
      fi ;;
    *) say "$s skip 0 (unknown step)" ;;
  esac
done
say "# total $((SECONDS - START)) s"
