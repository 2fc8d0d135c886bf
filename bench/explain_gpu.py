"""Does judging every run move the timed figures, and what does it add to a run's wall time?

Alternating separate `ncclbench all_reduce_perf` runs with explain on (the default) and off
(`--no-explain`), in two shapes:

    small  -b 8 -e 64K -f 4      latency: where anything added per call would show
    large  -b 64M -e 1G -f 2     bandwidth

For each shape and size: the median out-of-place time of the "on" runs and of the "off" runs,
their ratio (on/off), and the off-vs-off spread (median of the even-numbered off runs over the
odd-numbered ones), the yardstick the on/off ratio is read against.  Per run it also records the
wall time to the first result row (start-up: the topology read, the capture set-up) and from the
last row to the process's exit (the probe ops and the judging), so both costs are measured, not
assumed.

    python bench/explain_gpu.py --ngpus 1 --runs 8 --out /tmp/explain_gpu     # 1 GPU (passes there)
    python bench/explain_gpu.py --ngpus 4 --runs 8 --out /tmp/explain_gpu4
    python bench/explain_gpu.py --cpu --runs 2 --out /tmp/explain_cpu          # smoke run, CPU backend

Writes OUT/explain_gpu.json and OUT/explain_gpu.md (machine, command, commit, date).  Record
what you rely on under bench/results/.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import commit  # noqa: E402  (bench/: the one answer to 'which commit is this tree')

SHAPES = {"small": ["-b", "8", "-e", "64K", "-f", "4"], "large": ["-b", "64M", "-e", "1G", "-f", "2"]}
ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+\s")


def run_once(args, shape: str, explain: bool, out: Path, k: int) -> dict:
    """One process: its JSON rows and the wall clock at its first row, last row and exit."""
    path = out / f"{shape}-{'on' if explain else 'off'}-{k}.json"
    cmd = [sys.executable, "-m", "ncclbench", "all_reduce_perf", *SHAPES[shape], "-n", str(args.iters),
           "-w", "5", "-J", str(path)]
    if not explain:
        cmd.append("--no-explain")
    env = {k2: v for k2, v in os.environ.items() if not k2.startswith("NCCL_DEBUG")}
    env.update(NCCLBENCH_NO_STORE="1", NCCL_NVLS_ENABLE="0")
    if args.cpu:
        cmd += ["--backend", "mpi", "--nprocs", "2"]
    else:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(args.ngpus))
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    first = last = None
    lines = []
    assert p.stdout is not None
    for line in p.stdout:
        lines.append(line)
        if ROW.match(line):
            now = time.perf_counter() - t0
            first = first if first is not None else now
            last = now
    err = p.stderr.read() if p.stderr else ""
    code = p.wait(timeout=600)
    wall = time.perf_counter() - t0
    if code:
        raise SystemExit(f"{' '.join(cmd)} exited {code}:\n{''.join(lines)[-3000:]}\n{err[-3000:]}")
    doc = json.loads(path.read_text())
    return {"times_us": {r["size"]: r["out_of_place"]["time"] for r in doc["results"]},
            "busbw": {r["size"]: r["out_of_place"]["bus_bw"] for r in doc["results"]},
            "to_first_row_s": first, "after_last_row_s": wall - (last or wall), "wall_s": wall,
            "nranks": doc["ncclbench"]["nranks"], "explain_lines": (doc.get("ncclbench_explain") or {}).get("lines")}


def median_by_size(runs: list[dict], key: str = "times_us") -> dict[int, float]:
    sizes = runs[0][key]
    return {int(s): statistics.median(float(r[key][s]) for r in runs) for s in sizes}


def summarise(on: list[dict], off: list[dict]) -> dict:
    med = statistics.median
    m_on, m_off = median_by_size(on), median_by_size(off)
    even, odd = off[0::2], off[1::2]
    spread = ({s: median_by_size(even)[s] / median_by_size(odd)[s] for s in m_off} if even and odd else {})
    sizes = [{"size": s, "on_us": m_on[s], "off_us": m_off[s], "on_over_off": m_on[s] / m_off[s],
              "off_even_over_odd": spread.get(s)} for s in m_off]
    return {"sizes": sizes,
            "max_abs_on_off_pct": max(abs(x["on_over_off"] - 1) for x in sizes) * 100,
            "max_abs_off_off_pct": max((abs(v - 1) for v in spread.values()), default=0.0) * 100,
            "to_first_row_s": {"on": med(r["to_first_row_s"] for r in on), "off": med(r["to_first_row_s"] for r in off)},
            "after_last_row_s": {"on": med(r["after_last_row_s"] for r in on),
                                 "off": med(r["after_last_row_s"] for r in off)},
            "wall_s": {"on": med(r["wall_s"] for r in on), "off": med(r["wall_s"] for r in off)}}


def machine() -> str:
    smi = shutil.which("nvidia-smi")
    gpus = ""
    if smi:
        try:
            names = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                   text=True, timeout=30).stdout.split("\n")
            gpus = ", ".join(sorted({n.strip() for n in names if n.strip()}))
        except (OSError, subprocess.SubprocessError):
            pass
    return f"{platform.node()} ({gpus or 'no GPU'})"


def markdown(res: dict) -> str:
    meta = res["meta"]
    out = [f"# explain on vs off ({meta['backend']}, {meta['ngpus']} GPU(s))", "",
           f"{meta['machine']}; commit {meta['commit']}; {meta['date']}; `{meta['command']}`; "
           f"{meta['runs']} runs per mode and shape, alternating; out-of-place time, medians.", ""]
    for shape, s in res["shapes"].items():
        out += [f"## {shape} ({' '.join(SHAPES[shape])}, -n {meta['iters']})", "",
                "| size (B) | on (us) | off (us) | on/off | off even/odd |", "|---:|---:|---:|---:|---:|"]
        for x in s["sizes"]:
            eo = f"{x['off_even_over_odd']:.3f}" if x["off_even_over_odd"] else "-"
            out.append(f"| {x['size']} | {x['on_us']:.2f} | {x['off_us']:.2f} | {x['on_over_off']:.3f} | {eo} |")
        out += ["", f"Largest |on/off - 1|: {s['max_abs_on_off_pct']:.1f} %; largest |off/off - 1|: "
                    f"{s['max_abs_off_off_pct']:.1f} %.  To the first row: on {s['to_first_row_s']['on']:.2f} s, "
                    f"off {s['to_first_row_s']['off']:.2f} s; after the last row: on "
                    f"{s['after_last_row_s']['on']:.2f} s, off {s['after_last_row_s']['off']:.2f} s; whole run: on "
                    f"{s['wall_s']['on']:.2f} s, off {s['wall_s']['off']:.2f} s.", ""]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ngpus", type=int, default=1, help="GPUs to use (CUDA_VISIBLE_DEVICES=0..N-1)")
    ap.add_argument("--runs", type=int, default=8, help="runs per mode and shape (even: the off/off spread)")
    ap.add_argument("--iters", type=int, default=50, help="-n of each run")
    ap.add_argument("--shapes", default="small,large")
    ap.add_argument("--cpu", action="store_true", help="smoke run on the CPU backend (2 MPI processes)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    res: dict = {"meta": {"command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "commit": commit(short=False),
                          "date": datetime.date.today().isoformat(), "machine": machine(),
                          "backend": "mpi (CPU)" if args.cpu else "nccl", "ngpus": 0 if args.cpu else args.ngpus,
                          "runs": args.runs, "iters": args.iters},
                 "shapes": {}, "runs": {}}
    for shape in args.shapes.split(","):
        on: list[dict] = []
        off: list[dict] = []
        for k in range(args.runs):
            order = (True, False) if k % 2 == 0 else (False, True)  # alternate who goes first
            for explain in order:
                r = run_once(args, shape, explain, args.out, k)
                (on if explain else off).append(r)
                print(f"{shape} run {k} {'on ' if explain else 'off'}: first row {r['to_first_row_s']:.2f} s, "
                      f"wall {r['wall_s']:.2f} s", file=sys.stderr, flush=True)
        res["runs"][shape] = {"on": on, "off": off}
        res["shapes"][shape] = summarise(on, off)
    (args.out / "explain_gpu.json").write_text(json.dumps(res, indent=1, default=str))
    md = markdown(res)
    (args.out / "explain_gpu.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
