"""The run plan: what one benchmark run will do, decided once.

The options (`core.config.BenchOptions`) record what the user asked for; the plan
is what the run does with it on these workers: the collective, the backend,
the size range after nccl-tests' memory clamp, the datatypes, ops and roots
it loops over, and the datatype/op pairs the backend cannot run.  It is made
once per process, after the workers exist (the clamp and the pairs depend on
them), frozen, and read by the harness, the reporters' row count and the
banner.  Nothing downstream looks at the raw options for these facts again,
so the sweep and the buffers cannot disagree.

Build one with `make_plan(options, collective, backend, worker)`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from ..backends.worker import Worker
from ..collectives.collective import Collective
from ..core.config import Backend, BenchOptions
from ..core.datatypes import DATATYPE_BY_NAME, EMPTY_OP, NO_OP, REDOP_BY_NAME, DataType, RedOp
from ..core.errors import BenchError, ExitCode

_MAX_COUNTED_SIZES = 1_000_000  # a longer sweep is reported as "unknown length"


def sweep_sizes(min_bytes: int, max_bytes: int, step_bytes: int, step_factor: int) -> Iterator[int]:
    """Requested byte sizes: multiply by `step_factor` when it is > 1, else add
    `step_bytes`; the last size is the largest step that is <= max_bytes."""
    if min_bytes <= 0:
        raise ValueError("min_bytes must be positive (a zero size never advances)")
    if step_factor <= 1 and step_bytes <= 0:
        raise ValueError("step_bytes must be positive when no step factor is given")
    size = min_bytes
    while size <= max_bytes:
        yield size
        size = size * step_factor if step_factor > 1 else size + step_bytes


def warmup_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Warm-up sizes: always doubling from min_bytes to max_bytes, whatever -f/-i say."""
    if min_bytes <= 0:
        raise ValueError("min_bytes must be positive")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


@dataclass(frozen=True)
class SizeRange:
    """The byte sizes a run measures (docs/behaviour.md, "Sizes").

    `max_bytes` is the effective maximum: the requested `-e`, lowered as
    nccl-tests lowers it when the buffers would not fit (`min_bytes` follows
    it down).  `requested_max_bytes` is `-e` as given (the banner prints it)."""

    min_bytes: int
    max_bytes: int
    step_bytes: int
    step_factor: int
    requested_max_bytes: int

    @property
    def reduced_max_bytes(self) -> int | None:
        """The lowered maximum, for the `# Reducing maxBytes` line; None when not lowered."""
        return self.max_bytes if self.max_bytes < self.requested_max_bytes else None

    def sweep(self) -> Iterator[int]:
        """Requested sizes of one cycle, smallest first."""
        return sweep_sizes(self.min_bytes, self.max_bytes, self.step_bytes, self.step_factor)

    def warmup(self) -> list[int]:
        """Warm-up sizes: doubling from min_bytes, whatever -f/-i say."""
        return warmup_sizes(self.min_bytes, self.max_bytes)

    def count(self) -> int | None:
        """Sizes per cycle, None when there are too many to count."""
        n = sum(1 for _ in itertools.islice(self.sweep(), _MAX_COUNTED_SIZES + 1))
        return None if n > _MAX_COUNTED_SIZES else n


def clamp_sizes(opts: BenchOptions, buffer_bytes: int) -> SizeRange:
    """The size range of `opts` on buffers of `buffer_bytes`: nccl-tests' clamp
    (`maxBytes = min(maxBytes, limit)`, then `minBytes = min(minBytes, maxBytes)`)."""
    max_bytes = min(opts.max_bytes, buffer_bytes)
    if max_bytes < 1:
        raise BenchError(f"no room for buffers: the largest size these GPUs can hold is {buffer_bytes} bytes",
                         ExitCode.CUDA_ERROR, all_ranks=True)
    return SizeRange(min_bytes=min(opts.min_bytes, max_bytes), max_bytes=max_bytes, step_bytes=opts.step_bytes,
                     step_factor=opts.step_factor, requested_max_bytes=opts.max_bytes)


