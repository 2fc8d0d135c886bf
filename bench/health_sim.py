"""ncclbench health at 64, 256 and 1024 nodes x 8 GPUs, by simulation.

The scan's own schedule, judgement and localization (ncclbench.health) run
against `SimFabric` (nominal capacities, injected faults, measured noise; see
ncclbench/simulation/fabric.py for every constant and its source); the
together-style and SuperBench-style strategies (bench/health_peers.py) run
on the same fabric.  Per scale and fault kind, `--trials` fleets, each with a
new random fault location and noise:

* found: the injected fault named and confirmed (for ours: the right
  component on the right host(s), rail or link; for the peers: the faulty
  node in their list, or the link in SuperBench's);
* exact: found, and nothing else confirmed;
* false alarms: confirmed findings about healthy parts (summed over trials),
  and how many trials had any;
* suspects: ours only - unconfirmed suspects reported as such (not verdicts);
* time: the simulated scan under TimeModel (direct communicator creation;
  "split" adds a 150 s world NCCL init and a world allgather per split).

Usage: python bench/health_sim.py [--nodes 64 256 1024] [--trials 100] [--seed 1]
       [--out bench/results/health-sim.json] [--md bench/results/health-sim.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from health_peers import JOB_START_S, POLL_S, superbench_scan, together_scan, tournament_pairs, trimmed_baseline  # noqa: E402
from provenance import commit as provenance_commit  # noqa: E402

from ncclbench.health.core.fleet import Fleet  # noqa: E402
from ncclbench.health.core.scan import ScanConfig, run_scan  # noqa: E402
from ncclbench.health.core.scan_schedule import disjoint_pairs  # noqa: E402
from ncclbench.simulation.fabric import FabricSpec, SimFabric, TimeModel, fault_scenario  # noqa: E402

OURS_KINDS = ("healthy", "nic-node", "nic-rail", "link-r1", "link-random", "dead", "gpu", "intra")
PEER_KINDS = ("healthy", "nic-node", "nic-rail", "link-r1", "link-random", "dead")


def matches(f, want: dict, fleet: Fleet) -> bool:
    return (f.confirmed and f.component == want["component"]
            and set(f.hosts) == {fleet.hosts[h] for h in want["hosts"]}
            and (want["detail"] is None or f.detail == want["detail"]))


def consistent(f, want: dict) -> bool:
    """True but less specific: a rail named slow across the fabric because of one
    host's NIC on that rail (the pair rounds did not pin the host)."""
    return (f.confirmed and f.component == "rail" and want.get("component") == "node nic"
            and want.get("detail") in (f.detail, "all rails"))


def run_ours(fleet: Fleet, kind: str, trials: int, seed: int, spec: FabricSpec, tm: TimeModel,
             split_tm: TimeModel) -> dict:
    pairs, _ = disjoint_pairs(list(range(fleet.nhosts)))
    r1 = {a: b for a, b in pairs} | {b: a for a, b in pairs}
    found = exact = false_alarms = fa_trials = suspects = vague = 0
    times, split_times, rounds = [], [], []
    for t in range(trials):
        rng = np.random.default_rng([seed, fleet.nhosts, OURS_KINDS.index(kind), t])
        faults, want = fault_scenario(kind, fleet, rng, round1_pairs=r1)
        fabric = SimFabric(fleet, faults, spec, tm, rng)
        rep = run_scan(fleet, ScanConfig(), fabric)
        conf = rep.confirmed
        hit = [f for f in conf if want and matches(f, want, fleet)]
        near = [f for f in conf if want and f not in hit and consistent(f, want)]
        wrong = [f for f in conf if f not in hit and f not in near]
        vague += bool(near) and not hit
        found += bool(hit)
        exact += bool(hit) and not wrong
        false_alarms += len(wrong)
        fa_trials += bool(wrong)
        suspects += sum(1 for f in rep.findings if f.verdict.startswith("suspect"))
        times.append(fabric.clock_s)
        split_times.append(fabric.scan_s(split_tm))
        rounds.append(len(rep.rounds))
    out = summary("ncclbench health", kind, trials, found, exact, false_alarms, fa_trials, times,
                  rounds, suspects=suspects, split_times=split_times)
    out["less_specific"] = vague
    return out


