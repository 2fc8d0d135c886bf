#!/usr/bin/env python3
"""Does the regression gate (`ncclbench check`) fail unchanged systems, and does it
catch a real 10 % slowdown?

Two phases, so the (slow) measurements are taken once and kept:

  collect   stores every run in SQLite result stores under OUT, and in pairs.json
            which runs are seeds, which form a pair, the injected slowdown and the
            load average around each run.  Two setups, each with and without -I 1:
    shm       the CPU backend, 4 processes on this host (`--nprocs 4`, MPICH's shared
              memory), all_reduce 8 B - 64 MiB, -f 2, -c 0.  Pairs of identical
              back-to-back runs: every failing check is a false alarm.
    slow      the same test over 4 network-namespace "hosts" (tests/netns_hosts.py,
              one rank each, MPICH over TCP on veth links), every link shaped with
              `tc tbf` to RATE (600 Mbit/s: low enough that the links, not the busy
              CPUs, set the time of the large sizes); -n 3 to keep a run near 50 s.
              In each pair the second run has every link at 0.9 x RATE: a real 10 %
              bandwidth loss, which the gate must catch.  -I alternates by round.
            Before the pairs, SEEDS identical runs of every variant: the history a
            user would have stored before the first check.
  judge     runs the gate (ncclbench.store.gate.gate, the code behind `check`;
            default limits, --max-drop 5%) on every pair twice: against the pair's
            first run alone (noise of whole runs unknown), and against a baseline of
            the 10 newest good runs of the same command up to that first run (what
            `baseline set NAME RUN --runs 10` makes).  Every first run of a slowed
            pair is also checked against the 10 good runs before it (identical runs
            of the shaped setup).  Writes bench/results/gate-false-alarms.{md,json}.

Run (as root, for the namespaces):
  python bench/gate_false_alarms.py collect --out bench/results/raw/gate-DATE --rounds 20 --src SNAPSHOT/src
  python bench/gate_false_alarms.py judge --out bench/results/raw/gate-DATE
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from provenance import commit  # noqa: E402  (bench/: the one answer to 'which commit is this tree')

PY = sys.executable
TEST = ["all_reduce_perf", "-b", "8", "-e", "64M", "-f", "2", "-c", "0", "--backend", "mpi"]
SHAPED_EXTRA = ["-n", "3"]
SLOWDOWN = 0.9
SRC_OVERRIDE = ""


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _env(db: Path) -> dict[str, str]:
    from launch_helpers import child_env

    env = child_env(NCCLBENCH_DB=str(db), PYTHONUNBUFFERED="1")
    if SRC_OVERRIDE:  # measure with a snapshot of the code, not a working tree being edited
        env["PYTHONPATH"] = SRC_OVERRIDE + os.pathsep + env["PYTHONPATH"]
    return env


def _latest_id(db: Path) -> int:
    from ncclbench.store import ResultStore

    with ResultStore(db, create=False) as s:
        return int(s.latest_run_id())


def _run(cmd: list[str], db: Path, log) -> dict:
    before, t0 = _load(), time.monotonic()
    p = subprocess.run(cmd, env=_env(db), capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t0
    log.write(f"$ {' '.join(cmd)}\nrc={p.returncode} wall={wall:.1f}s\n{p.stdout[-4000:]}\n{p.stderr[-2000:]}\n")
    log.flush()
    if p.returncode != 0:
        raise SystemExit(f"run failed (rc {p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return {"run": _latest_id(db), "load_before": before, "load_after": _load(), "wall_s": round(wall, 1)}


def _shm_cmd(per_iter: bool) -> list[str]:
    return [PY, "-m", "ncclbench", *TEST, "--nprocs", "4"] + (["-I", "1"] if per_iter else [])


class Shaped:
    """4 namespace hosts, one rank each, links shaped by tbf."""

    def __init__(self, out: Path, rate_mbit: int, nhosts: int = 4):
        from netns_hosts import netns_hosts

        self.rate = rate_mbit
        self.nhosts = nhosts
        self._ctx = netns_hosts(nhosts)
        self.hosts = self._ctx.__enter__()
        wrapper = out / "enter-netns"
        wrapper.write_text('#!/bin/sh\n# Hydra\'s ssh launcher calls: <this> -x HOST "COMMAND"\n'
                           '[ "$1" = "-x" ] && shift\nhost=$1; shift\n'
                           'exec ip netns exec "$host" unshare --uts sh -c "hostname $host && exec $*"\n')
        wrapper.chmod(0o755)
        self.wrapper = wrapper
        self.current = None
        for h in self.hosts:
            subprocess.run(["ip", "netns", "exec", h.name, "tc", "qdisc", "add", "dev", h.veth, "root", "tbf",
                            "rate", f"{rate_mbit}mbit", "burst", "512kb", "limit", "64mb"], check=True)
        self.current = rate_mbit

    def set_rate(self, mbit: int) -> None:
        if mbit == self.current:
            return
        for h in self.hosts:
            subprocess.run(["ip", "netns", "exec", h.name, "tc", "qdisc", "change", "dev", h.veth, "root", "tbf",
                            "rate", f"{mbit}mbit", "burst", "512kb", "limit", "64mb"], check=True)
        self.current = mbit

    def cmd(self, per_iter: bool) -> list[str]:
        mpiexec = str(Path(PY).parent / "mpiexec")
        inner = [mpiexec, "-launcher", "ssh", "-launcher-exec", str(self.wrapper), "-localhost", self.hosts[0].addr,
                 "-hosts", ",".join(h.name for h in self.hosts), "-n", str(self.nhosts), "-ppn", "1",
                 "-genv", "UCX_TLS", "tcp,self", "-genv", "MPIR_CVAR_NOLOCAL", "1", "-genv", "FI_PROVIDER", "tcp",
                 PY, "-m", "ncclbench", *TEST, *SHAPED_EXTRA] + (["-I", "1"] if per_iter else [])
        return self.hosts[0].cmd(inner)

    def close(self) -> None:
        self._ctx.__exit__(None, None, None)


def _seed(kind: str, per_iter: bool, db: Path, shaped: Shaped | None, rate: int, log) -> dict:
    if kind == "shm":
        return _run(_shm_cmd(per_iter), db, log)
    shaped.set_rate(rate)
    return _run(shaped.cmd(per_iter), db, log)


def collect(args) -> int:
    global SRC_OVERRIDE, SHAPED_EXTRA
    SRC_OVERRIDE = args.src or ""
    SHAPED_EXTRA = args.shaped_args.split()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta_path = out / "pairs.json"
    if meta_path.exists():  # resuming: the runs already stored decide the command
        SHAPED_EXTRA = json.loads(meta_path.read_text())["shaped_extra"]
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
        "started": datetime.now().isoformat(timespec="seconds"),
        "commit": commit(),
        "src": args.src or str(ROOT / "src"),
        "test": TEST, "shaped_extra": SHAPED_EXTRA, "rate_mbit": args.rate_mbit, "slowdown": SLOWDOWN,
        "pairs": []}
    log = open(out / "collect.log", "a")
    setups = args.setups.split(",")
    shaped = Shaped(out, args.rate_mbit, meta.setdefault("shaped_hosts", args.shaped_hosts)) \
        if {"same", "slow"} & set(setups) else None
    slow_rate = int(round(args.rate_mbit * SLOWDOWN))
    try:
        done = {(p["setup"], p["round"], p["per_iter"]) for p in meta["pairs"]}
        meta.setdefault("seeds", [])
        seeded = {(x["setup"], x["per_iter"], x["i"]) for x in meta["seeds"]}
        for i in range(1, args.seeds + 1):  # the baselines' first history: identical runs before any pair
            for setup in setups:
                for per_iter in (False, True):
                    if (setup, per_iter, i) in seeded:
                        continue
                    kind = "shm" if setup == "shm" else "shaped"
                    db = out / f"{'shm' if kind == 'shm' else 'shaped'}.sqlite"
                    rec = _seed(kind, per_iter, db, shaped, args.rate_mbit, log)
                    meta["seeds"].append({"setup": setup, "per_iter": per_iter, "i": i, **rec})
                    meta_path.write_text(json.dumps(meta, indent=1))
                    print(f"seed {i} {setup} -I={int(per_iter)}: run {rec['run']} load {rec['load_before']}",
                          flush=True)
        for rnd in range(1, args.rounds + 1):
            for setup in setups:
                variants = (False, True) if setup == "shm" else ((rnd % 2 == 0),)
                for per_iter in variants:
                    if (setup, rnd, per_iter) in done:
                        continue
                    db = out / f"{'shm' if setup == 'shm' else 'shaped'}.sqlite"
                    pair = {"setup": setup, "round": rnd, "per_iter": per_iter,
                            "started": datetime.now().isoformat(timespec="seconds")}
                    if setup == "shm":
                        pair["a"] = _run(_shm_cmd(per_iter), db, log)
                        pair["b"] = _run(_shm_cmd(per_iter), db, log)
                        pair["injected"] = None
                    else:
                        shaped.set_rate(args.rate_mbit)
                        pair["a"] = _run(shaped.cmd(per_iter), db, log)
                        if setup == "slow":
                            shaped.set_rate(slow_rate)
                        pair["b"] = _run(shaped.cmd(per_iter), db, log)
                        pair["injected"] = None if setup == "same" else \
                            f"tbf rate {args.rate_mbit} -> {slow_rate} mbit on every link"
                        pair["rates_mbit"] = [args.rate_mbit, shaped.current]
                    meta["pairs"].append(pair)
                    meta_path.write_text(json.dumps(meta, indent=1))
                    print(f"round {rnd} {setup} -I={int(per_iter)}: runs {pair['a']['run']},{pair['b']['run']} "
                          f"load {pair['a']['load_before']}..{pair['b']['load_after']}", flush=True)
    finally:
        if shaped is not None:
            shaped.close()
        meta["finished"] = datetime.now().isoformat(timespec="seconds")
        meta_path.write_text(json.dumps(meta, indent=1))
    return 0


HISTORY = 10  # runs in a baseline with history (what `baseline set NAME RUN --runs 10` stores)
LONG_HISTORY = 20  # the same with up to 20 runs (fewer for the first pairs: the seeds and pairs before)


def _variant_runs(meta: dict, setup: str, per_iter: bool) -> list[tuple[int, bool]]:
    """(run id, good) of one variant in the order they were measured: seeds, then
    each pair's first and second run (the second is good unless it was slowed)."""
    out = [(x["run"], True) for x in meta.get("seeds", []) if x["setup"] == setup and x["per_iter"] == per_iter]
    for p in sorted((p for p in meta["pairs"] if p["setup"] == setup and p["per_iter"] == per_iter),
                    key=lambda p: p["round"]):
        out.append((p["a"]["run"], True))
        out.append((p["b"]["run"], p.get("injected") is None))
    return out


