"""One tune job, on every rank: form the job as a plain run does (`run.rank_job.RankJob`:
rank signals, the host communicator, the launch checks, how a signal or an error ends it),
build the candidates and the backend's switcher, make the run plan a plain run would make on
the same workers (`run.plan.make_plan`: nccl-tests' memory clamp on the sizes, the
datatype/op check, the root), run the interleaved schedule over the plan's sizes, and (on
the reporting rank) judge and write the outputs.

A one-rank job has nothing to tune: NCCL runs a one-rank collective as a
local copy (ncclLaunchOneRank, src/enqueue.cc), and MPI's collective
algorithms all reduce to the same no-op exchange, so the command says so
and ends successfully.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..core.config import Backend
from ..core.errors import ArgumentError
from ..launch.detect import LaunchInfo
from ..output.numfmt import now_string
from ..output.text import reducing_max_bytes_text
from ..run.events import NullObserver
from ..run.plan import RunPlan
from ..run.rank_job import RankJob
from . import nccl_rules
from .candidates import CandidateSet, mpich_candidates, nccl_candidates, preset_conflicts
from .options import TuneOptions
from .result import TuneResult
from .round_order import default_rounds, few_rounds_note, iterations_per_round

if TYPE_CHECKING:  # the backends are imported by the rank that uses them
    from .candidate_runner import MpichSwitcher, Switcher
    from .nccl_job import NcclSwitcher

# A probe or timed call of NCCL that has not completed after this long is a hang
# (used when the user gave no -T): the candidate is dropped, the job goes on.
DEFAULT_TIMEOUT_S = 120

ONE_RANK_NCCL = ("one rank has no algorithm choice: NCCL runs a one-rank collective as a local copy "
                 "(ncclLaunchOneRank, src/enqueue.cc), without algorithm, protocol or channels; "
                 "tune needs at least 2 ranks")
ONE_RANK_MPI = ("one rank has no algorithm choice: with one process an MPI collective exchanges "
                "nothing; tune needs at least 2 processes")


def nccl_conflict_names(topts: TuneOptions) -> list[str]:
    """Variables that would make NCCL's 'default' something else, or override
    a candidate (NCCL_MIN/MAX_CTAS win over ncclConfig_t: src/init.cc envConfigOverride)."""
    names = ["NCCL_ALGO", "NCCL_PROTO"]
    if topts.ctas:
        names += ["NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"]
    return names


def check_environment(topts: TuneOptions, backend: Backend) -> None:
    """One clear line for a variable the user set that tune itself varies."""
    from .mpich import algorithm_cvar

    if backend is Backend.MPI:
        cvar = algorithm_cvar(topts.bench.collective)
        names = [cvar] if cvar else []
    else:
        names = nccl_conflict_names(topts)
    lines = preset_conflicts(dict(os.environ), names)
    if lines:
        raise ArgumentError(lines[0])


@dataclasses.dataclass
class Candidates:
    """What tune measures on this rank: the candidates, how it switches between them, the
    library's name and version (NCCL's code, None for MPICH) and the notes for the result."""

    cset: CandidateSet
    switcher: MpichSwitcher | NcclSwitcher
    library: str
    version_code: int | None
    notes: list[str]


@contextmanager
def same_on_every_rank() -> Iterator[None]:
    """An ArgumentError here (a candidate name, an empty size range) comes from the options and
    the library, the same on every rank: each rank says it, no rank is aborted."""
    try:
        yield
    except ArgumentError as exc:
        exc.all_ranks = True
        raise


def refuse_early(topts: TuneOptions, backend: Backend, launch: LaunchInfo) -> None:
    """What tune refuses before the job forms: --verify under an external launcher, and a
    variable the user set that tune itself varies."""
    if topts.verify and launch.kind != "single":
        raise ArgumentError("tune --verify starts ordinary runs itself: start tune with --nprocs N "
                            "(or, on one GPU host, without a launcher), or verify by hand with the env lines")
    check_environment(topts, backend)


def run_tune_here(topts: TuneOptions, backend: Backend, launch: LaunchInfo, note: str | None) -> int:
    """Run the tune job with this process as one rank; return the exit status.  The job forms,
    is checked, ends on a signal or an error as a benchmark's does (`run.rank_job`)."""
    opts = topts.bench
    if backend is not Backend.MPI and not opts.timeout:
        opts = dataclasses.replace(opts, timeout=DEFAULT_TIMEOUT_S)
    refuse_early(topts, backend, launch)
    with RankJob(opts, backend, launch, NullObserver()) as job, same_on_every_rank():
        checks = job.preflight()
        notes = [*([note] if note else []), *checks.warnings]
        found = mpich_candidates_here(topts, job, notes) if backend is Backend.MPI else \
            nccl_candidates_here(topts, job, notes)
        if found is None:  # one rank: nothing to tune, said
            return 0
        # Any candidate's worker: they share the world's buffer size (the same options and GPUs).
        plan = job.make_plan(found.switcher.control)
        return measure_and_report(topts, plan, found.cset, found.switcher, found.library, found.version_code,
                                  job.hosts, found.notes, job.host.rank == 0)
    return job.exit_status  # a signal or an anticipated error ended the job


