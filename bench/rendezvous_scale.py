"""How long do 64 ranks on one machine take to form a job through the TCP rendezvous?

Two numbers, median of several trials:
* rendezvous: 64 processes are started and have imported everything; on a
  "go" they build TcpHostComm (connect, token handshake, welcome), broadcast a
  128-byte id, collect their preflight facts (no GPU), gather them to rank 0 and
  pass a barrier.  Timed from "go" to the last rank done.  This is the cost of
  the rendezvous itself.  Target: < 2 s.
* end to end: `python -m ncclbench preflight --nprocs 64` wall time,
  which adds 64 Python interpreter starts and imports (on 2 cores these
  dominate).

Usage: python bench/rendezvous_scale.py [--nprocs 64] [--trials 5] [--out bench/results/rendezvous_64.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"


def child() -> int:
    """One rank: import, say ready, wait for go, form the job, report times."""
    from ncclbench.launch.detect import detect_launch
    from ncclbench.launch.facts import collect_rank_facts
    from ncclbench.launch.rendezvous import TcpHostComm

    info = detect_launch()
    listen = socket.socket(fileno=info.listen_fd) if info.listen_fd is not None else None
    print("ready", flush=True)
    sys.stdin.readline()  # go
    t0 = time.time()
    comm = TcpHostComm(info.rank, info.size, info.master_addr, info.master_port, info.token, 60.0,
                       listen_sock=listen)
    t_formed = time.time()
    uid = comm.bcast(os.urandom(128) if info.rank == 0 else None, 0)
    facts = collect_rank_facts(info, hostcomm="tcp", probe_nccl=False)
    gathered = comm.gather(facts, 0)
    comm.barrier()
    t_done = time.time()
    comm.close()
    ok = len(uid) == 128 and (gathered is None or len(gathered) == info.size)
    print(json.dumps({"rank": info.rank, "start": t0, "formed": t_formed, "done": t_done, "ok": ok}), flush=True)
    return 0 if ok else 1


def rendezvous_trial(n: int) -> dict:
    listener = socket.create_server(("127.0.0.1", 0), backlog=max(128, 2 * n))
    port, token = listener.getsockname()[1], secrets.token_hex(16)
    env_base = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    procs = []
    for r in range(n):
        env = dict(env_base, NCCLBENCH_SPAWN_RANK=str(r), NCCLBENCH_SPAWN_SIZE=str(n),
                   NCCLBENCH_SPAWN_ADDR="127.0.0.1", NCCLBENCH_SPAWN_PORT=str(port), NCCLBENCH_SPAWN_TOKEN=token)
        if r == 0:
            env["NCCLBENCH_SPAWN_FD"] = str(listener.fileno())
        procs.append(subprocess.Popen([sys.executable, __file__, "--child"], env=env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True,
                                      pass_fds=(listener.fileno(),) if r == 0 else ()))
    listener.close()
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    time.sleep(0.5)  # let the machine settle after 64 interpreter starts
    go = time.time()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    rows = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        rows.append(json.loads(out.strip().splitlines()[-1]))
        assert p.returncode == 0 and rows[-1]["ok"]
    return {"rendezvous_s": max(r["done"] for r in rows) - go,
            "formed_s": max(r["formed"] for r in rows) - go}


def end_to_end_trial(n: int) -> float:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    t = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "ncclbench", "preflight", "--nprocs", str(n)], env=env,
                         capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t
    if run.returncode != 0 or run.stdout.count("#  Rank ") != n:
        raise SystemExit(f"preflight failed: {run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    return wall


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4), "trials": [round(v, 4) for v in values]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nprocs", type=int, default=64)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "rendezvous_64.json"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child()
    # pip install compiles bytecode; a source tree may not have it (PYTHONDONTWRITEBYTECODE), and
    # compiling the modules in every one of 64 ranks would be measured instead of the launch
    import compileall

    compileall.compile_dir(str(SRC), quiet=1)
    rdzv = [rendezvous_trial(a.nprocs) for _ in range(a.trials)]
    e2e = [end_to_end_trial(a.nprocs) for _ in range(a.trials)]
    doc = {
        "benchmark": "TCP rendezvous: N ranks on one machine form a job (oversubscribed)",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "nprocs": a.nprocs,
        "commands": {
            "rendezvous": f"python bench/rendezvous_scale.py --nprocs {a.nprocs} --trials {a.trials}",
            "end_to_end": f"python -m ncclbench preflight --nprocs {a.nprocs}",
        },
        "what": {
            "rendezvous_s": "from 'go' (all ranks started and imported) to the last rank past TcpHostComm + 128-byte "
                            "bcast + facts gather + barrier",
            "formed_s": "from 'go' to the last rank's TcpHostComm constructed (job formed)",
            "end_to_end_s": "wall time of preflight --nprocs N, including N interpreter starts and imports "
                            "(bytecode precompiled, as after pip install)",
        },
        "rendezvous_s": summary([r["rendezvous_s"] for r in rdzv]),
        "formed_s": summary([r["formed_s"] for r in rdzv]),
        "end_to_end_s": summary(e2e),
        "target_s": 2.0,
    }
    doc["rendezvous_meets_target"] = doc["rendezvous_s"]["median"] < doc["target_s"]
    doc["end_to_end_meets_target"] = doc["end_to_end_s"]["median"] < doc["target_s"]
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("rendezvous_s", "formed_s", "end_to_end_s")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