def run_peer(name: str, fleet: Fleet, kind: str, trials: int, seed: int, spec: FabricSpec, tm: TimeModel) -> dict:
    pairs, _ = disjoint_pairs(list(range(fleet.nhosts)))
    r1 = {a: b for a, b in pairs} | {b: a for a, b in pairs}
    # the stored baseline both peers need: one healthy fleet of this size, seeded once
    base_fabric = SimFabric(fleet, None, spec, tm, np.random.default_rng([seed, fleet.nhosts, 99]))
    if name == "together-style":
        a = np.arange(0, fleet.nhosts - 1, 2)
        baseline = trimmed_baseline(base_fabric.pair_values(a, a + 1))
    else:
        a, b = tournament_pairs(fleet.nhosts)
        baseline = float(np.nanmedian(base_fabric.pair_values(a, b)))
    found = exact = false_alarms = fa_trials = 0
    times, rounds = [], []
    for t in range(trials):
        rng = np.random.default_rng([seed, fleet.nhosts, PEER_KINDS.index(kind), t, 7])
        faults, want = fault_scenario(kind, fleet, rng, round1_pairs=r1)
        fabric = SimFabric(fleet, faults, spec, tm, rng)
        out = together_scan(fabric, baseline, tm) if name == "together-style" else superbench_scan(fabric, baseline, tm)
        named = [("node", (n,)) for n in sorted(out.nodes)] + [("link", lk) for lk in sorted(out.links)]
        hit = []
        if want:
            if want["component"] == "link":
                hit = [x for x in named if x == ("link", tuple(want["hosts"]))]
            else:
                hit = [x for x in named if x == ("node", tuple(want["hosts"]))]
        wrong = [x for x in named if x not in hit]
        found += bool(hit)
        exact += bool(hit) and not wrong
        false_alarms += len(wrong)
        fa_trials += bool(wrong)
        times.append(out.time_s)
        rounds.append(out.rounds)
    return summary(name, kind, trials, found, exact, false_alarms, fa_trials, times, rounds)


