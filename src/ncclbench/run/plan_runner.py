"""The benchmark loop: datatypes x ops x roots x cycles x sizes, as the run
plan lists them (docs/behaviour.md, "What a run loops over"), combining each
measurement across ranks and handing finished rows to the reporters.  It
knows no collective by name: everything collective-specific comes from the
plan's `Collective`, everything device-specific from the `Worker`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from ..backends.threads import on_each_thread
from ..backends.worker import Worker
from ..core.config import Average
from ..core.datatypes import DataType, RedOp
from ..core.results import HalfResult, PerIterStats, ResultRow, RunSummary
from ..output import Reporter
from ..output.numfmt import now_string
from .iteration_stats import bandwidths, elementwise_max, per_iter_stats
from .plan import RunPlan
from .timing import Measurement, Placement, measure, warm_up


def combine_time(worker: Worker, value: float, average: int, nworkers: int) -> float:
    """-a (`Average`): its own value (rank 0's is printed), or the mean, min or max over every worker."""
    if average == Average.RANK0:
        return value
    if average == Average.MIN:
        return worker.allreduce_host(value, "min")
    if average == Average.MAX:
        return worker.allreduce_host(value, "max")
    return worker.allreduce_host(value, "sum") / nworkers


def min_bw_gate() -> float | None:
    raw = os.environ.get("NCCL_TESTS_MIN_BW")
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        return None


class WorkerRun:
    """Runs the whole plan on one worker (one host thread)."""

    def __init__(self, plan: RunPlan, worker: Worker, reporter: Reporter | None = None):
        self.plan, self.opts, self.coll, self.worker = plan, plan.options, plan.collective, worker
        self.reporter = reporter if worker.is_reporter else None
        self.errors = 0  # placement runs with wrong elements on this worker's ranks
        self.busbw_sum = 0.0
        self.halves = 0
        self.nworkers = 1

    # -- one half-row ------------------------------------------------------------------
    def _half(self, placement: Placement, dtype: DataType, verify: bool) -> HalfResult:
        w, opts, coll = self.worker, self.opts, self.coll
        m, wrong_world = measure(w, placement, opts, verify)
        if m.wrong:
            self.errors += 1
        t = combine_time(w, m.time_us, opts.average, self.nworkers)
        nbytes = coll.algbw_bytes(placement.counts, dtype.itemsize, w.nranks)
        algbw, busbw = bandwidths(nbytes, t, coll.bus_bandwidth_factor(w.nranks))
        per_iter = self._per_iter(m)
        if self.reporter is not None:
            for line in coll.summary_lines(placement.args[0], t):
                self.reporter.message(line)
        self.busbw_sum += busbw
        self.halves += 1
        wrong = wrong_world if (opts.check and verify) else None
        return HalfResult(t, m.cpu_time_us, algbw, busbw, wrong, per_iter)

    def _per_iter(self, m: Measurement) -> PerIterStats | None:
        if m.samples_us is None:
            return None
        # One row per world process (a backend with several threads per process
        # merges its threads' rows by element-wise max before gathering).
        per_process = self.worker.gather_host(m.samples_us)
        if per_process is None:
            return None
        times = elementwise_max(per_process)
        return per_iter_stats(times, self.opts.per_iter_skip,
                              per_process if len(per_process) > 1 else None)

    # -- the loops ----------------------------------------------------------------------
    def time_test(self, dtype: DataType, op: RedOp, root: int) -> None:
        w, opts, coll, sizes = self.worker, self.opts, self.coll, self.plan.sizes
        w.barrier()
        elt = dtype.itemsize
        for size in sizes.warmup():
            counts = coll.counts(size // elt, w.nranks, elt)
            warm_up(w, Placement(w, coll, dtype, op, root, counts, False, opts.unalign),
                    opts.warmup_iters)
        cycle = 0
        forever = self.plan.cycles == 0
        while forever or cycle < self.plan.cycles:
            cycle += 1
            for size in sizes.sweep():
                counts = coll.counts(size // elt, w.nranks, elt)
                oop = self._half(Placement(w, coll, dtype, op, root, counts, False, opts.unalign), dtype, True)
                ip = self._half(Placement(w, coll, dtype, op, root, counts, True, opts.unalign), dtype,
                                coll.checks_in_place)
                if self.reporter is not None:
                    stamp = now_string() if opts.report_timestamps else None
                    self.reporter.row(ResultRow(counts.size_bytes(elt), counts.param_count, dtype.name,
                                                op.name, root, oop, ip, stamp))

    def run(self) -> RunSummary:
        w, opts = self.worker, self.opts
        self.nworkers = int(w.allreduce_host(1, "sum"))
        reason = self.coll.check_nranks(w.nranks)
        if reason is not None:
            # nccl-tests prints this from every thread and measures nothing.
            print(reason, flush=True)
        else:
            for dtype, op, root in self.plan.tests():
                self.time_test(dtype, op, root)
        oob = int(w.allreduce_host(self.errors, "sum"))
        avg = self.busbw_sum / self.halves if self.halves else math.nan
        return RunSummary(out_of_bounds=oob, avg_busbw=avg, min_bw_gate=min_bw_gate(), gate_ok=None,
                          memory_line=w.memory_report() if opts.memory_report else None)


def run_workers(plan: RunPlan, workers: Sequence[Worker], reporter: Reporter | None = None) -> RunSummary | None:
    """Run the plan on every worker of this process (one thread each) and return
    the summary seen by the reporting worker (None on other processes)."""
    runs = [WorkerRun(plan, w, reporter) for w in workers]
    if len(runs) == 1:  # on_each_thread's one-thread case, without handing the run there and back
        summaries = [runs[0].run()]
    else:
        summaries = on_each_thread(len(runs), lambda i: runs[i].run())
    return summaries[0] if workers[0].is_reporter else None
