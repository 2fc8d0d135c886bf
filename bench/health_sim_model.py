"""Detection by fleet size, slowdown and fault kind, on the simulated fabric.

The whole scan (`ncclbench.health.core.scan.run_scan`, every phase, default
configuration) runs against `SimFabric` (8 GPUs a host, the measured noise of
simulation/fabric.py) with one injected fault: a GPU, a host's NICs (all
rails), a host pair's link, or NVLink within a node ("intra"), slowed by 10,
25, 50 or 90 %; and healthy fleets for false alarms.  Per cell:

* found: the injected component named and confirmed, on the right host(s);
* false alarms: confirmed findings about anything else (summed over trials);
* scan time: the simulated scan's clock (median), TimeModel of fabric.py.

`--src DIR` runs another checkout's `src` (the code before a change) on the
same seeds.  Steps run smallest fleet first and stop at `--budget-s`; what
was not run is listed in the output.

`--sigma-run` sets the run-to-run noise of a group (default the measured 1.2 %), for
how the verdicts hold on a fleet noisier than the recorded floor.

`--hosts-per-leaf N` gives the scan a topology (`--topology`: hosts 0..N-1 under leaf0, the next
N under leaf1, ...) and adds the fault kind "path": the path between two random leaves slowed
(every host pair crossing between them, every rail); found means the scan names that path
(component "path", detail "leafX<->leafY").  `--leaf-crossings M` sets the host pairs crossing each
leaf pair (`ScanConfig.leaf_crossings`; the leaf size: one leaf matching a round, L - 1 rounds).
`--trials-at SIZE=N` sets a size's trials (else `trials_for`).  `--scan-without-topology` keeps the
leaves of the fabric (and the path kind) but scans without them: what the scan says of a slow path
when it is not told the leaves.

Usage: python bench/health_sim_model.py OUT_DIR [--budget-s 600] [--src DIR]
       [--sizes 3 4 8 16 64 256 1024] [--trials 20] [--label after] [--sigma-run 0.02]
       [--hosts-per-leaf 32] [--leaf-crossings 8] [--trials-at 1024=10] [--scan-without-topology]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SLOWDOWNS = (0.10, 0.25, 0.50, 0.90)
KINDS = {"gpu": "gpu", "nic": "nic-node", "link": "link-random", "nvlink": "intra"}
PATH_KIND = {"path": "leaf-path"}  # with --hosts-per-leaf only (a topology to name the leaves)


def trials_for(nhosts: int, trials: int) -> int:
    """Fewer trials at the large fleets (a 1024-host scan is ~0.5 s of numpy on a shared core)."""
    if nhosts >= 1024:
        return max(1, trials // 10)
    if nhosts >= 256:
        return max(2, trials // 5)
    return trials


def topology_config(fleet, per_leaf: int | None, crossings: int | None) -> tuple[dict, object]:
    """ScanConfig keywords and the Leaves for a topology of `per_leaf` hosts a leaf (none: {}, None)."""
    if not per_leaf:
        return {}, None
    from ncclbench.health.core.leaf_switches import Topology

    topo = Topology({h: f"leaf{i // per_leaf}" for i, h in enumerate(fleet.hosts)}, f"{per_leaf} hosts a leaf")
    kw = {"topology": topo} | ({"leaf_crossings": crossings} if crossings else {})
    return kw, topo.leaves_for(fleet.hosts)


def cell(nhosts: int, kind: str, slowdown: float, trials: int, seed: int, sigma_run: float | None = None,
         per_leaf: int | None = None, crossings: int | None = None, blind: bool = False) -> dict:
    """One (size, kind, slowdown) cell: found, false alarms, median scan time.  `blind`: the fabric
    has its leaves (`per_leaf`), the scan is not told them."""
    from ncclbench.health.core.fleet import Fleet
    from ncclbench.health.core.scan import ScanConfig, run_scan
    from ncclbench.simulation.fabric import FabricSpec, SimFabric, fault_scenario

    spec = FabricSpec() if sigma_run is None else FabricSpec(sigma_run=sigma_run)

    fleet = Fleet.uniform(nhosts, 8)
    config, leaves = topology_config(fleet, per_leaf, crossings)
    if blind:
        config = {}
    found = false_alarms = 0
    times = []
    alarms: dict[str, int] = {}  # false alarms by component
    for t in range(trials):
        rng = np.random.default_rng([seed, nhosts, list(KINDS).index(kind) if kind in KINDS else
                                     (8 if kind in PATH_KIND else 9), t])
        if kind in PATH_KIND:
            faults, want = fault_scenario(PATH_KIND[kind], fleet, rng, factor=1.0 - slowdown, leaves=leaves)
        else:
            faults, want = fault_scenario(KINDS.get(kind, "healthy"), fleet, rng, factor=1.0 - slowdown)
        fabric = SimFabric(fleet, faults, spec, rng=rng)
        rep = run_scan(fleet, ScanConfig(**config), fabric)
        names = {fleet.hosts[h] for h in want.get("hosts", ())}
        hit = [f for f in rep.confirmed if want and f.component == want["component"] and set(f.hosts) == names
               and (f.component != "path" or f.detail == want["detail"])]
        found += bool(hit)
        for f in rep.confirmed:
            if f not in hit:
                false_alarms += 1
                alarms[f.component] = alarms.get(f.component, 0) + 1
        times.append(fabric.clock_s)
    return {"nhosts": nhosts, "kind": kind, "slowdown": slowdown, "trials": trials,
            "found_pct": None if kind == "healthy" else 100.0 * found / trials,
            "false_alarms": false_alarms, "false_alarms_by_component": alarms,
            "scan_s_median": float(np.median(times)), **({"hosts_per_leaf": per_leaf} if per_leaf else {}),
            **({"leaf_crossings": crossings} if crossings else {}), **({"scan_without_topology": True} if blind else {})}


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# Health detection on the simulated fabric ({meta['label']})", "",
             f"{meta['date']}, {meta['machine']}, commit {meta['commit']}, source `{meta['src']}`, "
             f"no GPU (simulation), NCCL: none."
             + (f" Run-to-run noise of a group {100 * meta['sigma_run']:.1f} % (--sigma-run; measured: 1.2 %)."
                if meta.get("sigma_run") is not None else ""), "", f"Command: `{meta['command']}`", "",
             "found % (false alarms) [median simulated scan s] per fleet size; healthy rows: false alarms only.", "",
             "| kind | slowdown | " + " | ".join(str(n) for n in meta["sizes"]) + " |",
             "|---|---|" + "---|" * len(meta["sizes"])]
    keys = dict.fromkeys((r["kind"], r["slowdown"]) for r in rows)
    for kind, slow in keys:
        cells = []
        for n in meta["sizes"]:
            r = next((x for x in rows if (x["kind"], x["slowdown"], x["nhosts"]) == (kind, slow, n)), None)
            if r is None:
                cells.append("not run")
            elif r["found_pct"] is None:
                cells.append(f"({r['false_alarms']}/{r['trials']}) [{r['scan_s_median']:.0f}]")
            else:
                cells.append(f"{r['found_pct']:.0f} ({r['false_alarms']}/{r['trials']}) [{r['scan_s_median']:.0f}]")
        lines.append(f"| {kind} | {'-' if kind == 'healthy' else f'{slow:.0%}'} | " + " | ".join(cells) + " |")
    if meta["not_run"]:
        lines += ["", f"Not run (budget {meta['budget_s']} s spent): {', '.join(meta['not_run'])}"]
    if meta.get("one_leaf"):
        lines += ["", f"No path between leaves (one leaf): {', '.join(meta['one_leaf'])}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--budget-s", type=float, default=600.0)
    ap.add_argument("--src", default=str(ROOT / "src"), help="the ncclbench source tree to run")
    ap.add_argument("--sizes", type=int, nargs="+", default=[3, 4, 8, 16, 64, 256, 1024])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", nargs="+", default=None,
                    help=f"of healthy, {', '.join([*KINDS, *PATH_KIND])} (default: all; path with --hosts-per-leaf)")
    ap.add_argument("--hosts-per-leaf", type=int, default=None,
                    help="give the scan a topology of this many hosts a leaf (--topology), and the path kind")
    ap.add_argument("--leaf-crossings", type=int, default=None,
                    help="host pairs crossing each leaf pair (ScanConfig.leaf_crossings; default the scan's)")
    ap.add_argument("--trials-at", nargs="*", default=[], metavar="SIZE=N", help="trials at one size")
    ap.add_argument("--scan-without-topology", action="store_true",
                    help="with --hosts-per-leaf: the fabric has leaves (and the path kind), the scan is not told them")
    ap.add_argument("--label", default="after")
    ap.add_argument("--sigma-run", type=float, default=None,
                    help="run-to-run noise of a group (FabricSpec.sigma_run; default the measured 1.2 %%): "
                         "how the verdicts hold where a fleet is noisier than the recorded floor")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, args.src)
    from provenance import commit

    kinds = args.kinds or ["healthy", *KINDS, *(PATH_KIND if args.hosts_per_leaf else ())]
    at = {int(k): int(v) for k, v in (x.split("=", 1) for x in args.trials_at)}
    start = time.monotonic()
    rows, not_run, one_leaf = [], [], []
    for n in args.sizes:
        for kind in kinds:
            for slow in ((0.0,) if kind == "healthy" else SLOWDOWNS):
                if time.monotonic() - start > args.budget_s:
                    not_run.append(f"{kind} {slow:.0%} at {n}")
                    continue
                if kind in PATH_KIND and (not args.hosts_per_leaf or n <= args.hosts_per_leaf):
                    one_leaf.append(f"{kind} {slow:.0%} at {n}")
                    continue
                rows.append(cell(n, kind, slow, at.get(n, trials_for(n, args.trials)), args.seed, args.sigma_run,
                                 args.hosts_per_leaf, args.leaf_crossings, args.scan_without_topology))
                print(json.dumps(rows[-1]), flush=True)
    meta = {"label": args.label, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.node()} ({os.cpu_count()} CPUs)", "gpus": 0, "nccl": None,
            "commit": commit(), "src": args.src, "command": " ".join(["python", *sys.argv]),
            "sizes": args.sizes, "budget_s": args.budget_s, "not_run": not_run, "sigma_run": args.sigma_run,
            "hosts_per_leaf": args.hosts_per_leaf, "leaf_crossings": args.leaf_crossings, "seed": args.seed,
            "one_leaf": one_leaf, "scan_without_topology": args.scan_without_topology}
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"health-sim-model-{args.label}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (out / f"health-sim-model-{args.label}.md").write_text(markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