def mpich_candidates_here(topts: TuneOptions, job: RankJob, notes: list[str]) -> Candidates | None:
    """The CPU backend's candidates: MPICH's algorithm cvar, written through MPI_T on the one
    worker; None (and a line) for a one-process job."""
    from .candidate_runner import MpichSwitcher
    from .mpich import MpiT, algorithm_cvar, cvar_choices

    coll = job.collective
    cvar = algorithm_cvar(coll.name)
    mpit = MpiT()
    try:
        choices = cvar_choices(mpit.info(cvar)) if cvar else {}
    finally:
        mpit.close()
    cset = mpich_candidates(coll.name, choices, list(topts.algos) if topts.algos else None)
    assert cvar is not None  # mpich_candidates refused a collective without one
    worker = job.start_workers()[0]
    if worker.nranks < 2:
        if job.host.rank == 0:
            print(f"# ncclbench tune {coll.name}: {ONE_RANK_MPI}", flush=True)
        return None
    switcher = MpichSwitcher(worker, cvar, choices)
    job.on_end(switcher.close)
    library = " ".join(worker.library_description().split())  # MPICH's "MPICH Version:      5.0.2"
    return Candidates(cset, switcher, library, None, notes)


def nccl_candidates_here(topts: TuneOptions, job: RankJob, notes: list[str]) -> Candidates | None:
    """The GPU backend's candidates, each on communicators of its own (`NcclSwitcher`); those
    NCCL refuses at init dropped with its reason.  None (and a line) for a one-rank job."""
    from ..nccl.binding import get_library
    from .nccl_job import NcclSwitcher

    opts, coll = job.opts, job.collective
    if os.environ.get("NCCL_TUNER_PLUGIN"):
        notes.append(f"NCCL_TUNER_PLUGIN={os.environ['NCCL_TUNER_PLUGIN']} is set: the plugin may override "
                     "NCCL's choice, so 'default' is NCCL's choice with that plugin")
    lib = get_library(opts.nccl_lib)
    library = f"NCCL {lib.version}"
    newer = nccl_rules.newer_than_rules_note(lib.version_code)
    if newer:
        notes.append(newer)
    algos, protos = list(topts.algos) if topts.algos else None, list(topts.protos) if topts.protos else None
    if job.host.size * opts.nthreads * opts.ngpus < 2:
        nccl_candidates("all_reduce", lib.version_code, algos, protos)  # a typo is an error whatever the ranks
        if job.host.rank == 0:
            print(f"# ncclbench tune {coll.name}: {library}: {ONE_RANK_NCCL}", flush=True)
        return None
    cset = nccl_candidates(coll.name, lib.version_code, algos, protos, list(topts.ctas) if topts.ctas else None,
                           job.hosts)
    switcher = NcclSwitcher(opts, job.host, coll, cset.candidates)
    job.on_end(switcher.close, abort=switcher.abort)
    cset = CandidateSet([c for c in cset.candidates if c.label in switcher.workers],
                        cset.skipped + switcher.dropped)
    return Candidates(cset, switcher, library, lib.version_code, notes)


def _tty_progress(size: int) -> None:
    print(f"\rtune: {size} B ...", end="", file=sys.stderr, flush=True)


def measure_and_report(topts: TuneOptions, plan: RunPlan, cset: CandidateSet, switcher: Switcher, library: str,
                       version_code: int | None, nnodes: int, notes: list[str], reporter: bool) -> int:
    """Measure `cset` over `plan`'s sizes (after the memory clamp) and its one test (datatype, op,
    root), then judge and write the outputs on the reporting rank; returns the exit status."""
    from .candidate_runner import run_schedule

    opts = plan.options
    rounds = topts.rounds or default_rounds(opts.iters)
    per_round = iterations_per_round(opts.iters, rounds)
    few = few_rounds_note(rounds)
    if few:
        notes = [*notes, few]
    if plan.sizes.reduced_max_bytes is not None:
        notes = [*notes, f"{reducing_max_bytes_text(plan.sizes.reduced_max_bytes)} "
                         f"(-e {plan.sizes.requested_max_bytes}): the sizes end there, as in a plain run"]
    sizes = list(plan.sizes.sweep())
    if not sizes:
        raise ArgumentError("tune: the size range -b .. -e holds no size")
    dtype, op, root = next(plan.tests())  # tune's options name one datatype and one op; one root
    progress = _tty_progress if reporter and sys.stderr.isatty() else None
    start = now_string()
    measured = run_schedule(plan.collective, opts, dtype, op, root, sizes, cset.candidates, switcher, rounds,
                            per_round, progress)
    if progress is not None:
        print("\r", end="", file=sys.stderr, flush=True)
    if not reporter:
        return 0
    result = TuneResult(
        collective=plan.collective.name, backend=plan.backend.value, library=library, version_code=version_code,
        nranks=switcher.control.nranks, nnodes=nnodes, datatype=dtype.name, op=op.name, rounds=rounds,
        iters_per_round=per_round, candidates=cset.candidates, skipped=cset.skipped, dropped=measured.dropped,
        not_applicable=measured.not_applicable, times_us=measured.times_us, algbw_bytes=measured.algbw_bytes,
        param_counts=measured.param_counts,
        bus_factor=measured.bus_factor, command=["ncclbench", *topts.child_args()], start_time=start,
        wall_s=measured.wall_s, notes=notes, root=root, reduced_max_bytes=plan.sizes.reduced_max_bytes)
    from .outputs import write_outputs

    write_outputs(result, topts, opts)
    return 0

