#!/usr/bin/env python3
"""Correctness sweep: every collective with every datatype and every op
(`-d all -o all`, every root with `-r -1` for rooted collectives), checking
on, and a summary of #wrong per collective (all must be zero).

Run (one process per GPU):
  python bench/check_all_types.py --launcher "mpirun --allow-run-as-root -np 4" --out DIR
  python bench/check_all_types.py --launcher "" --extra "--backend mpi --nprocs 4" --out DIR   (CPU)
Writes DIR/check_all_types.json and .md, and each run's JSON (-J).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

ALL = ["all_reduce", "all_gather", "broadcast", "reduce_scatter", "reduce", "alltoall",
       "alltoallv", "scatter", "gather", "sendrecv", "hypercube"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launcher", default="")
    ap.add_argument("--collectives", default=",".join(ALL))
    ap.add_argument("--sizes", default="-b 8 -e 4M -f 16")
    ap.add_argument("--extra", default="")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "launcher": args.launcher, "runs": {}}
    ok = True
    for coll in args.collectives.split(","):
        jpath = args.out / f"types_{coll}.json"
        if jpath.exists():
            jpath.unlink()
        cmd = (shlex.split(args.launcher) + [args.python, "-m", "ncclbench", f"{coll}_perf"]
               + shlex.split(args.sizes) + ["-d", "all", "-o", "all", "-r", "-1", "-n", "3", "-c", "1",
                                            "-J", str(jpath)] + shlex.split(args.extra))
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        (args.out / f"types_{coll}.txt").write_text(f"$ {shlex.join(cmd)}\n{p.stdout}\n--- stderr ---\n{p.stderr}")
        rows, wrong, combos = [], 0, set()
        if jpath.exists():
            doc = json.loads(jpath.read_text())
            rows = doc.get("results", [])
            for r in rows:
                combos.add((r["type"], r["redop"]))
                for half in ("out_of_place", "in_place"):
                    nw = r[half].get("nwrong")
                    wrong += int(nw or 0)
        entry = {"rc": p.returncode, "rows": len(rows), "wrong": wrong, "wall_s": round(wall, 2),
                 "type_op_combinations": len(combos), "command": shlex.join(cmd)}
        summary["runs"][coll] = entry
        ok &= p.returncode == 0 and wrong == 0 and len(rows) > 0
        print(f"{coll:15s} rc={p.returncode} rows={len(rows)} combos={len(combos)} wrong={wrong} "
              f"{wall:.1f}s", flush=True)
    summary["all_zero"] = ok
    (args.out / "check_all_types.json").write_text(json.dumps(summary, indent=1))
    md = ["| collective | exit | rows | datatype x op combos | #wrong total | wall (s) |", "|---|---|---|---|---|---|"]
    md += [f"| {c} | {e['rc']} | {e['rows']} | {e['type_op_combinations']} | {e['wrong']} | {e['wall_s']} |"
           for c, e in summary["runs"].items()]
    (args.out / "check_all_types.md").write_text("\n".join(md) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
