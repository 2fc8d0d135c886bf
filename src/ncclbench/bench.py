"""Running one benchmark in this process: form the job, build the workers and
reporters, run the sweep, and turn the outcome into an exit code.  (Where the
run happens, and its command line, is `commands/_benchmark.py`'s business.)"""

from __future__ import annotations

import os
import sys
import time

from . import __version__
from .collectives import lookup
from .config import BenchOptions
from .errors import BenchError, ExitCode, print_error
from .harness.runner import filter_combinations, run_workers
from .harness.recording import rounds_note
from .results import RunInfo, RunSummary

SELF_LAUNCH_ENV = "NCCLBENCH_SELF_LAUNCHED"  # set on ranks ncclbench started one per GPU
BACKEND_NOTE_ENV = "NCCLBENCH_BACKEND_NOTE"  # the parent's line on why it chose the backend


def exit_code_for(summary: RunSummary | None) -> int:
    if summary is None:
        return int(ExitCode.OK)
    if summary.out_of_bounds or summary.gate_ok is False:
        return int(ExitCode.DATA_ERRORS)
    return int(ExitCode.OK)


def make_workers(opts: BenchOptions, backend: str, host):
    if backend == "mpi":
        from .backends.mpi_cpu import MpiWorker

        return [MpiWorker(opts, host)]
    from .backends.nccl_gpu import create_nccl_workers

    return create_nccl_workers(opts, host, lookup(opts.collective))


def collect_devices(workers) -> list:
    """`# Using devices` lines of the whole world (at the reporter).  Gathering is
    collective over every worker, so with -t > 1 each thread gathers at once."""
    if len(workers) == 1:
        return workers[0].gather_devices() or []
    import threading

    out: list = [None] * len(workers)

    def body(i):
        out[i] = workers[i].gather_devices()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(1, len(workers))]
    for t in threads:
        t.start()
    body(0)
    for t in threads:
        t.join()
    return out[0] or []


def run_info(opts: BenchOptions, backend: str, workers, host, notes: list[str]) -> RunInfo:
    w0 = workers[0]
    devices = collect_devices(workers)
    lib = getattr(w0, "library", None)
    code = getattr(w0, "nccl_version_code", None)
    info = RunInfo(
        program=opts.program, argv=list(opts.argv), backend=backend, version=__version__,
        nccl_version_code=code, nccl_headers_code=code,
        library=lib.describe() if lib is not None else _mpi_library(),
        devices=devices, world_size=host.size, nranks=w0.nranks,
        start_time=time.strftime("%Y-%m-%d %H:%M:%S"),
        hosts=sorted({d.hostname for d in devices}), notes=notes + list(getattr(w0, "notes", [])),
    )
    reduced = getattr(w0, "reduced_max_bytes", None)
    if reduced:
        info.extra["max_bytes_reduced_to"] = reduced
    return info


def _mpi_library() -> str:
    try:
        from mpi4py import MPI

        return MPI.Get_library_version().splitlines()[0].strip()
    except Exception:
        return "MPI"


def open_reporters(opts: BenchOptions):
    """Text (+ JSON with -J), the result store and a progress bar (stderr, only
    on a terminal); opened before the run so an unwritable -J path fails up front."""
    from .output import open_reporters as open_output
    from .report.progress import ProgressReporter

    multi = open_output(opts)
    store = None
    if opts.store and os.environ.get("NCCLBENCH_NO_STORE") != "1":
        from .store.reporter import StoreReporter

        store = StoreReporter.open()
        multi.reporters.append(store)
    if not sys.stdout.isatty():  # the bar would interleave with the table on one terminal
        multi.reporters.append(ProgressReporter())
    return multi, store


def preflight_notes(opts: BenchOptions, backend: str, launch, host) -> list[str]:
    """The launch checks of `ncclbench preflight`, run at the start of every
    benchmark: a trap (independent copies, one GPU taken twice, too few GPUs,
    ...) ends the run on every rank with exit 6 and what to fix; warnings and one
    version line per host go into the banner."""
    from .launch.bootstrap import host_comm_name
    from .launch.facts import collect_rank_facts
    from .launch.preflight import ERROR, WARN, check_facts, format_host_lines

    gpu = backend == "nccl"
    facts = collect_rank_facts(launch, hostcomm=host_comm_name(host), nccl_lib=opts.nccl_lib,
                               probe_gpus=gpu, probe_nccl=None if gpu else False)
    gathered = host.gather(facts, 0)
    verdict = None
    if host.rank == 0:
        findings = check_facts(gathered, launch.size, opts.nthreads * opts.ngpus, gpu)
        errors = [f.message for f in findings if f.level == ERROR]
        lines = format_host_lines(gathered) if gpu else []
        lines += [f"# {f}" for f in findings if f.level == WARN]
        verdict = ("; ".join(errors) or None, lines)
    error, lines = host.bcast(verdict, 0)
    if error:
        raise BenchError(error, ExitCode.INVALID_USAGE, all_ranks=True)
    return lines


def run_here(opts: BenchOptions, backend: str, launch, note: str | None) -> int:
    from .launch.bootstrap import make_host_comm

    notes = []
    note = note or os.environ.get(BACKEND_NOTE_ENV)
    if note:
        notes.append(note)
    if os.environ.get(SELF_LAUNCH_ENV):
        notes.append(f"started {os.environ[SELF_LAUNCH_ENV]} processes on this host, one per GPU "
                     "(use --nprocs N or a launcher such as mpirun/srun/torchrun to change)")
    mpi = backend == "mpi"
    host = make_host_comm(launch, opts.timeout or None, prefer_mpi=mpi, require_mpi=mpi,
                          op_timeout_s=opts.timeout or None)
    workers = []
    reporter = None
    try:
        notes += preflight_notes(opts, backend, launch, host)
        workers = make_workers(opts, backend, host)
        if hasattr(host, "add_failure_callback"):
            # a peer died: abort our communicators so no rank stays stuck in a device wait
            host.add_failure_callback(lambda *_: [w.abort() for w in workers])
        notes += filter_combinations(opts, lookup(opts.collective), workers[0])
        notes += rounds_note(lookup(opts.collective), workers[0].nranks, len(workers[0].slots))
        info = run_info(opts, backend, workers, host, notes)
        store = None
        if workers[0].is_reporter:
            reporter, store = open_reporters(opts)
            reporter.begin(info, opts)
        summary = run_workers(opts, workers, reporter)
        if reporter is not None and summary is not None:
            reporter.end(summary)
            reporter.close()
        code = exit_code_for(summary)
        if opts.baseline and store is not None:
            code = max(code, store.check_baseline(opts.baseline))
        return code
    except BenchError as exc:
        code = print_error(exc)
        if host.size > 1 and not exc.all_ranks:
            host.abort(code)  # the others may be waiting for us: end the job
        return code
    finally:
        if reporter is not None:
            reporter.close()
        for w in workers:
            w.close()
        host.close()
