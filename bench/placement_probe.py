#!/usr/bin/env python3
"""Does a run's speed depend on the CPU it runs on?  Issue 14's elevated runs.

On the 1-GPU H100 VM both tools have whole runs whose small-message times sit
~25 % high, and in those runs the in-place column (at one rank a host-only
no-op: the harness' own cost) is high too, so the host side is slower for the
whole process.  If that is placement (a vCPU whose sibling or host core is
busy, one that takes the GPU's interrupts), pinning each run to one CPU in
turn shows the same CPUs slow for both tools; if it is not, the per-CPU
medians are flat and the elevation is the VM's, not something either tool
chooses.

For each round, each CPU (of the GPU's local list, or --cpus) and each tool:
`taskset -c CPU <tool> -b 8 -e 64K -f 4`; per run the mean out-of-place and
in-place time over the sizes.  Also kept: each CPU's interrupts and steal time
over the whole probe (/proc/interrupts, /proc/stat).

  python bench/placement_probe.py --nccl-tests-build DIR [--rounds 2] [--cpus 0-15] --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+\s+\S+\s+-?\d+\s+(\S+)\s+\S+\s+\S+\s+\S+\s+(\S+)")


def cpu_list(text: str) -> list[int]:
    out: list[int] = []
    for part in text.strip().split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def per_cpu_stat() -> dict[int, dict[str, int]]:
    """cpuN -> {'steal': jiffies, 'irq': jiffies+softirq} from /proc/stat."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        f = line.split()
        if f and f[0].startswith("cpu") and f[0] != "cpu":
            v = [int(x) for x in f[1:]]
            out[int(f[0][3:])] = {"irq": v[5] + v[6], "steal": v[7] if len(v) > 7 else 0}
    return out


def interrupts() -> dict[int, int]:
    """CPU -> interrupts taken so far (all sources)."""
    lines = Path("/proc/interrupts").read_text().splitlines()
    cpus = [int(c[3:]) for c in lines[0].split()]
    total = dict.fromkeys(cpus, 0)
    for line in lines[1:]:
        f = line.split()
        for c, v in zip(cpus, f[1:1 + len(cpus)]):
            if v.isdigit():
                total[c] += int(v)
    return total


def run_once(cmd: list[str]) -> tuple[float, float] | None:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, NCCLBENCH_NO_STORE="1"))
    oop, ip = [], []
    for line in p.stdout.splitlines():
        m = ROW.match(line)
        if m:
            oop.append(float(m.group(1)))
            ip.append(float(m.group(2)))
    if p.returncode != 0 or not oop:
        print(f"failed: {' '.join(cmd)} rc={p.returncode} {p.stderr[-300:]}", file=sys.stderr)
        return None
    return statistics.mean(oop), statistics.mean(ip)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nccl-tests-build", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cpus", help="default: the CPUs this process may use")
    ap.add_argument("--args", default="-b 8 -e 64K -f 4")
    ap.add_argument("--collective", default="all_reduce")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    cpus = cpu_list(a.cpus) if a.cpus else sorted(os.sched_getaffinity(0))
    tools = {"nccl-tests": [os.path.join(a.nccl_tests_build, f"{a.collective}_perf")],
             "ncclbench": [sys.executable, "-m", "ncclbench", f"{a.collective}_perf"]}
    irq0, stat0 = interrupts(), per_cpu_stat()
    runs = []
    for r in range(a.rounds):
        for cpu in cpus:
            for tool, base in tools.items():
                got = run_once(["taskset", "-c", str(cpu), *base, *a.args.split()])
                if got:
                    runs.append({"round": r, "cpu": cpu, "tool": tool, "oop_us": got[0], "ip_us": got[1]})
    irq1, stat1 = interrupts(), per_cpu_stat()
    a.out.mkdir(parents=True, exist_ok=True)
    siblings = {}
    for c in cpus:
        try:
            siblings[c] = Path(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list").read_text().strip()
        except OSError:
            siblings[c] = "?"
    lines = [f"# placement probe: `{a.collective}_perf {a.args}`, each run pinned to one CPU (taskset -c), "
             f"{a.rounds} round(s)", "",
             "| CPU | siblings | nccl-tests oop us | nccl-tests ip us | ncclbench oop us | ncclbench ip us | "
             "interrupts during probe | steal jiffies |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for c in cpus:
        cells = []
        for tool in tools:
            mine = [x for x in runs if x["cpu"] == c and x["tool"] == tool]
            cells += [" ".join(f"{x['oop_us']:.2f}" for x in mine), " ".join(f"{x['ip_us']:.2f}" for x in mine)]
        lines.append(f"| {c} | {siblings[c]} | {' | '.join(cells)} | {irq1.get(c, 0) - irq0.get(c, 0)} | "
                     f"{stat1.get(c, {}).get('steal', 0) - stat0.get(c, {}).get('steal', 0)} |")
    for tool in tools:
        mine = [x["oop_us"] for x in runs if x["tool"] == tool]
        if mine:
            lines.append(f"\n{tool}: oop per-run mean min {min(mine):.2f} median {statistics.median(mine):.2f} "
                         f"max {max(mine):.2f} (max/min {max(mine) / min(mine):.3f})")
    text = "\n".join(lines)
    print(text)
    (a.out / "placement.md").write_text(text + "\n")
    (a.out / "placement.json").write_text(json.dumps({"runs": runs, "siblings": siblings}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
