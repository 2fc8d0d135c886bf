"""Do live runs name the same causes as imported logs (issue 26 item 5)?

Runs `ncclbench all_reduce_perf` once per injected cause on this host's GPUs (one process per GPU,
`--nprocs N`), each with `-J`, and reads back what the run's own judgement says (`ncclbench_explain`:
verdict and cause ids, the same ids as tests/fixtures/log_corpus).  NCCL's log capture supplies the
path and the per-call choice; the profiler plugin, where built, supplies the per-call channels.

    python bench/live_causes_gpu.py --nprocs 4 --out /tmp/live_causes       # 4 GPUs, ~3 min
    python bench/live_causes_gpu.py --cpu --out /tmp/live_causes_cpu        # plumbing only (CPU backend)

Cases (the environment each run gets on top of the caller's; NCCL_NVLS_ENABLE is left as the caller set it):

    healthy           -                                       no cause, 'as expected'
    p2p_disabled      NCCL_P2P_DISABLE=1                      p2p_disabled, below
    p2p_shm_disabled  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1   p2p_shm_disabled (the socket path), below
    channels_capped   NCCL_MAX_NCHANNELS=2                    channels_capped, below
    algo_forced       NCCL_ALGO=Tree                          algo_forced
    proto_forced      NCCL_PROTO=LL                           proto_forced, below

Writes OUT/live_causes.json and OUT/live_causes.md (machine, command, commit, date) and OUT/<case>.txt
(each run's output); exits 1 when a case's expected cause is missing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from provenance import commit  # noqa: E402  (bench/: the one answer to 'which commit is this tree')

CASES: dict[str, tuple[dict[str, str], list[str], str | None]] = {
    "healthy": ({}, [], "as expected"),
    "p2p_disabled": ({"NCCL_P2P_DISABLE": "1"}, ["p2p_disabled"], "below expected"),
    "p2p_shm_disabled": ({"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}, ["p2p_shm_disabled"], "below expected"),
    "channels_capped": ({"NCCL_MAX_NCHANNELS": "2"}, ["channels_capped"], "below expected"),
    "algo_forced": ({"NCCL_ALGO": "Tree"}, ["algo_forced"], None),
    "proto_forced": ({"NCCL_PROTO": "LL"}, ["proto_forced"], "below expected"),
}


def run_case(name: str, extra: dict[str, str], nprocs: int, cpu: bool, out: Path) -> dict:
    cmd = [sys.executable, "-m", "ncclbench", "all_reduce_perf", "-b", "64M", "-e", "512M", "-f", "2",
           "-n", "10", "-w", "2", "--nprocs", str(nprocs), "-J", str(out / f"{name}.json"), "--no-store"]
    if cpu:
        cmd[4:10] = ["-b", "1M", "-e", "4M", "-f", "2"]
        cmd += ["--backend", "mpi"]
    env = {**os.environ, **extra}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    (out / f"{name}.txt").write_text(p.stdout + p.stderr)
    got: dict = {"case": name, "env": extra, "rc": p.returncode, "command": " ".join(cmd)}
    try:
        doc = json.loads((out / f"{name}.json").read_text())
        ex = doc.get("ncclbench_explain") or {}
        got["verdict"] = ((ex.get("judgement") or {}).get("verdict") or {}).get("label")
        got["causes"] = ex.get("causes", [])
        got["traps"] = [t["name"] for t in ((ex.get("judgement") or {}).get("traps") or {}).get("raised", [])]
        got["lines"] = ex.get("lines", [])
    except (OSError, ValueError) as e:
        got["error"] = f"no JSON from the run: {e}"
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nprocs", type=int, default=4)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cpu", action="store_true", help="CPU backend: checks the plumbing, names no NCCL cause")
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results, missing = [], []
    for name in args.cases.split(","):
        extra, want, verdict = CASES[name]
        got = run_case(name, extra, args.nprocs, args.cpu, args.out)
        if not args.cpu:
            lost = [c for c in want if c not in got.get("causes", [])]
            wrong = verdict is not None and got.get("verdict") != verdict
            got["ok"] = not lost and not wrong and "error" not in got
            if not got["ok"]:
                missing.append(f"{name}: causes {got.get('causes')} (want {want}), verdict {got.get('verdict')} "
                               f"(want {verdict}){' ' + got['error'] if 'error' in got else ''}")
        results.append(got)
        print(f"{name}: rc {got['rc']}, verdict {got.get('verdict')}, causes {got.get('causes')}", flush=True)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": platform.node(), "commit": commit(), "command": " ".join([sys.argv[0], *(argv or sys.argv[1:])]),
            "cpu": args.cpu, "nprocs": args.nprocs}
    (args.out / "live_causes.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    md = [f"# Live runs name the causes ({meta['date']}, {meta['machine']}, commit {meta['commit']})", "",
          f"`{meta['command']}`", "", "| case | env | rc | verdict | causes | ok |", "|---|---|---|---|---|---|"]
    md += [f"| {r['case']} | {' '.join(f'{k}={v}' for k, v in r['env'].items()) or '-'} | {r['rc']} | "
           f"{r.get('verdict')} | {', '.join(r.get('causes') or []) or '-'} | {r.get('ok', '-')} |" for r in results]
    md += ["", "Missing: " + ("; ".join(missing) if missing else "none")]
    (args.out / "live_causes.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
