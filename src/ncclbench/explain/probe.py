"""One untimed operation per size, after the timed loops: the ops NCCL's per-call choice is read from.

Why separate ops: the timed loop must log nothing per call (see
`log_capture`), so the algorithm, protocol and channels NCCL picks are
taken from one more op per size, issued after every measurement of the run
with NCCL's TUNING lines (or the profiler plugin's recording) switched on.
They are issued exactly as the harness issues a warm-up op (`run.timing`:
same placement, same buffers, out-of-place), so NCCL sees the same call.

Every worker of the world takes part (one thread each, as the run itself);
`switch(i)` runs on each process's first worker between two barriers before
test i (and with -1 after the last), where no NCCL call is in flight: the
moment to change NCCL's log settings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..backends.threads import on_each_thread
from ..backends.worker import Worker
from ..run.plan import RunPlan
from ..run.timing import Placement, warm_up


def _probe_one_worker(plan: RunPlan, worker: Worker, switch: Callable[[int], None] | None) -> None:
    coll, opts = plan.collective, plan.options
    tests = list(plan.tests()) if coll.check_nranks(worker.nranks) is None else []
    for i, (dtype, op, root) in enumerate(tests):
        worker.barrier()
        if switch is not None:
            switch(i)
        worker.barrier()
        elt = dtype.itemsize
        for size in plan.sizes.sweep():
            counts = coll.counts(size // elt, worker.nranks, elt)
            warm_up(worker, Placement(worker, coll, dtype, op, root, counts, False, opts.unalign), 1)
    worker.barrier()
    if switch is not None:
        switch(-1)
    worker.barrier()


def probe_sizes(plan: RunPlan, workers: Sequence[Worker], switch: Callable[[int], None]) -> int:
    """Issue one untimed op per size of every test of `plan` on every worker of this process;
    return the number of tests probed.  Collective: every process of the world calls it."""
    if not workers or plan.cycles == 0:
        return 0
    on_each_thread(len(workers), lambda i: _probe_one_worker(plan, workers[i], switch if i == 0 else None),
                   name="ncclbench-probe-t")
    return sum(1 for _ in plan.tests()) if plan.collective.check_nranks(workers[0].nranks) is None else 0
