"""Running one benchmark: start the ranks of this host (`spawn`: --nprocs N,
or one process per visible GPU), or run as one rank of the job here
(`run_here`): form the job, build the workers, make the run plan, open the
reporters, run the plan, and turn the outcome into an exit code.  Which of
the two, for a command line, is decided by the command layer
(`commands/_benchmark.py`; `commands/tune.py` reuses `local_ranks_to_start` and `spawn`)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .. import __version__
from ..backends.select import BACKEND_ENV, gpu_count
from ..backends.threads import on_each_thread
from ..backends.worker import Worker
from ..collectives import COLLECTIVES
from ..collectives.collective import Collective
from ..core.config import Backend, BenchOptions
from ..core.errors import BenchError, ExitCode
from ..core.results import ONE_RANK_LINE, DeviceInfo, RunInfo, RunSummary
from ..explain.live import LiveExplain
from ..explain.live import wanted as explain_wanted
from ..launch.detect import LaunchInfo
from ..launch.facts import RankFacts
from ..launch.hostcomm import HostComm
from ..launch.shutdown import LAUNCHER_PID_ENV, JobInterrupted, RankSignals, end_run, rank_identity
from ..launch.spawn import LocalSpawnLauncher, spawn_mpiexec
from ..output import MultiReporter
from ..output.numfmt import now_string
from ..run.plan import RunPlan, make_plan
from ..run.plan_runner import run_workers
from ..run.recording import rounds_note

if TYPE_CHECKING:  # the store is imported when a run opens it, not at every rank's start
    from ..store.reporter import StoreReporter

SELF_LAUNCH_ENV = "NCCLBENCH_SELF_LAUNCHED"  # set on ranks ncclbench started one per GPU
BACKEND_NOTE_ENV = "NCCLBENCH_BACKEND_NOTE"  # the parent's line on why it chose the backend
PROGRESS_ENV = "NCCLBENCH_PROGRESS"  # 1/0: the starting launcher's terminal decides the ranks' progress bar
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


def make_workers(opts: BenchOptions, backend: Backend, host: HostComm, collective: Collective,
                 on_comm_init: Callable[[], None] | None = None) -> list[Worker]:
    """This process's workers (one per -t thread).  Collective over `host`.
    `on_comm_init`: see create_nccl_workers (the CPU backend has no such moment)."""
    if backend is Backend.MPI:
        from ..backends.mpi_cpu import MpiWorker

        return [MpiWorker(opts, host)]
    from ..backends.nccl_setup import create_nccl_workers

    return list(create_nccl_workers(opts, host, collective, on_comm_init=on_comm_init))


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


def wants_progress_bar() -> bool:
    """A bar on stderr when that is a terminal and the table goes elsewhere (on one
    terminal the bar would interleave with the table)."""
    return sys.stderr.isatty() and not sys.stdout.isatty()


def storing(opts: BenchOptions) -> bool:
    """Whether this run goes into the result store (not --no-store, not NCCLBENCH_NO_STORE=1)."""
    return opts.store and os.environ.get("NCCLBENCH_NO_STORE") != "1"


def open_reporters(plan: RunPlan, env: dict[str, str] | None = None) -> tuple[MultiReporter, StoreReporter | None]:
    """Text (+ JSON with -J), the result store and a progress bar (stderr, only
    on a terminal); opened before the run so an unwritable -J path fails up front.
    `env`: the environment the run's record keeps (default: this process's)."""
    from ..output import open_output_reporters
    from ..report.progress import ProgressReporter

    opts = plan.options
    multi = open_output_reporters(opts, env=env)
    store = None
    if storing(opts):
        from ..store.reporter import StoreReporter

        store = StoreReporter.open(env=env)
        multi.reporters.append(store)
    decided = os.environ.get(PROGRESS_ENV)
    if decided is not None:  # started by ncclbench: its launcher saw the terminal
        if decided == "1":
            multi.reporters.append(ProgressReporter(plan.expected_rows(), force=True))
    elif wants_progress_bar():
        multi.reporters.append(ProgressReporter(plan.expected_rows()))
    return multi, store


def preflight_notes(opts: BenchOptions, backend: Backend, launch: LaunchInfo,
                    host: HostComm) -> tuple[list[str], list[RankFacts] | None, int]:
    """The launch checks of `ncclbench preflight`, run at the start of every
    benchmark: a trap (independent copies, one GPU taken twice, too few GPUs,
    ...) ends the run on every rank with exit 6 and what to fix; warnings and one
    version line per host go into the banner.  Returns those lines, at rank 0
    every rank's facts (explain matches the ranks' GPUs to topology), and this
    rank's place on its host as NCCL groups hosts (0: it reads the host's topology)."""
    from ..launch.bootstrap import host_comm_name
    from ..launch.facts import collect_rank_facts
    from ..launch.hostid import local_ranks_by_host
    from ..launch.preflight_checks import ERROR, WARN, check_facts, format_host_lines

    gpu = backend is Backend.NCCL
    facts = collect_rank_facts(launch, hostcomm=host_comm_name(host), nccl_lib=opts.nccl_lib,
                               probe_gpus=gpu, probe_nccl=None if gpu else False)
    gathered = host.gather(facts, 0)
    verdict = None
    if gathered is not None:
        findings = check_facts(gathered, launch.size, opts.nthreads * opts.ngpus, gpu)
        errors = [f.message for f in findings if f.level == ERROR]
        lines = format_host_lines(gathered) if gpu else []
        lines += [f"# {f}" for f in findings if f.level == WARN]
        verdict = ("; ".join(errors) or None, lines, local_ranks_by_host([f.host_label for f in gathered]))
    error, lines, on_host = host.bcast(verdict, 0)
    if error:
        raise BenchError(error, ExitCode.INVALID_USAGE, all_ranks=True)
    return lines, gathered, on_host[host.rank]


def run_here(opts: BenchOptions, backend: Backend, launch: LaunchInfo, note: str | None) -> int:  # noqa: C901 - complexity 25 when the limit came; split it (issue 33)
    """Run the benchmark with this process as one rank of `launch`'s job;
    return the exit status."""
    from ..launch.bootstrap import make_host_comm

    notes = []
    note = note or os.environ.get(BACKEND_NOTE_ENV)
    if note:
        notes.append(note)
    if os.environ.get(SELF_LAUNCH_ENV):
        notes.append(f"started {os.environ[SELF_LAUNCH_ENV]} processes on this host, one per GPU "
                     "(use --nprocs N or a launcher such as mpirun/srun/torchrun to change)")
    mpi = backend is Backend.MPI
    # SIGTERM/SIGINT/SIGHUP end the run through the except clauses below (launch/shutdown.py)
    signals = RankSignals(f"pid {os.getpid()}", quiet=LAUNCHER_PID_ENV in os.environ).install()
    host = make_host_comm(launch, opts.timeout or None, prefer_mpi=mpi, require_mpi=mpi,
                          op_timeout_s=opts.timeout or None)
    signals.describe = rank_identity(host.rank)
    workers: list[Worker] = []
    reporter = None
    store = None
    # The run judged (explain/): topology read from now on in a thread; nothing of it runs in the timed loops.
    explain = LiveExplain(opts, backend, launch.local_rank) if explain_wanted(opts) else None
    try:
        pre_lines, rank_facts, on_host = preflight_notes(opts, backend, launch, host)
        notes += pre_lines
        if opts.baseline:  # a baseline that is not there fails now, on every rank, not after the sweep
            from ..store.reporter import baseline_problem

            problem = host.bcast(baseline_problem(opts.baseline, storing(opts)) if host.rank == 0 else None, 0)
            if problem:
                err = BenchError(problem, ExitCode.ARGUMENT, all_ranks=True)
                err.relayed = host.rank != 0  # type: ignore[attr-defined]  # rank 0 says it, the others stay quiet
                raise err
        if explain is not None:  # each host's first rank as NCCL groups hosts reads its topology, not the launcher's
            explain.local_rank = on_host
        collective = COLLECTIVES[opts.collective]
        if explain is not None:
            explain.before_workers(opts.nccl_lib)
        workers = make_workers(opts, backend, host, collective,
                               on_comm_init=explain.start_topology if explain is not None else None)

        def abort_workers(_error: BenchError) -> None:
            """A peer died: abort our communicators so no rank stays stuck in a device wait."""
            for w in workers:
                w.abort()

        host.add_failure_callback(abort_workers)
        plan = make_plan(opts, collective, backend, workers[0])
        info = run_info(plan, workers, host, notes)
        if rank_facts:  # the hosts as NCCL groups ranks (NCCL_HOSTID), for the banner, the JSON and the store
            info.hosts = sorted({f.host_label for f in rank_facts})
        if explain is not None:
            explain.after_workers(host, rank_facts, info)
        if workers[0].is_reporter:
            reporter, store = open_reporters(plan, env=explain.user_env if explain is not None else None)
            if explain is not None:
                reporter.reporters.append(explain.rows)
            reporter.begin(info, opts)
        summary = run_workers(plan, workers, reporter)
        if explain is not None:
            explain.finish(plan, workers, host, summary)
        if opts.gate_rounds:  # after explain read NCCL's account of the run: the rounds make communicators of their own
            from ..run.gate_rounds import gate_lines, run_gate_rounds

            rounds = run_gate_rounds(plan, workers)
            if summary is not None and rounds is not None:
                summary.gate_latency = rounds
                summary.gate_lines = gate_lines(rounds)
        if reporter is not None and summary is not None:
            reporter.end(summary)
            reporter.close()
        code = exit_code_for(summary)
        if explain is not None:
            code = max(code, explain.exit_code())
        if opts.baseline and store is not None:
            gated = store.check_baseline(opts.baseline)  # 0, 7 or 9 (not judged): the run's own failure comes first
            code = code or gated
        return code
    except (JobInterrupted, BenchError) as exc:
        # one line, the stored run's outcome, and the other ranks told (they may be waiting for us)
        return end_run(exc, signals, host, store)
    except BrokenPipeError:  # `| head`: the dispatcher ends quietly (exit 0); the stored run says why it stopped
        if store is not None:
            store.set_outcome("interrupted", "the reader of its output went away (a closed pipe)")
        raise
    finally:
        signals.disarm()
        if reporter is not None:
            reporter.close()
        for w in workers:
            w.close()
        if explain is not None:
            explain.close()
        host.close()
        signals.restore()
