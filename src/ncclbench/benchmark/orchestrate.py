"""Running one benchmark: start the ranks of this host (`spawn`: --nprocs N,
or one process per visible GPU), or run as one rank of the job here
(`run_here`): the job formed, checked and given its workers and plan
(`run.rank_job`, the step tune shares), the banner's facts, the plan run, and
the outcome turned into an exit code; the outputs, the store, live explain and
the gate follow the run as observers (`benchmark.observers`).  Which of the
two, for a command line, is decided by the command layer (`commands/_benchmark.py`;
`commands/tune.py` reuses `local_ranks_to_start` and `spawn`)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from .. import __version__
from ..backends.select import BACKEND_ENV, gpu_count
from ..backends.threads import on_each_thread
from ..backends.worker import Worker
from ..core.config import Backend, BenchOptions
from ..core.errors import ExitCode
from ..core.results import ONE_RANK_LINE, DeviceInfo, RunInfo, RunSummary
from ..launch.detect import LaunchInfo
from ..launch.hostcomm import HostComm
from ..launch.spawn import LocalSpawnLauncher, spawn_mpiexec
from ..output.numfmt import now_string
from ..run.plan import RunPlan
from ..run.plan_runner import run_workers
from ..run.rank_job import RankJob
from ..run.recording import rounds_note
from .observers import PROGRESS_ENV, run_observers, wants_progress_bar

SELF_LAUNCH_ENV = "NCCLBENCH_SELF_LAUNCHED"  # set on ranks ncclbench started one per GPU
BACKEND_NOTE_ENV = "NCCLBENCH_BACKEND_NOTE"  # the parent's line on why it chose the backend
COMMAND_LINE_ENV = "NCCLBENCH_COMMAND_LINE"  # the starting command line (JSON list): what started ranks record


def exit_code_for(summary: RunSummary | None) -> int:
    if summary is None:
        return int(ExitCode.OK)
    if summary.out_of_bounds or summary.gate_ok is False:
        return int(ExitCode.DATA_ERRORS)
    return int(ExitCode.OK)


def self_launch_count(opts: BenchOptions) -> int:
    """Processes to start on this host when no launcher is present: one per
    visible GPU (divided by the GPUs each process drives), like `mpirun -np N`."""
    if os.environ.get("NCCL_TESTS_DEVICE") is not None:
        return 1
    per_process = max(1, opts.nthreads * opts.ngpus)
    n = gpu_count()
    return n // per_process if n >= 2 * per_process else 1


def local_ranks_to_start(opts: BenchOptions, backend: Backend, launch: LaunchInfo) -> tuple[int, bool]:
    """How many ranks this process starts on this host (0: it runs as one rank itself), and
    whether ncclbench chose that count (one per visible GPU) rather than the user (--nprocs).
    Under a launcher nothing is started: the launcher made the ranks."""
    if launch.kind != "single":
        return 0, False
    if opts.nprocs:
        return opts.nprocs, False
    if backend is Backend.NCCL and opts.nprocs is None:
        n = self_launch_count(opts)
        if n > 1:
            return n, True
    return 0, False


def spawn(backend: Backend, nprocs: int, child_args: list[str], note: str | None,
          self_launched: bool = False, command_line: Sequence[str] | None = None) -> int:
    """Start `nprocs` ranks of this command line on this host and wait for them.
    `command_line` is what the user typed (with --nprocs): what the run records."""
    env = dict(os.environ)
    # The ranks' stderr reaches the terminal through a pipe (mpiexec's, or ours for ranks > 0):
    # whether rank 0 draws the bar is decided here, where the terminal is seen.
    env[PROGRESS_ENV] = "1" if wants_progress_bar() else "0"
    if command_line is not None:
        env[COMMAND_LINE_ENV] = json.dumps(list(command_line))
    env[BACKEND_ENV] = backend.value  # `--backend auto` in the children: no second probe, same choice
    if note:
        env[BACKEND_NOTE_ENV] = note
    if self_launched:
        env[SELF_LAUNCH_ENV] = str(nprocs)
    if backend is Backend.MPI:
        from ..launch.bootstrap import require_mpi4py

        require_mpi4py()  # once, here: not one ImportError per rank
        return spawn_mpiexec(nprocs, child_args, env=env)
    return LocalSpawnLauncher(nprocs, child_args, env=env).run()


def collect_devices(workers: Sequence[Worker]) -> list[DeviceInfo]:
    """`# Using devices` lines of the whole world (at the reporter).  Gathering is
    collective over every worker, so with -t > 1 each thread gathers at once."""
    return on_each_thread(len(workers), lambda i: workers[i].gather_devices())[0] or []


def run_info(plan: RunPlan, workers: Sequence[Worker], host: HostComm, notes: list[str]) -> RunInfo:
    """The banner's facts: devices of the world, library, notes, the clamp."""
    w0, opts = workers[0], plan.options
    devices = collect_devices(workers)
    return RunInfo(
        program=opts.program, argv=list(opts.argv), backend=plan.backend.value, version=__version__,
        nccl_version_code=w0.nccl_version_code, nccl_headers_code=w0.nccl_version_code,
        library=w0.library_description(), devices=devices, world_size=host.size, nranks=plan.nranks,
        start_time=now_string(),
        hosts=sorted({d.hostname for d in devices}),
        notes=[*notes, *plan.notes, *rounds_note(plan.collective, plan.nranks, len(w0.slots)), *w0.notes,
               *([ONE_RANK_LINE] if plan.nranks == 1 else [])],
        reduced_max_bytes=plan.sizes.reduced_max_bytes,
    )


def start_notes(note: str | None) -> list[str]:
    """The banner's first notes: why this backend, and how many processes ncclbench started here."""
    notes = []
    note = note or os.environ.get(BACKEND_NOTE_ENV)
    if note:
        notes.append(note)
    if os.environ.get(SELF_LAUNCH_ENV):
        notes.append(f"started {os.environ[SELF_LAUNCH_ENV]} processes on this host, one per GPU "
                     "(use --nprocs N or a launcher such as mpirun/srun/torchrun to change)")
    return notes


def banner_facts(job: RankJob, notes: list[str]) -> RunInfo:
    """`run_info` with the launch checks' lines (one per host, then the warnings) after `notes`,
    and the hosts as NCCL groups ranks (NCCL_HOSTID), for the banner, the JSON and the store."""
    checks = job.checks
    info = run_info(job.plan, job.workers, job.host, [*notes, *checks.host_lines, *(f"# {w}" for w in checks.warnings)])
    if checks.facts:
        info.hosts = sorted({f.host_label for f in checks.facts})
    return info


def run_here(opts: BenchOptions, backend: Backend, launch: LaunchInfo, note: str | None) -> int:
    """Run the benchmark with this process as one rank of `launch`'s job; return the exit
    status.  What follows the run (outputs, store, explain, gate) hears its steps as
    observers (`benchmark.observers`); forming the job and how it ends: `run.rank_job`."""
    observers = run_observers(opts, backend, launch)
    with RankJob(opts, backend, launch, observers) as job:
        job.preflight()
        workers = job.start_workers()
        plan = job.make_plan(workers[0])
        info = banner_facts(job, start_notes(note))
        observers.planned(job, info)
        if job.reporting:
            observers.begin(info, opts)
        summary = run_workers(plan, workers, observers)
        observers.measured(job, summary)
        if summary is not None:
            observers.end(summary)
        return observers.exit_status(exit_code_for(summary))
    return job.exit_status  # a signal or an anticipated error ended the run
