"""One tune job, on every rank: form the job, build the candidates and the
backend's switcher, make the run plan a plain run would make on the same
workers (`run.plan.make_plan`: nccl-tests' memory clamp on the sizes, the
datatype/op check, the root), run the interleaved schedule over the plan's
sizes, and (on the reporting rank) judge and write the outputs.

A one-rank job has nothing to tune: NCCL runs a one-rank collective as a
local copy (ncclLaunchOneRank, src/enqueue.cc), and MPI's collective
algorithms all reduce to the same no-op exchange, so the command says so
and ends successfully.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import TYPE_CHECKING

from ..backends.worker import Worker
from ..collectives import lookup
from ..core.config import Backend
from ..core.errors import ArgumentError, BenchError, print_error
from ..launch.detect import LaunchInfo
from ..launch.hostid import host_label
from ..output.numfmt import now_string
from ..output.text import reducing_max_bytes_text
from ..run.plan import RunPlan, make_plan
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


def run_tune_here(topts: TuneOptions, backend: Backend, launch: LaunchInfo, note: str | None) -> int:
    """Run the tune job with this process as one rank; return the exit status."""
    from ..launch.bootstrap import make_host_comm

    is_mpi = backend is Backend.MPI
    opts = topts.bench
    if not is_mpi and not opts.timeout:
        opts = dataclasses.replace(opts, timeout=DEFAULT_TIMEOUT_S)
    host = make_host_comm(launch, opts.timeout or None, prefer_mpi=is_mpi, require_mpi=is_mpi,
                          op_timeout_s=opts.timeout or None)
    switcher: MpichSwitcher | NcclSwitcher | None = None
    workers: list[Worker] = []
    try:
        if topts.verify and launch.kind != "single":
            raise ArgumentError("tune --verify starts ordinary runs itself: start tune with --nprocs N "
                                "(or, on one GPU host, without a launcher), or verify by hand with the env lines")
        check_environment(topts, backend)
        coll = lookup(opts.collective)
        if coll is None:
            raise ArgumentError(f"unknown collective {opts.collective!r}")
        nnodes = len(set(host.allgather(host_label())))  # hosts as NCCL groups them (NCCL_HOSTID)
        reporter = host.rank == 0
        notes = [note] if note else []
        if not is_mpi and os.environ.get("NCCL_TUNER_PLUGIN"):
            notes.append(f"NCCL_TUNER_PLUGIN={os.environ['NCCL_TUNER_PLUGIN']} is set: the plugin may override "
                         "NCCL's choice, so 'default' is NCCL's choice with that plugin")
        if is_mpi:
            from ..backends.mpi_cpu import MpiWorker
            from .candidate_runner import MpichSwitcher
            from .mpich import MpiT, algorithm_cvar, cvar_choices

            cvar = algorithm_cvar(coll.name)
            mpit = MpiT()
            try:
                choices = cvar_choices(mpit.info(cvar)) if cvar else {}
            finally:
                mpit.close()
            cset = mpich_candidates(coll.name, choices, list(topts.algos) if topts.algos else None)
            assert cvar is not None  # mpich_candidates refused a collective without one
            worker = MpiWorker(opts, host)
            workers = [worker]
            if worker.nranks < 2:
                if reporter:
                    print(f"# ncclbench tune {coll.name}: {ONE_RANK_MPI}", flush=True)
                return 0
            switcher = MpichSwitcher(worker, cvar, choices)
            library = worker.library_description()
            version_code = None
        else:
            from ..nccl.binding import get_library
            from .nccl_job import NcclSwitcher

            lib = get_library(opts.nccl_lib)
            version_code = lib.version_code
            library = f"NCCL {lib.version}"
            newer = nccl_rules.newer_than_rules_note(version_code)
            if newer:
                notes.append(newer)
            nranks = host.size * opts.nthreads * opts.ngpus
            if nranks < 2:
                # names are still checked: a typo is an error whatever the rank count
                nccl_candidates("all_reduce", version_code, list(topts.algos) if topts.algos else None,
                                list(topts.protos) if topts.protos else None)
                if reporter:
                    print(f"# ncclbench tune {coll.name}: {library}: {ONE_RANK_NCCL}", flush=True)
                return 0
            cset = nccl_candidates(coll.name, version_code, list(topts.algos) if topts.algos else None,
                                   list(topts.protos) if topts.protos else None,
                                   list(topts.ctas) if topts.ctas else None, nnodes)
            nccl_switcher = NcclSwitcher(opts, host, coll, cset.candidates)
            switcher = nccl_switcher
            cset = CandidateSet([c for c in cset.candidates if c.label in nccl_switcher.workers],
                                cset.skipped + nccl_switcher.dropped)
        library = " ".join(library.split())  # MPICH's "MPICH Version:      5.0.2"
        # Any candidate's worker: they share the world's buffer size (the same options and GPUs).
        plan = make_plan(opts, coll, backend, switcher.control)
        return measure_and_report(topts, plan, cset, switcher, library, version_code, nnodes, notes, reporter)
    except BenchError as exc:
        code = print_error(exc)
        if host.size > 1 and not exc.all_ranks and not isinstance(exc, ArgumentError):
            host.abort(code)
        return code
    finally:
        if switcher is not None:
            switcher.close()
        for w in workers:
            w.close()
        host.close()


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