@dataclass(frozen=True)
class RunPlan:
    """Everything a run loops over, fixed before the first measurement."""

    options: BenchOptions  # as the user gave them (frozen); counts, modes, output choices
    collective: Collective
    backend: Backend
    nranks: int  # ranks per communicator
    sizes: SizeRange
    datatypes: tuple[DataType, ...]
    ops: tuple[RedOp, ...]  # NO_OP / EMPTY_OP alone for collectives that do not reduce
    roots: tuple[int, ...]  # (-1,) for collectives without a root
    skipped: frozenset[tuple[str, str]]  # (datatype, op) pairs the backend cannot run: not measured
    notes: tuple[str, ...]  # banner notes about the plan (the skipped pairs)

    @property
    def cycles(self) -> int:
        """-N: sweeps to run; 0 runs until interrupted."""
        return self.options.run_cycles

    def tests(self) -> Iterator[tuple[DataType, RedOp, int]]:
        """(datatype, op, root) of every test, in nccl-tests' order (datatype, then op, then root)."""
        for dtype in self.datatypes:
            for op in self.ops:
                if (dtype.name, op.name) in self.skipped:
                    continue
                for root in self.roots:
                    yield dtype, op, root

    def expected_rows(self) -> int | None:
        """Result rows the run will print; None when unknown (-N 0 runs forever)."""
        sizes = self.sizes.count()
        if self.cycles == 0 or sizes is None:
            return None
        return sizes * sum(1 for _ in self.tests()) * self.cycles


def roots_for(coll: Collective, opts: BenchOptions, nranks: int) -> tuple[int, ...]:
    """-r: one root, or every rank for -r -1; (-1,) for a collective without a root."""
    if not coll.rooted:
        return (-1,)
    if opts.root == -1:
        return tuple(range(nranks))
    if not 0 <= opts.root < nranks:
        raise BenchError(f"invalid root {opts.root}: must be -1 (all) or 0..{nranks - 1}", ExitCode.ARGUMENT,
                         all_ranks=True)
    return (opts.root,)


def ops_for(coll: Collective, opts: BenchOptions) -> tuple[RedOp, ...]:
    """-o for a reducing collective; the printed placeholder op otherwise."""
    if coll.reduces:
        return tuple(REDOP_BY_NAME[o] for o in opts.ops)
    return (EMPTY_OP if coll.op_label == "" else NO_OP,)


def unsupported_pairs(opts: BenchOptions, coll: Collective, worker: Worker,
                      ops: tuple[RedOp, ...]) -> tuple[frozenset[tuple[str, str]], list[str]]:
    """Datatype/op pairs the backend cannot run, and the banner notes naming them.

    If the user named both the datatype and the op, an unsupported pair is an
    error (exit 5), as it is when no pair is left; pairs that came from
    `-d all` / `-o all` are skipped."""
    skipped: dict[tuple[str, str], str] = {}
    for dname in opts.datatypes:
        for op in ops:
            reason = worker.unsupported_reason(coll, DATATYPE_BY_NAME[dname], op)
            if reason:
                skipped[(dname, op.name)] = reason
    explicit = opts.datatype_arg != "all" and (opts.op_arg != "all" or not coll.reduces)
    if skipped and (explicit or len(skipped) == len(opts.datatypes) * len(ops)):
        raise BenchError(next(iter(skipped.values())), ExitCode.NOT_IMPLEMENTED, all_ranks=True)
    by_reason: dict[str, list[str]] = {}
    for (d, o), reason in skipped.items():
        by_reason.setdefault(reason, []).append(f"{d}/{o}" if coll.reduces else d)
    notes = [f"skipping {', '.join(pairs)}: {reason}" for reason, pairs in by_reason.items()]
    return frozenset(skipped), notes


def make_plan(opts: BenchOptions, coll: Collective, backend: Backend, worker: Worker) -> RunPlan:
    """The plan of this process's run on `worker` (any of its workers: they share
    the world's buffer size and library).  Raises BenchError for a run these
    workers cannot do (every rank decides the same, so `all_ranks` is set)."""
    sizes = clamp_sizes(opts, worker.max_bytes)
    coll.validate(sizes.min_bytes, sizes.max_bytes, worker.nranks)
    ops = ops_for(coll, opts)
    skipped, notes = unsupported_pairs(opts, coll, worker, ops)
    return RunPlan(options=opts, collective=coll, backend=backend, nranks=worker.nranks, sizes=sizes,
                   datatypes=tuple(DATATYPE_BY_NAME[d] for d in opts.datatypes), ops=ops,
                   roots=roots_for(coll, opts, worker.nranks), skipped=skipped, notes=tuple(notes))


__all__ = ["Backend", "RunPlan", "SizeRange", "clamp_sizes", "make_plan", "ops_for", "roots_for", "sweep_sizes",
           "unsupported_pairs", "warmup_sizes"]