def _judgement(g) -> dict:
    return {"ok": g.ok, "baseline_runs": g.baseline_runs, "figures": [
        {"figure": j.figure.name, "worse_pct": round(j.worse_pct, 2), "limit_pct": round(min(j.limit_pct, 1e6), 2),
         "noise_pct": None if j.noise.pct is None else round(min(j.noise.pct, 1e6), 2),
         "noise_source": j.noise.source, "failed": j.failed} for j in g.judgements]}


def judge(args) -> int:
    from ncclbench.store import ResultStore
    from ncclbench.store.gate import gate

    out = Path(args.out)
    meta = json.loads((out / "pairs.json").read_text())
    stores = {"shm": ResultStore(out / "shm.sqlite", create=False)}
    if (out / "shaped.sqlite").exists():
        stores["slow"] = ResultStore(out / "shaped.sqlite", create=False)
    cache: dict = {}

    def run(setup: str, rid: int):
        key = (setup, rid)
        if key not in cache:
            cache[key] = stores[setup].get_run(rid)
        return cache[key]

    results = []
    for p in sorted(meta["pairs"], key=lambda p: (p["setup"], p["per_iter"], p["round"])):
        setup, per_iter = p["setup"], p["per_iter"]
        order = _variant_runs(meta, setup, per_iter)
        a, b = p["a"]["run"], p["b"]["run"]
        good_upto = [rid for rid, good in order[: [r for r, _ in order].index(a) + 1] if good]
        base = run(setup, a)
        hist = [run(setup, r) for r in good_upto[-HISTORY:] if r != a]
        long_hist = [run(setup, r) for r in good_upto[-LONG_HISTORY:] if r != a]
        rec = {"setup": setup, "per_iter": per_iter, "round": p["round"], "a": a, "b": b,
               "injected": p.get("injected"), "load": [p["a"]["load_before"], p["b"]["load_after"]],
               "alone": _judgement(gate(run(setup, b), base)),
               "with_history": _judgement(gate(run(setup, b), base, history=hist)),
               "with_long_history": _judgement(gate(run(setup, b), base, history=long_hist))}
        if setup == "slow":  # the pair's first run against the good runs before it: an identical check
            before = [rid for rid, good in order[: [r for r, _ in order].index(a)] if good][-HISTORY:]
            if len(before) >= 3:
                rec["first_vs_history"] = _judgement(gate(base, run(setup, before[-1]),
                                                          history=[run(setup, r) for r in before[:-1]]))
        results.append(rec)
    for st in stores.values():
        st.close()

    def count(sel, key):
        """(checks that failed, checks): false alarms for identical runs, catches for slowed ones."""
        rs = [r for r in results if sel(r) and key in r]
        return sum(1 for r in rs if not r[key]["ok"]), len(rs)

    rows = []
    for setup, per_iter, label in (("shm", False, "shm, identical pairs, no -I"), ("shm", True, "shm, identical pairs, -I 1"),
                                   ("slow", False, "shaped, 2nd run 10 % slower, no -I"),
                                   ("slow", True, "shaped, 2nd run 10 % slower, -I 1")):
        sel = (lambda r, s=setup, i=per_iter: r["setup"] == s and r["per_iter"] == i)
        a = count(sel, "alone")
        h = count(sel, "with_history")
        hl = count(sel, "with_long_history")
        rows.append((label, "caught" if setup == "slow" else "false alarms", a, h, hl))
    ident = count(lambda r: r["setup"] == "slow", "first_vs_history")
    loads = [x for r in results for x in r["load"]]
    summary = {
        "rows": [{"what": w, "counted": c, "alone": list(a), "with_history": list(h), "with_long_history": list(hl)}
                 for w, c, a, h, hl in rows],
        "shaped_identical_first_runs_false_alarms": list(ident),
        "load_min_median_max": [min(loads), statistics.median(loads), max(loads)] if loads else None}
    doc = {"meta": meta, "history_runs": HISTORY, "summary": summary, "pairs": results,
           "judged_at": datetime.now().isoformat(timespec="seconds"),
           "judged_with_commit": commit()}
    res = ROOT / "bench" / "results"
    (res / "gate-false-alarms.json").write_text(json.dumps(doc, indent=1))
    lines = [f"# Regression gate: false alarms and a real 10 % slowdown ({meta['started'][:10]})", "",
             f"Machine: {meta['machine']} (shared by several engineers: load average "
             f"{summary['load_min_median_max'][0]:.1f} .. {summary['load_min_median_max'][2]:.1f}, median "
             f"{summary['load_min_median_max'][1]:.1f}, around the runs). Runs measured with commit {meta['commit']} "
             f"({meta['started']} .. {meta.get('finished', '?')}); judged with commit {doc['judged_with_commit']}.",
             f"Commands: `python bench/gate_false_alarms.py collect --rounds 20 "
             f"--shaped-args '{' '.join(meta['shaped_extra'])}'` "
             f"then `judge` (raw runs: "
             f"bench/results/raw/{meta['started'][:10]}-{out.name}-{{shm,shaped}}.tar.xz; unpack both into one "
             f"directory and pass it to "
             f"`judge --out`). "
             f"Test: `ncclbench {' '.join(meta['test'])}` with `--nprocs 4` (shm), or over "
             f"{meta.get('shaped_hosts', 4)} namespace hosts (one rank each) with every link shaped to "
             f"{meta['rate_mbit']} Mbit/s and `{' '.join(meta['shaped_extra'])}` "
             f"(slowed: {int(meta['rate_mbit'] * meta['slowdown'])} Mbit/s in the second run).", "",
             "Each pair is judged by the gate (`check`, default --max-drop 5 %) twice: against its first run alone "
             "(then the gate knows only the size-to-size scatter of the pair, and says the noise of whole runs is "
             f"unknown), and against a baseline of the {HISTORY} newest good runs of the same command up to the "
             f"pair's first run (`baseline set NAME RUN --runs {HISTORY}`).", "",
             f"| pairs | counted | first run alone | baseline of {HISTORY} runs | baseline of up to {LONG_HISTORY} runs |",
             "|---|---|---:|---:|---:|"]
    for w, c, a, h, hl in rows:
        lines.append(f"| {w} | {c} | {a[0]} of {a[1]} | {h[0]} of {h[1]} | {hl[0]} of {hl[1]} |")
    lines += ["", f"Shaped setup, each slowed pair's first (unslowed) run against the {HISTORY} good runs before it: "
              f"{ident[0]} false alarms of {ident[1]}."]

    def fig(sel, key, figure, field):
        vals = [f[field] for r in results if sel(r) and key in r for f in r[key]["figures"] if f["figure"] == figure
                and f[field] is not None]
        if not vals:
            return "-"
        return f"{statistics.median(vals):.1f} ({min(vals):.1f} .. {max(vals):.1f})"

    lines += ["", "Why (medians over the pairs, range in brackets; judged against the baseline of "
              f"{HISTORY} runs):", "",
              "| pairs | figure | change, % worse | limit, % | noise (1 sd), % |", "|---|---|---:|---:|---:|"]
    for setup, per_iter, label in (("shm", False, "shm, no -I"), ("shm", True, "shm, -I 1"),
                                   ("slow", False, "shaped slowed, no -I"), ("slow", True, "shaped slowed, -I 1")):
        for figure in ("plateau busbw", "latency"):
            sel = (lambda r, s=setup, i=per_iter: r["setup"] == s and r["per_iter"] == i)
            lines.append(f"| {label} | {figure} | {fig(sel, 'with_history', figure, 'worse_pct')} | "
                         f"{fig(sel, 'with_history', figure, 'limit_pct')} | "
                         f"{fig(sel, 'with_history', figure, 'noise_pct')} |")
    sel_id = (lambda r: r["setup"] == "slow")
    first = [fig(sel_id, "first_vs_history", "plateau busbw", k) for k in ("worse_pct", "limit_pct", "noise_pct")]
    lines.append(f"| shaped, unslowed first runs | plateau busbw | {first[0]} | {first[1]} | {first[2]} |")
    lines += ["", "Reading: a figure fails only when its change is beyond both --max-drop and its limit (the noise "
              "times 3, or Student's t for a noise measured from few runs). Where the limit is larger than the "
              "injected slowdown's effect on the figure, the gate cannot tell that slowdown from the machine's own "
              "run-to-run variation, and says so by the limit it prints; on a quiet machine the same runs give a "
              "smaller noise and a smaller limit. 'First run alone' judges without the noise of whole runs (the "
              "gate prints that it is unknown): its catches are not evidence, as its false alarms show."]
    (res / "gate-false-alarms.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--out", required=True)
    c.add_argument("--rounds", type=int, default=20)
    c.add_argument("--setups", default="shm,slow")
    c.add_argument("--seeds", type=int, default=9, help="identical runs per variant before the pairs")
    c.add_argument("--rate-mbit", type=int, default=600)
    c.add_argument("--shaped-hosts", type=int, default=4,
                   help="namespace hosts (one rank each) of the shaped setup (2: no more ranks than this "
                        "VM's 2 cores, so the links, not CPU contention, set the pace)")
    c.add_argument("--shaped-args", default=" ".join(SHAPED_EXTRA),
                   help="options after the test's for the shaped setup (later options win: e.g. "
                        "'-b 1M -e 32M -n 12' for longer-averaged, less noisy large sizes)")
    c.add_argument("--src", default=None, help="run ncclbench from this src/ (e.g. a `git archive` snapshot)")
    j = sub.add_parser("judge")
    j.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.cmd == "collect":
        return collect(args)
    return judge(args)


if __name__ == "__main__":
    sys.exit(main())
