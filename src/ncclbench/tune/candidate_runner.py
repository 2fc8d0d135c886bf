"""The tune job on every rank: the interleaved schedule, timed by the harness.

Each step of `round_order.interleaved` makes the candidate current (a
`Switcher`: MPICH cvars through MPI_T, or the candidate's own NCCL
communicators) and times one out-of-place placement with the harness'
`measure` (the same timed loop, untimed op and -c check as a plain run, -n
split over the rounds).  Every rank runs the same steps in the same order.

The first time a candidate meets a size (round 0) it is *probed*: one
untimed call, watched for the library's refusal (MPICH: "cannot be applied"
on stderr, it would silently use another algorithm; NCCL: an error such as
"no algorithm/protocol available", or a wait past the bound).  All ranks
agree on the outcome through the host communicator, never through the
library under test, so a failed candidate cannot leave ranks disagreeing.
A refusal at one size skips that size for the candidate; an error or a hang
drops the candidate; wrong results (-c) drop it too.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from ..backends.worker import Worker
from ..collectives.collective import Collective
from ..core.config import BenchOptions
from ..core.datatypes import DataType, RedOp
from ..core.errors import BenchError
from ..run.plan_runner import combine_time
from ..run.timing import Placement, measure, warm_up
from .candidates import Candidate, Skipped
from .result import NotApplicable
from .round_order import interleaved


class Switcher(Protocol):
    """How one backend makes a candidate current (see module doc)."""

    control: Worker  # alive for the whole job: agreements go through its host communicator

    def worker(self, cand: Candidate) -> Worker:
        """The worker whose ranks measure `cand`."""

    def apply(self, cand: Candidate) -> None:
        """Make `cand` current on this rank (every rank calls it alike)."""

    def probe(self, cand: Candidate, placement: Placement) -> tuple[str | None, str | None]:
        """Run one untimed call of `placement`; (not-applicable reason, failure reason)."""

    def drop(self, cand: Candidate) -> None:
        """Release what `cand` holds after it failed."""

    def close(self) -> None:
        """Put the library back as it was and release everything."""


def agree(control: Worker, reason: str | None) -> str | None:
    """Did any rank have a reason?  Every rank gets the answer; the reporter
    gets the first rank's text, the others a placeholder."""
    if not control.allreduce_host(1.0 if reason else 0.0, "max"):
        return None
    texts = control.gather_host(reason)
    if texts is None:
        return reason or "(reported by another rank)"
    return next((t for t in texts if t), "(no rank said why)")


@dataclasses.dataclass
class Measured:
    """What the job measured, before it becomes a TuneResult on the reporter."""

    times_us: dict[int, dict[str, list[float]]]
    algbw_bytes: dict[int, float]
    param_counts: dict[int, int]
    bus_factor: float
    not_applicable: list[NotApplicable]
    dropped: list[Skipped]
    wall_s: float


