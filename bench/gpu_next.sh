#!/usr/bin/env bash
# The next 4-GPU visit (nvidia-h100-x4) in one device call of at most 600 s: issue 22's gate
# trials, then issue 25's fake-host figures, then what time is left.  Run from the repo root:
#
#   bench/gpu_next.sh OUT [NCCL_TESTS_BIN_DIR]
#
# Steps, in order of value; each runs under `timeout` with its own budget (below), writes into
# OUT/<step>/ (its output in OUT/<step>/log.txt) and appends "step rc seconds [note]" to
# OUT/summary.txt at once, so a cut loses nothing already measured.  A step starts only while the
# total (GPU_NEXT_TOTAL_S, 560 s) leaves it its minimum; otherwise its line says "skip" and why.
#   gate         issue 22: bench/gate_trials.py gpu, GATE_TRIALS (20) trials on 4 GPUs, hog on GPU 1
#   health       issue 25: bench/multihost_gpu.py --steps health (8 fake hosts: a slow host, a slow
#                link, healthy all-pairs scans, a killed and a stopped rank, as long as its budget lasts);
#                needs .ipr (bench/fetch_iproute2.sh) carried to the device
#   parity       issue 25: bench/multihost_gpu.py --steps mpirun with NCCL_TESTS_BIN_DIR: ncclbench and
#                nccl-tests side by side across 2 fake hosts (mpirun route); only when the dir is given
#                (nccl-tests is built by the operator outside this repo, never by this project)
#   live_causes  issue 26: bench/live_causes_gpu.py --nprocs 4
#   gpu_tests    pytest tests/gpu, with the time left (it needs > 190 s to end; the log says how far)
# At the end: OUT/summary.txt, OUT/machine.txt, OUT/reports/ (each step's report) and
# OUT/gpu_next-raw.tar.xz (the step folders; GPU_NEXT_KEEP=1 leaves them unpacked instead).
# GPU_NEXT_DRY=1: every step echoes its command and sleeps GPU_NEXT_DRY_SLEEP (0) s instead, under
# the same budgets (tests/test_gpu_next.py drives the control flow this way on a CPU machine).
# The commit recorded is bench/provenance.py's (NCCLBENCH_COMMIT, else the COMMIT file the operator
# writes, else git: the device's .git is stale).
set -u
OUT=${1:?usage: bench/gpu_next.sh OUT [NCCL_TESTS_BIN_DIR]}
NT=${2:-}

# -- budgets (seconds; every one can be overridden from the environment) --------------------------
# Timings from the last 4-GPU visit (bench/results/gpu-h100x4-2026-11-26/README.md):
#   gate: ~4 min expected for 20 trials (5 seeds + 3 x 20 runs of all_reduce 8 B-64 MiB, ~3.5 s
#     each); it writes its report only at its end, so it gets room to finish, not a cut.
#   health: ~38 s a scan on 8 fake hosts (v3b: 6 scans in 316 s, one of them a 90 s stall);
#     multihost_gpu.py starts the step only with 120 s of its --budget-s and a scan only with
#     60 s of it left, so it is given HEALTH_MARGIN_S less than its timeout (the last scan, started
#     with >= 80 s to the cut, ends before it unless it stalls): 2 fault scans + 5 healthy ones fit
#     in ~300 s, + 3 healthy ones when PARITY_S is kept back.
#   parity: the mpirun route took 7.6 s in v2b (ncclbench + nccl-tests + explain, 8 B-64 MiB);
#     when NCCL_TESTS_BIN_DIR is given, PARITY_S is kept back from health's share.
#   live_causes: ~3 min (6 cases, one run each); gpu_tests: 58 tests in 90 s, not to the end.
TOTAL_S=${GPU_NEXT_TOTAL_S:-560}   # the device call's 600 s less start-up and copying back
GATE_TRIALS=${GATE_TRIALS:-20}
GATE_S=${GATE_S:-330};               GATE_MIN_S=${GATE_MIN_S:-200}
HEALTH_S=${HEALTH_S:-320};           HEALTH_MIN_S=${HEALTH_MIN_S:-170}; HEALTH_MARGIN_S=${HEALTH_MARGIN_S:-20}
PARITY_S=${PARITY_S:-60};            PARITY_MIN_S=${PARITY_MIN_S:-45}
LIVE_S=${LIVE_S:-200};               LIVE_MIN_S=${LIVE_MIN_S:-120}
TESTS_MIN_S=${TESTS_MIN_S:-30}       # gpu_tests gets everything left
KILL_GRACE_S=${KILL_GRACE_S:-10}     # SIGINT at the budget (Python cleans up: hogs, namespaces), KILL after this

DRY=${GPU_NEXT_DRY:-}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.txt
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
dbdir=$(mktemp -d)
trap 'rm -rf "$dbdir"' EXIT   # the store of runs the steps do not keep themselves
export NCCLBENCH_DB=$dbdir/r.sqlite
[ -n "$NT" ] && export NCCL_TESTS_BUILD=$NT   # tests/gpu compare rows with nccl-tests where given
PY=${PYTHON:-python3}
IPR=${GPU_NEXT_IPR:-$PWD/.ipr}   # iproute2 for the fake hosts (the image has none)
COMMIT=$("$PY" bench/provenance.py)
START=$SECONDS
FAILED=0

left() { echo $(( TOTAL_S - (SECONDS - START) )); }

say() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME BUDGET MIN_S CMD...: run CMD in OUT/NAME under min(BUDGET, time left), or skip it.
step() {
  local name=$1 budget=$2 min=$3; shift 3
  local l; l=$(left)
  [ "$budget" -gt "$l" ] && budget=$l
  if [ "$budget" -lt "$min" ]; then
    say "$name skip 0 (${budget} s for it, ${l} s left of ${TOTAL_S}; the step needs ${min})"
    return 0
  fi
  local d=$OUT/$name t0=$SECONDS rc note="" dur=$((budget - KILL_GRACE_S))
  [ "$dur" -lt 1 ] && dur=1   # `timeout 0` would mean no limit
  mkdir -p "$d"
  echo "== $name: up to ${budget} s, $(date -u +%T): $*"
  if [ -n "$DRY" ]; then
    echo "$*" > "$d/log.txt"
    timeout -s INT -k "$KILL_GRACE_S" "$dur" sleep "${GPU_NEXT_DRY_SLEEP:-0}" >> "$d/log.txt" 2>&1
  else
    timeout -s INT -k "$KILL_GRACE_S" "$dur" "$@" > "$d/log.txt" 2>&1
  fi
  rc=$?
  { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && note=" (cut at its budget, ${budget} s)"
  [ "$rc" -ne 0 ] && FAILED=1
  say "$name $rc $((SECONDS - t0))${note}"
  tail -n 3 "$d/log.txt" | cut -c1-300
}

{
  echo "# gpu_next at commit $COMMIT, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), budget ${TOTAL_S} s${DRY:+ (dry run)}"
  echo "# step rc seconds [note]"
} > "$SUMMARY"
cat "$SUMMARY"
{ echo "commit $COMMIT"; if command -v nvidia-smi >/dev/null; then nvidia-smi -L 2>&1; else echo "no nvidia-smi"; fi; } \
  | tee "$OUT/machine.txt"

# a. issue 22: the gate's false alarms and catches on 4 GPUs
step gate "$GATE_S" "$GATE_MIN_S" "$PY" bench/gate_trials.py gpu --out "$OUT/gate" --trials "$GATE_TRIALS" \
  --ngpus 4 --hog-device 1 --results "$OUT/gate/gate-trials-gpu-h100x4.md"

# b. issue 25: health across 8 fake hosts (the confirm round fixed, the controls new since v3b)
reserve=0
[ -n "$NT" ] && reserve=$PARITY_S
if [ ! -d "$IPR" ]; then
  say "health skip 0 (no $IPR: make it with bench/fetch_iproute2.sh .ipr and carry it)"
else
  l=$(( $(left) - reserve )); hb=$HEALTH_S
  [ "$hb" -gt "$l" ] && hb=$l
  step health "$hb" "$HEALTH_MIN_S" "$PY" bench/multihost_gpu.py "$OUT/health/mh" --iproute2 "$IPR" \
    --steps health --budget-s "$((hb - HEALTH_MARGIN_S))"
fi

# c. issue 25: ncclbench and nccl-tests side by side across 2 fake hosts (mpirun route)
if [ -z "$NT" ]; then
  say "parity skip 0 (no NCCL_TESTS_BIN_DIR given)"
elif [ ! -x "$NT/all_reduce_perf" ]; then
  say "parity skip 0 (no all_reduce_perf in $NT)"
else
  pb=$PARITY_S; l=$(left)
  [ "$pb" -gt "$l" ] && pb=$l
  step parity "$pb" "$PARITY_MIN_S" "$PY" bench/multihost_gpu.py "$OUT/parity/mh" --steps mpirun \
    --nccl-tests "$NT" --budget-s "$((pb - KILL_GRACE_S))"
fi

# d. issue 26: live runs name the causes
step live_causes "$LIVE_S" "$LIVE_MIN_S" "$PY" bench/live_causes_gpu.py --nprocs 4 --out "$OUT/live_causes"

# e. the GPU tests with what is left (-v: the log shows how far they got when cut)
step gpu_tests "$(left)" "$TESTS_MIN_S" "$PY" -m pytest tests/gpu -v -rfs -p no:cacheprovider
if [ -f "$OUT/gpu_tests/log.txt" ]; then   # how far the tests got: pytest -v's last [ NN%], its last line
  log=$OUT/gpu_tests/log.txt
  pct=$(grep -oE "\[ *[0-9]+%\]" "$log" | tail -n 1 | tr -d '[] ')
  last=$(grep -E "^=+ .* in [0-9.]+s" "$log" | tail -n 1 | tr -d '=' | xargs)
  say "# gpu_tests reached ${pct:-0%} of the tests collected ($(grep -oE "collected [0-9]+ items" "$log" \
| tail -n 1)); pytest said: ${last:-nothing (cut before its summary)}; FAILED/ERROR lines: $(grep -cE "(FAILED|ERROR)" "$log")"
fi
say "# total $((SECONDS - START)) s"
# the few reports at the top of OUT, everything else in one archive (fewer files to copy back)
mkdir -p "$OUT/reports"
for f in gate/gate-trials-gpu-h100x4.md gate/gate-trials-gpu-h100x4.json health/mh/summary.md health/mh/results.json \
         parity/mh/summary.md parity/mh/results.json live_causes/live_causes.md live_causes/live_causes.json \
         gpu_tests/log.txt; do
  [ -f "$OUT/$f" ] && cp "$OUT/$f" "$OUT/reports/${f//\//-}"
done
dirs=$(cd "$OUT" && ls -d gate health parity live_causes gpu_tests 2>/dev/null)
if [ -n "$dirs" ] && [ -z "${GPU_NEXT_KEEP:-}" ]; then
  # shellcheck disable=SC2086  # the step folders' names have no spaces
  tar -C "$OUT" -cJf "$OUT/gpu_next-raw.tar.xz" $dirs && (cd "$OUT" && rm -rf $dirs)
fi
exit "$FAILED"
