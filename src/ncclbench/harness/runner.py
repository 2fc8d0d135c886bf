"""The benchmark loop: datatypes x ops x roots x cycles x sizes (spec §2.6),
combining each measurement across ranks and handing finished rows to the
reporters.  It knows no collective by name: everything collective-specific
comes from the `Collective` module, everything device-specific from the
`Worker`.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Sequence

from ..backends.base import Worker
from ..collectives import lookup
from ..collectives.base import Collective
from ..config import BenchOptions
from ..datatypes import DATATYPE_BY_NAME, EMPTY_OP, NO_OP, REDOP_BY_NAME, DataType, RedOp
from ..errors import ArgumentError, BenchError, ExitCode
from ..results import HalfResult, ResultRow, RunSummary
from .stats import bandwidths, elementwise_max, per_iter_stats
from .sweep import sweep_sizes, warmup_sizes
from .timing import Measurement, Placement, measure, warm_up


def validate_for_run(opts: BenchOptions) -> None:
    """Combinations nccl-tests accepts but crashes or hangs on (spec §3.2, §8.15)."""
    if opts.cudagraph and opts.blocking in (1, 2):
        raise ArgumentError(f"-z {opts.blocking} cannot be combined with CUDA graphs (-G): "
                            "a blocking wait inside stream capture is not permitted")
    if opts.min_bytes <= 0:
        raise ArgumentError("invalid size for 'minbytes': must be at least 1 byte")


def roots_for(coll: Collective, opts: BenchOptions, nranks: int) -> list[int]:
    if not coll.rooted:
        return [-1]
    if opts.root == -1:
        return list(range(nranks))
    if not 0 <= opts.root < nranks:
        raise ArgumentError(f"invalid root {opts.root}: must be -1 (all) or 0..{nranks - 1}")
    return [opts.root]


def ops_for(coll: Collective, opts: BenchOptions) -> list[RedOp]:
    if coll.reduces:
        return [REDOP_BY_NAME[o] for o in opts.ops]
    return [EMPTY_OP if coll.op_label == "" else NO_OP]


def combine_time(worker: Worker, value: float, average: int, nworkers: int) -> float:
    """-a: 0 own value (rank 0's is printed), 1 mean, 2 min, 3 max over every worker."""
    if average == 0:
        return value
    if average == 2:
        return worker.allreduce_host(value, "min")
    if average == 3:
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
    """Runs the whole sweep on one worker (one host thread)."""

    def __init__(self, opts: BenchOptions, coll: Collective, worker: Worker, reporter=None):
        self.opts, self.coll, self.worker = opts, coll, worker
        self.reporter = reporter if worker.is_reporter else None
        self.errors = 0  # placement runs with wrong elements on this worker's ranks
        self.busbw_sum = 0.0
        self.halves = 0
        self.nworkers = 1

    # -- one half-row ------------------------------------------------------------------
    def _half(self, placement: Placement, counts, dtype: DataType, verify: bool) -> HalfResult:
        w, opts, coll = self.worker, self.opts, self.coll
        m, wrong_world = measure(w, placement, opts, verify)
        if m.wrong:
            self.errors += 1
        t = combine_time(w, m.time_us, opts.average, self.nworkers)
        nbytes = coll.algbw_bytes(counts, dtype.itemsize, w.nranks)
        algbw, busbw = bandwidths(nbytes, t, coll.bus_bandwidth_factor(w.nranks))
        per_iter = self._per_iter(m)
        if self.reporter is not None:
            for line in coll.summary_lines(placement.args[0], t):
                self.reporter.message(line)
        self.busbw_sum += busbw
        self.halves += 1
        wrong = wrong_world if (opts.check and verify) else None
        return HalfResult(t, m.cpu_time_us, algbw, busbw, wrong, per_iter)

    def _per_iter(self, m: Measurement):
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
        w, opts, coll = self.worker, self.opts, self.coll
        w.barrier()
        elt = dtype.itemsize
        for size in warmup_sizes(opts.min_bytes, opts.max_bytes):
            counts = coll.counts(size // elt, w.nranks, elt)
            warm_up(w, Placement(w, coll, dtype, op, root, counts, False, opts.unalign),
                    opts.warmup_iters)
        cycle = 0
        forever = opts.run_cycles <= 0
        while forever or cycle < opts.run_cycles:
            cycle += 1
            for size in sweep_sizes(opts.min_bytes, opts.max_bytes, opts.step_bytes, opts.step_factor):
                counts = coll.counts(size // elt, w.nranks, elt)
                oop = self._half(Placement(w, coll, dtype, op, root, counts, False, opts.unalign),
                                 counts, dtype, True)
                ip = self._half(Placement(w, coll, dtype, op, root, counts, True, opts.unalign), counts, dtype,
                                coll.checks_in_place)
                if self.reporter is not None:
                    stamp = time.strftime("%Y-%m-%d %H:%M:%S") if opts.report_timestamps else None
                    self.reporter.row(ResultRow(counts.size_bytes(elt), counts.param_count, dtype.name,
                                                op.name, root, oop, ip, stamp))

    def run(self) -> RunSummary:
        w, opts, coll = self.worker, self.opts, self.coll
        self.nworkers = int(w.allreduce_host(1, "sum"))
        coll.validate(opts.min_bytes, opts.max_bytes, w.nranks)
        reason = coll.check_nranks(w.nranks)
        if reason is not None:
            # nccl-tests prints this from every thread and measures nothing.
            print(reason, flush=True)
        else:
            for dname in opts.datatypes:
                dtype = DATATYPE_BY_NAME[dname]
                for op in ops_for(coll, opts):
                    if f"{dname}/{op.name}" in opts.skip_pairs:
                        continue
                    for root in roots_for(coll, opts, w.nranks):
                        self.time_test(dtype, op, root)
        oob = int(w.allreduce_host(self.errors, "sum"))
        avg = self.busbw_sum / self.halves if self.halves else math.nan
        gate = min_bw_gate()
        gate_ok = None if gate is None else not (avg < 0.9 * gate)
        return RunSummary(out_of_bounds=oob, avg_busbw=avg, min_bw_gate=gate, gate_ok=gate_ok,
                          memory_line=w.memory_report() if opts.memory_report else None)


def filter_combinations(opts: BenchOptions, coll: Collective, worker: Worker) -> list[str]:
    """Datatype/op pairs the backend cannot run.  If the user named both the
    datatype and the op, an unsupported pair is an error (exit 5); pairs that
    came from `-d all` / `-o all` are skipped, and the returned notes say which.
    The skipped pairs are stored in `opts.skip_pairs` for the run loop."""
    reason_of = getattr(worker, "unsupported_reason", None)
    opts.skip_pairs = []
    if reason_of is None:
        return []
    ops = ops_for(coll, opts)
    skipped: dict[tuple[str, str], str] = {}
    for dname in opts.datatypes:
        for op in ops:
            reason = reason_of(coll, DATATYPE_BY_NAME[dname], op)
            if reason:
                skipped[(dname, op.name)] = reason
    explicit = opts.datatype_arg != "all" and (opts.op_arg != "all" or not coll.reduces)
    if skipped and (explicit or len(skipped) == len(opts.datatypes) * len(ops)):
        raise BenchError(next(iter(skipped.values())), ExitCode.NOT_IMPLEMENTED, all_ranks=True)
    opts.skip_pairs = sorted(f"{d}/{o}" for d, o in skipped)
    by_reason: dict[str, list[str]] = {}
    for (d, o), reason in skipped.items():
        by_reason.setdefault(reason, []).append(f"{d}/{o}" if coll.reduces else d)
    return [f"skipping {', '.join(pairs)}: {reason}" for reason, pairs in by_reason.items()]


def run_workers(opts: BenchOptions, workers: Sequence[Worker], reporter=None) -> RunSummary | None:
    """Run the sweep on every worker of this process (one thread each) and return
    the summary seen by the reporting worker (None on other processes)."""
    validate_for_run(opts)
    coll = lookup(opts.collective)
    if coll is None:
        raise ArgumentError(f"unknown collective {opts.collective!r}")
    runs = [WorkerRun(opts, coll, w, reporter) for w in workers]
    if len(runs) == 1:
        summary = runs[0].run()
        return summary if workers[0].is_reporter else None
    results: list[RunSummary | BaseException | None] = [None] * len(runs)

    def body(i: int) -> None:
        try:
            results[i] = runs[i].run()
        except BaseException as exc:  # re-raised in the main thread below
            results[i] = exc

    threads = [threading.Thread(target=body, args=(i,), name=f"ncclbench-t{i}")
               for i in range(1, len(runs))]
    for t in threads:
        t.start()
    body(0)
    for t in threads:
        t.join()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results[0] if workers[0].is_reporter else None  # type: ignore[return-value]
