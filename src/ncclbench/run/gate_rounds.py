"""The regression gate's latency figure, measured for runs that will be gated (`--gate`, implied
by `--baseline NAME`): the table is the run's own, timed as nccl-tests times it; after it, the
sizes <= 64 KiB of the sweep are measured again in several rounds, and the gate reads those.

Why (bench/results/gate-trials-gpu-2026-11-28-2xH200/, 2x H200, NCCL 2.28.9): small-message time
moves between processes far more than within one.  Over 25 identical runs the latency figure (the
median time of the sizes <= 64 KiB) moved 10.9 % per run, while inside each run the out-of-place and
in-place columns, timed back to back, agreed within 1.5 % (2.5 % in the held-out collection) and
correlated 0.98 across runs; -N 20 cycles of one process moved 1.3-5 % (hypercube runs of
2026-11-21, 4x H200).  Runs 3 s apart did not correlate (0.05 and 0.18; lag-one 0.00 over 20
rounds): the shift is drawn once per process, not by the machine's drift.  More iterations or
cycles in one process cannot average it; only more draws can.  So each round runs on a fresh
communicator where the backend makes one (NCCL: a new ncclComm of the same ranks; the CPU backend:
a duplicated MPI communicator), which renews the per-communicator state (channels, buffers,
connections) and spreads the samples in time.  Measured since (1x H200, 2026-11-28,
bench/results/gate-rounds-1xH200-2026-11-28/): what the rounds of a run share is the machine's
state over minutes, not the process -- rounds that were each a process of their own
(run/gate_processes.py, opt-in) agreed within 3 % inside a run and drifted as much between runs.
The record says what a round renewed (`renews`: "process", "communicator" or "nothing"), and the
gate weighs the rounds' spread by it.

Per round, every small size is timed out of place and in place like a table row, with enough
iterations that one timed loop lasts about GATE_LOOP_US (more samples where they cost
microseconds; never fewer than -n), no checking.  The gate takes per size one value of the rounds
-- the median of its rounds on GPUs, the fastest round on the CPU backend (store/noise.ROUND_FIGURE says
why) -- then the median over sizes (store/summary_stats.round_profile, store/gate.py).  One line after
the table says what was done; the rows of the table are untouched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from typing import Any

from ..backends.threads import on_each_thread
from ..backends.worker import Worker
from ..output.numfmt import human_size
from .gate_processes import FRESH_PROCESS, GATE_MAX_SIZE
from .plan import RunPlan
from .plan_runner import combine_time
from .timing import Placement, measure, warm_up

# One timed loop of a round lasts about this long: on 2x H200 a small op costs ~12 us, so ~170
# iterations; on the CPU backend over veth ~25-60 us.  Per-iteration jitter averages over the loop;
# what a loop cannot average (the per-process shift) the rounds are for.  28 loops (14 sizes x 2
# placements) of 2 ms: ~60 ms a round beside a communicator's set-up.
GATE_LOOP_US = 2000.0
# Never more iterations than this in one loop (a size whose pilot loop read near 0 us).
GATE_MAX_ITERS = 1000


def gate_sizes(plan: RunPlan) -> list[int]:
    """The sizes of the sweep the rounds measure: those <= 64 KiB, each once."""
    return sorted({s for s in plan.sizes.sweep() if 0 < s <= GATE_MAX_SIZE})


def run_gate_rounds(plan: RunPlan, workers: list[Worker], fresh: bool = True) -> dict[str, Any] | None:
    """Measure the rounds on every worker of this process (collective over the world: every
    process calls it); the record for the run's summary at the reporting worker, None elsewhere
    or when there is nothing to measure.  `fresh`: each round on fresh communicators; False in a
    round job (run/gate_processes.py), whose process is itself fresh."""
    results = on_each_thread(len(workers), lambda i: _rounds(plan, workers[i], fresh))
    return results[0] if workers[0].is_reporter else None


def _rounds(plan: RunPlan, w: Worker, fresh_comms: bool) -> dict[str, Any] | None:
    opts, coll = plan.options, plan.collective
    sizes = gate_sizes(plan)
    nrounds = opts.gate_rounds
    if not sizes or nrounds <= 0 or coll.check_nranks(w.nranks) is not None:
        return None
    nworkers = int(w.allreduce_host(1, "sum"))
    timing = dataclasses.replace(opts, check=0, per_iter_timing=False)
    tests = list(plan.tests())
    iters: dict[tuple[tuple[str, str, int], int], int] = {}  # (test, size) -> iterations, chosen in round 1 by a pilot loop
    series: dict[tuple[str, str, int], dict[str, Any]] = {}  # (type, op, root) -> its rounds
    how: list[str] = []
    t0 = time.perf_counter()
    for r in range(nrounds):
        with w.fresh_communicators() if fresh_comms else contextlib.nullcontext(FRESH_PROCESS) as fresh:
            how.append(fresh)
            for dtype, op, root in tests:
                elt = dtype.itemsize
                rec = series.setdefault((dtype.name, op.name, root), {"sizes": [], "out_of_place": [], "in_place": []})
                row_o, row_i = [], []
                for size in sizes:
                    counts = coll.counts(size // elt, w.nranks, elt)
                    nbytes = counts.size_bytes(elt)
                    if nbytes <= 0:
                        continue
                    places = [Placement(w, coll, dtype, op, root, counts, ip, opts.unalign) for ip in (False, True)]
                    warm_up(w, places[0], max(1, opts.warmup_iters))
                    key = ((dtype.name, op.name, root), nbytes)
                    if key not in iters:
                        iters[key] = _iterations(w, places[0], timing)
                    n = iters[key]
                    out = []
                    for pl in places:
                        m, _ = measure(w, pl, dataclasses.replace(timing, iters=n), verify=False)
                        out.append(combine_time(w, m.time_us, opts.average, nworkers))
                    if r == 0:
                        rec["sizes"].append(nbytes)
                    row_o.append(out[0])
                    row_i.append(out[1])
                rec["out_of_place"].append(row_o)
                rec["in_place"].append(row_i)
    seconds = time.perf_counter() - t0
    renews = "process" if not fresh_comms else "communicator" if how and how[-1] != "on the run's communicator" \
        else "nothing"
    return {"rounds": nrounds, "fresh": how[-1] if how else "on the run's communicator", "renews": renews,
            "loop_us": GATE_LOOP_US,
            "seconds": round(seconds, 3),
            "iterations": sorted({n for n in iters.values()}),
            "series": [{"type": t, "redop": o, "root": root, **rec} for (t, o, root), rec in series.items()]}


def _iterations(w: Worker, place: Placement, timing: Any) -> int:
    """Iterations for one size's loops: a pilot loop of -n (at least 1) iterations, its slowest rank's
    time per op, as many as fill GATE_LOOP_US; never fewer than -n nor more than GATE_MAX_ITERS.  The
    same on every rank (the slowest rank's figure is agreed on)."""
    n0 = max(1, timing.iters)
    m, _ = measure(w, place, dataclasses.replace(timing, iters=n0), verify=False)
    t = w.allreduce_host(m.time_us if math.isfinite(m.time_us) else 0.0, "max")
    want = GATE_MAX_ITERS if t <= 0 else math.ceil(GATE_LOOP_US / t)
    return int(min(GATE_MAX_ITERS, max(n0, want)))


def gate_lines(record: dict[str, Any] | None, median: bool) -> list[str]:
    """What the rounds did and found, as `#` lines after the table (one per series); the figure as
    the gate reads it: per size the median of its rounds (`median`) or the fastest round."""
    if not record:
        return []
    out = []
    its = record.get("iterations") or [0]
    for s in record.get("series", []):
        sizes = s.get("sizes") or []
        if not sizes:
            continue
        label = " ".join(x for x in (s["type"], s["redop"] if s["redop"] not in ("", "none") else "",
                                     f"root {s['root']}" if int(s["root"]) >= 0 else "") if x)
        figs = [statistics.median(r) for r in s.get("out_of_place", []) if r]
        med = statistics.median(_per_size(s.get("out_of_place", []), median))
        spread = f"; rounds {min(figs):.2f}..{max(figs):.2f} us" if len(figs) > 1 else ""
        n = f"{its[0]}" if len(its) == 1 else f"{its[0]}-{its[-1]}"
        out.append(f"# gate latency ({label}): {record['rounds']} rounds, each {record['fresh']}, of {len(sizes)} "
                   f"sizes {human_size(sizes[0])}..{human_size(sizes[-1])} x {n} iterations (about "
                   f"{record['loop_us'] / 1000:g} ms a loop) in {record['seconds']:.1f} s: {med:.2f} us out of place, "
                   f"the median over sizes of each size's {'median of its rounds' if median else 'fastest round'}"
                   f"{spread}; the table above is the run's own")
    return out


def _per_size(rounds: list[list[float]], median: bool) -> list[float]:
    cols = list(zip(*rounds)) if rounds else []
    return [statistics.median(c) if median else min(c) for c in cols] or [math.nan]