def summary(strategy, kind, trials, found, exact, false_alarms, fa_trials, times, rounds, suspects=None,
            split_times=None) -> dict:
    out = {"strategy": strategy, "fault": kind, "trials": trials,
           "found_pct": None if kind == "healthy" else 100.0 * found / trials,
           "exact_pct": None if kind == "healthy" else 100.0 * exact / trials,
           "false_alarms": false_alarms, "trials_with_false_alarm": fa_trials,
           "time_s_median": float(np.median(times)), "time_s_max": float(np.max(times)),
           "rounds_median": float(np.median(rounds)), "rounds_max": int(np.max(rounds))}
    if suspects is not None:
        out["unconfirmed_suspects"] = suspects
    if split_times is not None:
        out["time_s_split_median"] = float(np.median(split_times))
        out["time_s_split_max"] = float(np.max(split_times))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--faults", nargs="+", default=list(OURS_KINDS))
    ap.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--sigma-run", type=float, nargs="+", default=None,
                    help="also run healthy and nic-node at the largest scale with these run-to-run sigmas")
    ap.add_argument("--dip-p", type=float, default=None, help="probability of a dip per timed block "
                    "(default FabricSpec's 0.005; 0 = no dips)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--md", default=None)
    args = ap.parse_args()

    commit = provenance_commit()  # the code this run imports (HEAD may move while it runs)
    spec, tm = FabricSpec(), TimeModel()
    if args.dip_p is not None:
        spec = replace(spec, dip_p=args.dip_p)
    split_tm = replace(tm, path="split")
    rows: list[dict] = []
    t0 = time.perf_counter()
    for n in args.nodes:
        fleet = Fleet.uniform(n, args.gpus)
        for kind in args.faults:
            t = time.perf_counter()
            rows.append({"nodes": n, **run_ours(fleet, kind, args.trials, args.seed, spec, tm, split_tm)})
            print(f"{n:5d} nodes {kind:12s} ours   {_short(rows[-1])}  ({time.perf_counter() - t:.1f} s)",
                  file=sys.stderr, flush=True)
        if args.peers:
            for peer in ("together-style", "SuperBench-style"):
                for kind in args.faults:
                    if kind not in PEER_KINDS:
                        continue
                    t = time.perf_counter()
                    rows.append({"nodes": n, **run_peer(peer, fleet, kind, args.trials, args.seed, spec, tm)})
                    print(f"{n:5d} nodes {kind:12s} {peer[:8]} {_short(rows[-1])}  ({time.perf_counter() - t:.1f} s)",
                          file=sys.stderr, flush=True)
    sens: list[dict] = []
    for sigma in args.sigma_run or []:
        n = max(args.nodes)
        fleet = Fleet.uniform(n, args.gpus)
        sp = replace(spec, sigma_run=sigma)
        for kind in ("healthy", "nic-node", "nic-rail"):
            sens.append({"nodes": n, "sigma_run": sigma, **run_ours(fleet, kind, args.trials, args.seed, sp, tm,
                                                                    split_tm)})
            print(f"sigma {sigma:.3f} {kind:10s} ours {_short(sens[-1])}", file=sys.stderr, flush=True)
            if args.peers:
                for peer in ("together-style", "SuperBench-style"):
                    sens.append({"nodes": n, "sigma_run": sigma,
                                 **run_peer(peer, fleet, kind, args.trials, args.seed, sp, tm)})
                    print(f"sigma {sigma:.3f} {kind:10s} {peer[:8]} {_short(sens[-1])}", file=sys.stderr, flush=True)
    doc = {
        "benchmark": "ncclbench health: simulated fleets, ours vs together-style vs SuperBench-style",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "command": "python " + " ".join([os.path.relpath(__file__, ROOT)] + sys.argv[1:]),
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "wall_s": round(time.perf_counter() - t0, 1),
        "fabric": vars(spec), "time_model": {k: v for k, v in vars(tm).items()},
        "peer_constants": {"job_start_s": JOB_START_S, "together_poll_s": POLL_S},
        "rows": rows, "sensitivity": sens,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    if args.md:
        Path(args.md).write_text(markdown(doc))
    print(markdown(doc))
    return 0


def _short(r: dict) -> str:
    f = "-" if r["found_pct"] is None else f"{r['found_pct']:.0f}%"
    e = "-" if r["exact_pct"] is None else f"{r['exact_pct']:.0f}%"
    return f"found {f:>4} exact {e:>4} FA {r['false_alarms']:3d} t {r['time_s_median']:.0f}s"


def _pct(v) -> str:
    return "-" if v is None else f"{v:.0f} %"


def markdown(doc: dict) -> str:
    lines = ["| nodes | strategy | fault | found | exact | false alarms (trials) | unconfirmed suspects | "
             "less specific | scan time median / max (s) | split path (s) | rounds |", "|" + "---|" * 11]
    for r in doc["rows"]:
        split = (f"{r['time_s_split_median']:.0f} / {r['time_s_split_max']:.0f}"
                 if "time_s_split_median" in r else "-")
        lines.append(f"| {r['nodes']} | {r['strategy']} | {r['fault']} | {_pct(r['found_pct'])} | "
                     f"{_pct(r['exact_pct'])} | {r['false_alarms']} ({r['trials_with_false_alarm']}) | "
                     f"{r.get('unconfirmed_suspects', '-')} | {r.get('less_specific', '-')} | "
                     f"{r['time_s_median']:.0f} / {r['time_s_max']:.0f} | "
                     f"{split} | {r['rounds_median']:.0f} (max {r['rounds_max']}) |")
    if doc["sensitivity"]:
        lines += ["", "| nodes | sigma_run | strategy | fault | found | exact | false alarms (trials) | "
                      "unconfirmed suspects | less specific |", "|" + "---|" * 9]
        for r in doc["sensitivity"]:
            lines.append(f"| {r['nodes']} | {100 * r['sigma_run']:.1f} % | {r['strategy']} | {r['fault']} | "
                         f"{_pct(r['found_pct'])} | {_pct(r['exact_pct'])} | {r['false_alarms']} "
                         f"({r['trials_with_false_alarm']}) | {r.get('unconfirmed_suspects', '-')} | "
                         f"{r.get('less_specific', '-')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