def run_schedule(coll: Collective, opts: BenchOptions, dtype: DataType, op: RedOp, root: int,
                 sizes: list[int], cands: list[Candidate], switcher: Switcher, rounds: int,
                 iters_per_round: int, progress: Callable[[int], None] | None = None) -> Measured:
    """Measure every candidate at every size in the interleaved order."""
    start = time.perf_counter()
    round_opts = dataclasses.replace(opts, iters=iters_per_round, per_iter_timing=False)
    control = switcher.control
    nworkers = int(control.allreduce_host(1, "sum"))
    elt = dtype.itemsize
    times: dict[int, dict[str, list[float]]] = {}
    algbw: dict[int, float] = {}
    param_counts: dict[int, int] = {}
    factor = coll.bus_bandwidth_factor(control.nranks)
    skip: set[tuple[str, int]] = set()
    not_applicable: list[NotApplicable] = []
    dropped: dict[str, str] = {}
    last_size = None
    for step in interleaved(sizes, len(cands), rounds):
        if progress is not None and step.size != last_size:
            progress(step.size)
            last_size = step.size
        cand = cands[step.candidate]
        if cand.label in dropped or (cand.label, step.size) in skip:
            continue
        worker = switcher.worker(cand)
        counts = coll.counts(step.size // elt, worker.nranks, elt)
        row_size = counts.size_bytes(elt)
        algbw[row_size] = coll.algbw_bytes(counts, elt, worker.nranks)
        param_counts[row_size] = counts.param_count
        switcher.apply(cand)
        placement = Placement(worker, coll, dtype, op, root, counts, False, opts.unalign)
        if step.round == 0:
            na, failed = switcher.probe(cand, placement)
            failed = agree(control, failed)
            if failed is None:
                na = agree(control, na)
            if failed is not None:
                dropped[cand.label] = f"failed at {row_size} B: {failed}"
                switcher.drop(cand)
                continue
            if na is not None:
                skip.add((cand.label, step.size))
                not_applicable.append(NotApplicable(cand.label, row_size, na))
                continue
            warm_up(worker, placement, opts.warmup_iters)
        m, wrong = measure(worker, placement, round_opts, verify=step.round == 0)
        if wrong:
            dropped[cand.label] = f"{wrong} wrong elements at {row_size} B (-c check)"
            switcher.drop(cand)
            continue
        t = combine_time(control, m.time_us, opts.average, nworkers)
        times.setdefault(row_size, {}).setdefault(cand.label, []).append(t)
    return Measured(times, algbw, param_counts, factor, not_applicable, [Skipped(k, v) for k, v in dropped.items()],
                    time.perf_counter() - start)


# -- MPICH ---------------------------------------------------------------------------------

@contextmanager
def captured_fd2() -> Iterator[list[str]]:
    """Collect what C code writes to file descriptor 2 meanwhile (MPICH prints
    its "cannot be applied" notes there); yields a list filled on exit."""
    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines.extend(tmp.read().decode(errors="replace").splitlines())


def mpich_refusal(lines: list[str]) -> str | None:
    """MPICH's own words when a forced algorithm does not apply (fallback=print):
    "User set collective algorithm is not usable ..." / "Allreduce smp cannot be applied."."""
    hits = [ln.strip() for ln in lines if "cannot be applied" in ln or "not usable for the provided" in ln]
    return "MPICH: " + " ".join(dict.fromkeys(hits)) if hits else None


class MpichSwitcher:
    """Candidates of the CPU backend: MPICH algorithm cvars written through MPI_T."""

    def __init__(self, worker: Worker, cvar: str, choices: dict[str, int]):
        from .mpich import MpiT, cvar_choices

        self.control = worker
        self.cvar, self.choices = cvar, choices
        self.mpit = MpiT()
        self.default_value = self.mpit.read(cvar)
        # Make MPICH say when a forced algorithm does not fit (default: silently use another).
        fallback = cvar_choices(self.mpit.info("MPIR_CVAR_COLLECTIVE_FALLBACK"))
        self._fallback_default = None
        if "print" in fallback:
            self._fallback_default = self.mpit.read("MPIR_CVAR_COLLECTIVE_FALLBACK")
            self.mpit.write("MPIR_CVAR_COLLECTIVE_FALLBACK", fallback["print"])

    def worker(self, cand: Candidate) -> Worker:
        return self.control

    def apply(self, cand: Candidate) -> None:
        value = self.default_value
        for name, choice in cand.env:
            if name == self.cvar:
                value = self.choices[choice]
        self.mpit.write(self.cvar, value)

    def probe(self, cand: Candidate, placement: Placement) -> tuple[str | None, str | None]:
        try:
            with captured_fd2() as lines:
                placement.issue(placement.calls(0))
                self.control.wait()
        except BenchError as exc:
            return None, exc.message
        except Exception as exc:  # mpi4py raises MPI.Exception with MPICH's error stack
            return None, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        refusal = mpich_refusal(lines)
        others = [ln for ln in lines if mpich_refusal([ln]) is None]
        if others:  # not ours to swallow
            print("\n".join(others), file=sys.stderr, flush=True)
        return refusal, None

    def drop(self, cand: Candidate) -> None:
        """Nothing to release: the default setting comes back with the next apply."""

    def close(self) -> None:
        try:
            self.mpit.write(self.cvar, self.default_value)
            if self._fallback_default is not None:
                self.mpit.write("MPIR_CVAR_COLLECTIVE_FALLBACK", self._fallback_default)
        finally:
            self.mpit.close()
