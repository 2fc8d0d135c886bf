"""How healthy CPU-backend health figures scatter on this machine, and what a scan says of them.

Runs `ncclbench health` N times on one machine with no fault (ranks told apart as hosts by
NCCLBENCH_HEALTH_HOST_MAP, as in tests/test_health_runtime.py) and collects, per phase, each
fleet-round figure's deviation from its round's median.  The tails of that distribution are
what a health verdict must not mistake for a fault: the CPU backend's spread floors
(`health.core.round_judge.CPU_BW_FLOOR`, `CPU_LAT_FLOOR`) are set from them (floor = the 1 % tail /
the z limit), and the scans' exit codes count false alarms (8: a fault confirmed on healthy
hosts).

    python bench/health_cpu_noise.py --scans 30 --out bench/results/health-cpu-noise-DATE.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from provenance import commit as provenance_commit  # noqa: E402  (bench/: the one answer to 'which commit is this tree')

SHAPES = {  # name -> (rank count, host map, extra arguments): the runtime tests' scans
    "5 ranks on 3 hosts (2,1,2)": (5, "h0,h0,h1,h2,h2", []),
    "6 hosts, one rank each": (6, "h0,h1,h2,h3,h4,h5", ["--phases", "local,pairs"]),
}
SCAN = ["--bw-size", "64K", "-n", "10", "-w", "1", "--cycles", "3", "--round-timeout", "20"]


def run_scan(nprocs: int, host_map: str, extra: list[str], out: Path) -> tuple[int, dict | None]:
    env = dict(os.environ, NCCLBENCH_NO_STORE="1", NCCLBENCH_HEALTH_HOST_MAP=host_map,
               PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "ncclbench", "health", "--backend", "mpi", "--nprocs", str(nprocs), *SCAN, *extra,
           "--json", str(out)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    return p.returncode, json.loads(out.read_text()) if out.exists() else None


def deviations(doc: dict, metric: str) -> dict[str, list[float]]:
    """phase -> each fleet-round figure's deviation from its round's median (rounds of >= 3)."""
    out: dict[str, list[float]] = {}
    for m in doc.get("measurements", []):
        if m["purpose"] != "fleet":
            continue
        v = np.array([g[metric] for g in m["groups"] if g.get(metric)])
        if v.size >= 3:
            out.setdefault(m["round"].split()[0], []).extend((v / np.median(v) - 1).tolist())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scans", type=int, default=30, help="scans per shape")
    ap.add_argument("--out", type=Path, required=True, help="the Markdown record to write")
    args = ap.parse_args()
    commit = provenance_commit()
    t0 = time.time()
    bw: dict[str, list[float]] = {}
    lat: dict[str, list[float]] = {}
    codes: dict[str, Counter] = {}
    convicted: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (nprocs, hosts, extra) in SHAPES.items():
            codes[name] = Counter()
            for i in range(args.scans):
                code, doc = run_scan(nprocs, hosts, extra, Path(tmp) / f"{nprocs}-{i}.json")
                codes[name][code] += 1
                if doc is None:
                    continue
                for src, dst in (("busbw", bw), ("lat_us", lat)):
                    for phase, d in deviations(doc, src).items():
                        dst.setdefault(phase, []).extend(d)
                convicted += [f"{name}, scan {i + 1}: {f['component']} {'/'.join(f['hosts'])} {f['detail']}: "
                              + " | ".join(f["evidence"][:2]) for f in doc["findings"] if f.get("confirmed")]
    load = os.getloadavg()
    lines = [f"# Healthy CPU-backend health figures: scatter and false alarms ({time.strftime('%Y-%m-%d')})", "",
             f"Machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs; load average at the end "
             f"{load[0]:.2f}. Commit {commit}. {time.time() - t0:.0f} s.",
             f"Command: `python bench/health_cpu_noise.py --scans {args.scans} --out {args.out}`; each scan: "
             f"`ncclbench health --backend mpi --nprocs N {' '.join(SCAN)}` with the host map below, no fault.", "",
             "| shape | scans | exit 0 | exit 9 (not judged / suspect) | exit 8 (fault confirmed: false alarm) |",
             "|---|---:|---:|---:|---:|"]
    for name, c in codes.items():
        lines.append(f"| {name} | {sum(c.values())} | {c[0]} | {c[9]} | {c[8]} |")
    lines += ["", "Fleet-round figures against their round's median (healthy, so all of it is noise):", "",
              "| phase | metric | figures | MAD-sigma | 5 % tail | 1 % tail | worst | floor = 1 % tail / 3.5 |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for metric, table, sign in (("busbw", bw, -1), ("latency", lat, 1)):
        for phase, d in sorted(table.items()):
            v = np.array(d)
            mad = 1.4826 * float(np.median(np.abs(v - np.median(v))))
            p5, p1 = (np.percentile(v, 5), np.percentile(v, 1)) if sign < 0 else (np.percentile(v, 95),
                                                                                np.percentile(v, 99))
            worst = v.min() if sign < 0 else v.max()
            lines.append(f"| {phase} | {metric} | {v.size} | {100 * mad:.1f} % | {100 * p5:+.0f} % | {100 * p1:+.0f} % "
                         f"| {100 * worst:+.0f} % | {100 * abs(p1) / 3.5:.1f} % |")
    lines += ["", "Faults confirmed on these healthy hosts (each a false alarm):", ""]
    lines += [f"- {c}" for c in convicted] or ["- none"]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
