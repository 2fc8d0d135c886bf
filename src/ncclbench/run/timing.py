"""Measuring one size in one placement: nccl-tests' TimeTest inner procedure
(docs/behaviour.md §3.1), written once against the `Worker` interface.

The timed loop is kept lean: every pointer and argument tuple is computed
before the clock starts, so the loop body is the collective call itself
(plus the blocking-mode waits the user asked for).
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..backends.worker import TimedBatch, Worker
from ..collectives.collective import CallArgs, Collective, Communicator, Counts
from ..core.config import BenchOptions, Blocking
from ..core.datatypes import DataType, RedOp
from .recording import Call, CallRecorder, rounds_across_ranks

Launch = tuple[Communicator, int, int, CallArgs]  # one rank's launch of an op: (comm, send, recv, args)


@dataclass
class Measurement:
    """One worker's raw numbers for one placement, before combining across ranks."""

    time_us: float  # completion time per op (host clock)
    cpu_time_us: float  # enqueue time per op
    samples_us: list[float] | None  # -I per-iteration samples
    wrong: int | None  # wrong elements on this worker's ranks (None: unchecked)


def rotation_steps(span_bytes: int, max_bytes: int) -> int:
    """How many distinct buffer offsets the timed loop rotates through
    (docs/behaviour.md, "Buffers"): floor(max_bytes / span), 1 when the span is 0."""
    if span_bytes <= 0:
        return 1
    return max(1, max_bytes // span_bytes)


class Placement:
    """Pointers and call arguments of one collective at one size, for every
    local rank, in one placement (out-of-place or in-place)."""

    def __init__(self, worker: Worker, coll: Collective, dtype: DataType, op: RedOp, root: int,
                 counts: Counts, in_place: bool, unalign: int = 0):
        self.worker, self.coll, self.in_place, self.counts = worker, coll, in_place, counts
        elt = dtype.itemsize
        skew = unalign * elt  # -u: both buffers start this many elements late
        self.args = [CallArgs(dtype, op, root, s.rank, worker.nranks, counts) for s in worker.slots]
        send_b, recv_b = coll.uses_buffers(counts, elt)
        self.recv_bytes = recv_b
        self.span = max(send_b, recv_b)
        self.steps = rotation_steps(self.span, worker.max_bytes)
        self.base: list[tuple[int, int]] = []
        for slot in worker.slots:
            if in_place:
                s_off, r_off = coll.in_place_offsets(counts, slot.rank)
                self.base.append((slot.recv + skew + s_off * elt, slot.recv + skew + r_off * elt))
            else:
                self.base.append((slot.send + skew, slot.recv + skew))
        self.skew = skew

    def calls(self, k: int) -> list[Launch]:
        """(comm, send, recv, args) for op index k (pointer rotation of docs/behaviour.md §2.9)."""
        shift = self.span * (k % self.steps)
        return [(slot.comm, s + shift, r + shift, a)
                for slot, (s, r), a in zip(self.worker.slots, self.base, self.args)]

    def issue(self, calls: list[Launch]) -> None:
        launch = self.coll.launch
        if len(calls) == 1:
            launch(*calls[0])
            return
        comms = [c[0] for c in calls]
        for i, name, args in rounds_across_ranks([self._recorded(*c) for c in calls]):
            if i is None:
                getattr(self.worker, name)()
            else:
                getattr(comms[i], name)(*args)

    def prepared(self, k: int) -> Callable[[], None]:
        """A zero-argument callable issuing op k, built before the clock starts.

        Each local rank's launch is first recorded as primitive calls; a
        communicator that can pre-bind them (`compile`) returns a closure with every
        argument pre-converted, so the timed loop pays the backend's own calls
        and nothing else.  Several ranks in this worker (-g/-t) are compiled
        together (`compile_group`) in the order `issue` uses.  If the
        communicator cannot compile the op, it goes through `issue`."""
        calls = self.calls(k)
        first = calls[0][0]
        if len(calls) == 1:
            fast = first.compile(self._recorded(*calls[0]))
        else:
            fast = first.compile_group(self._ordered(calls))
        return fast if fast is not None else partial(self.issue, calls)

    def ordered_calls(self, k: int) -> list[tuple[Communicator, str, tuple[Any, ...]]]:
        """Op k as (communicator, primitive call, args) in issue order: what
        `prepared` compiles, for a backend that runs the whole timed loop itself
        (`Worker.native_batch`)."""
        calls = self.calls(k)
        if len(calls) == 1:
            comm = calls[0][0]
            return [(comm, name, args) for name, args in self._recorded(*calls[0])]
        return self._ordered(calls)

    def _ordered(self, calls: list[Launch]) -> list[tuple[Communicator, str, tuple[Any, ...]]]:
        """Several local ranks' recorded calls in `issue`'s order; the enclosing
        group brackets carry the first rank's communicator."""
        first = calls[0][0]
        order = rounds_across_ranks([self._recorded(*c) for c in calls])
        return [(first if i is None else calls[i][0], name, args) for i, name, args in order]

    def _recorded(self, comm: Communicator, send: int, recv: int, args: CallArgs) -> list[Call]:
        """The primitive calls one rank's launch makes, recorded, not issued."""
        recorder = CallRecorder(comm.rank, comm.nranks)
        self.coll.launch(recorder, send, recv, args)
        return recorder.calls

    def prepare_data(self, seed: int) -> None:
        """Zero the receive region, then write this rank's inputs (docs/behaviour.md §4.1)."""
        w = self.worker
        for slot, (send, _), a in zip(w.slots, self.base, self.args):
            w.zero(slot, slot.recv + self.skew, self.recv_bytes)
            fills = self.coll.input_fills(a, seed)
            if fills:
                w.fill(slot, send, fills, a.dtype, a.op)

    def count_wrong(self, seed: int) -> int:
        w, total = self.worker, 0
        for slot, (_, recv), a in zip(w.slots, self.base, self.args):
            expected = self.coll.expected_fills(a, seed, self.in_place)
            total += w.count_wrong(slot, recv, a.counts.recv_count, expected, a.dtype, a.op)
        return total


def c_divide(total: float, count: int) -> float:
    """`total / count` as C divides doubles: x/0 is +inf, 0/0 NaN (what nccl-tests
    prints for the per-op time of `-n 0`), instead of Python's ZeroDivisionError."""
    if count:
        return total / count
    return math.nan if total == 0 else math.copysign(math.inf, total)


def warm_up(worker: Worker, placement: Placement, iterations: int) -> None:
    for k in range(iterations):
        placement.issue(placement.calls(k))
    worker.wait()


def measure(worker: Worker, placement: Placement, opts: BenchOptions,
            verify: bool = True) -> tuple[Measurement, int]:
    """Time one placement and, when `verify` and -c allow, check it.  Returns the
    measurement and the world-wide wrong-element count (0 when unchecked)."""
    iters, agg = opts.iters, max(1, opts.agg_iters)
    if opts.check:
        placement.prepare_data(worker.timed_data_seed)
    # Everything the timed loop needs is built first, so that ranks leave the
    # barrier below together and go straight into the first call.
    nops = iters * agg
    # The plain loop (-z 0 -m 1, no -I, no -G) may run outside Python as one
    # batch (the NCCL worker's C loop: backends/nccl_native.py); otherwise
    # every op is a prepared callable.
    batch = None
    if opts.blocking == Blocking.NONE and agg == 1 and not opts.cudagraph and not opts.per_iter_timing and nops:
        batch = worker.native_batch([placement.ordered_calls(k) for k in range(nops)])
    ops = [placement.prepared(k) for k in range(nops)] if batch is None else []
    # One untimed operation (op 0, docs/behaviour.md "Timing"): an extra warm-up
    # that also settles lazy connections.  It runs through the very callable the
    # clock will time first, so the warm-up warms the timed path rather than the
    # method path (with -n 0 there is none: it is built on its own, as nccl-tests
    # still issues op 0).  (the hypercube runs: -c 1's checking between timed loops left
    # hypercube's next loop ~0.9 us/op slower than -c 0, nccl-tests' ~0.4; this
    # change did not measurably narrow that,
    # bench/results/gpu-h200x4-2026-11-21-hypercube.md.)
    if batch is not None:
        batch.issue_first()
    else:
        (ops[0] if ops else placement.prepared(0))()
    worker.wait()
    worker.barrier()

    # No garbage-collection pause inside the clock (timeit does the same).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _timed_and_checked(worker, placement, opts, verify, ops, batch)
    finally:
        if gc_was_enabled:
            gc.enable()


def _timed_and_checked(worker: Worker, placement: Placement, opts: BenchOptions, verify: bool,
                       ops: list[Callable[[], None]], batch: TimedBatch | None = None) -> tuple[Measurement, int]:
    if batch is not None:
        enqueued, elapsed = batch.run()
        nops = opts.iters
        timed: tuple[float, float, list[float] | None] = (c_divide(enqueued, nops),
                                                          c_divide(elapsed, nops) * 1e6, None)
    else:
        timed = _timed(worker, opts, ops)
    return _checked(worker, placement, opts, verify, *timed)


def _timed(worker: Worker, opts: BenchOptions,  # noqa: C901 - one window, see the docstring
           ops: list[Callable[[], None]]) -> tuple[float, float, list[float] | None]:
    """The timed loop through prepared callables: (enqueue s per op, time us per op, -I samples).

    Complex on purpose: every -z/-a/-I/-G branch sits inside the one timed window, as in nccl-tests'
    timeTest loop; a helper function per branch would add a Python call to every timed iteration
    (~50-100 ns each, against the 0.2-0.6 us a call these loops time: bench/loop_anatomy.py)."""
    iters, agg, z = opts.iters, max(1, opts.agg_iters), opts.blocking
    graph_launches = opts.cudagraph
    nops = iters * agg  # 0 with -n 0: times come out as C's x/0, as nccl-tests prints them
    timer = worker.iteration_timer(iters + 1) if opts.per_iter_timing and z != Blocking.TIME_EACH_ITERATION else None
    host_samples: list[float] = []
    wait, barrier = worker.wait, worker.barrier
    group_start, group_end = worker.group_start, worker.group_end

    graph, capturing = None, bool(graph_launches)
    if capturing:
        worker.begin_capture()
    try:
        start = time.perf_counter()
        coll_only = 0.0
        if z == Blocking.NONE and agg == 1 and timer is None:
            # The common case: nothing between the calls but the calls.
            for op in ops:
                op()
            iters_left = 0
        else:
            iters_left = iters
        for it in range(iters_left):
            t0 = time.perf_counter() if z == Blocking.TIME_EACH_ITERATION else 0.0
            if agg > 1:
                group_start()
            if timer is not None:
                timer.record(it)
            for a in range(agg):
                ops[it * agg + a]()
                if z == Blocking.WAIT_BARRIER_EACH_OP:
                    wait()
                    barrier()
                elif z == Blocking.WAIT_EACH_OP:
                    wait()
            if agg > 1:
                group_end()
            if z == Blocking.TIME_EACH_ITERATION:
                wait()
                span = time.perf_counter() - t0
                coll_only += span
                host_samples.append(span * 1e6)
                barrier()
        if timer is not None:
            timer.record(iters)
        if capturing:
            graph = worker.end_capture()
            capturing = False
    except BaseException:
        if capturing:  # leave no stream capturing for the cleanup that follows
            worker.abandon_capture()
        raise
    if graph is not None:
        worker.barrier()
        start = time.perf_counter()
        worker.launch_graph(graph, graph_launches)
    enqueued = time.perf_counter() - start
    if not (z and agg <= 1):
        wait()
    elapsed = coll_only if z == Blocking.TIME_EACH_ITERATION else time.perf_counter() - start
    if graph is not None:
        worker.destroy_graph(graph)

    cpu_time = c_divide(coll_only if z == Blocking.TIME_EACH_ITERATION else enqueued, nops)
    time_us = c_divide(elapsed, nops) / (graph_launches or 1) * 1e6

    samples = None
    if opts.per_iter_timing:
        raw = timer.samples_us() if timer is not None else host_samples
        samples = [s / agg for s in raw]
    return cpu_time, time_us, samples


def _checked(worker: Worker, placement: Placement, opts: BenchOptions, verify: bool, cpu_time: float,
             time_us: float, samples: list[float] | None) -> tuple[Measurement, int]:
    """After the timed loop: the barrier, then -c checking of the placement."""
    wrong_local, wrong_world = None, 0
    worker.barrier()
    if opts.check and verify:
        wrong_local = 0
        for rep in range(1, opts.check + 1):
            placement.prepare_data(rep)
            placement.issue(placement.calls(0))
            worker.wait()
            mine = placement.count_wrong(rep)
            wrong_world = int(worker.allreduce_host(mine, "sum"))
            wrong_local += mine
            if wrong_world:
                break
    return Measurement(time_us, cpu_time * 1e6, samples, wrong_local), wrong_world
