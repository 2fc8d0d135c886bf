#!/usr/bin/env bash
# The NVML facts this host gives ncclbench's ceiling, recorded in one go on a GPU machine:
# memory bandwidth (bus width x max memory clock) and NVLink fabric info (cluster UUID, clique, state)
# beside nvidia-smi's own account, plus the GPU tests that compare them.
#   bench/topology_facts_gpu.sh OUTDIR
# Writes OUTDIR/nvml.json (bench/nvml_dump.py), nvidia-smi-q.txt, topo.json + topo.txt
# (ncclbench topo), pytest.txt (tests/gpu/test_topology_memory_fabric_gpu.py) and README.md.
set -u
out=${1:?usage: bench/topology_facts_gpu.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
export PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}"
"$py" "$here/bench/nvml_dump.py" > "$out/nvml.json" 2> "$out/nvml.err"; echo "nvml_dump: exit $?"
nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1; echo "nvidia-smi -q: exit $?"
nvidia-smi --query-gpu=name,clocks.max.memory,memory.total --format=csv > "$out/nvidia-smi-memory.csv" 2>&1
"$py" -m ncclbench topo --json "$out/topo.json" > "$out/topo.txt" 2>&1; echo "ncclbench topo: exit $?"
"$py" -m pytest -q -p no:cacheprovider "$here/tests/gpu/test_topology_memory_fabric_gpu.py" > "$out/pytest.txt" 2>&1
rc=$?; echo "pytest: exit $rc"; tail -3 "$out/pytest.txt"
{
  echo "# NVML topology facts on $(hostname) ($(date -u +%FT%TZ))"
  echo; echo "commit $(python3 "$here/bench/provenance.py")"
  echo; echo '```'; grep -E "memory|fabric|NVLink fabric|^GPU" "$out/topo.txt" | head -40; echo '```'
  echo; echo "pytest tests/gpu/test_topology_memory_fabric_gpu.py: exit $rc"
} > "$out/README.md"
exit $rc
