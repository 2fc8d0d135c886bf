"""`ncclbench <collective> [nccl-tests options]`: the benchmark command.

Not an argparse command: the command line is nccl-tests' (getopt quirks
included, `ncclbench.run.bench_args`).  This module decides *where* the run happens:
started here by `--nprocs N`, one process per visible GPU, or (the CPU backend
chosen because there is no GPU) enough CPU ranks to move data (the children run
this same command line, `ncclbench.benchmark.orchestrate.spawn`), or in this process
(`ncclbench.benchmark.orchestrate.run_here`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from typing import Any

from ..backends.select import choose_backend, default_cpu_ranks, default_cpu_ranks_note
from ..benchmark.orchestrate import COMMAND_LINE_ENV, local_ranks_to_start, run_here, spawn
from ..core.config import Backend, BenchOptions
from ..launch.shutdown import LAUNCHER_PID_ENV
from ..launch.spawn import find_mpiexec, strip_nprocs
from ..run import gate_processes as gp
from ..run.bench_args import HelpRequested, parse_bench_args


def before_run_notes(opts: BenchOptions) -> list[str]:
    """What the user should know before a run starts about options it will not act on
    as they may expect (nccl-tests is silent about them)."""
    notes = []
    if opts.output_file and not opts.json_enabled:
        stem = opts.output_file.rsplit(".", 1)[0] if "." in opts.output_file.rsplit("/", 1)[-1] else opts.output_file
        notes.append(f"-J {opts.output_file}: nothing will be written there: like nccl-tests, ncclbench writes JSON "
                     f"only to a name ending in .json (e.g. -J {stem}.json)")
    return notes


def run_benchmark(program: str, args: list[str]) -> int:
    """Parse an nccl-tests command line for `program` and run it (here or in
    started processes); return the exit status."""
    try:
        opts = parse_bench_args(program, args)
    except HelpRequested as h:
        print(h.text, end="", flush=True)
        return int(h.exit_code)
    started_as = os.environ.pop(COMMAND_LINE_ENV, None)  # not passed on to what this rank starts in turn
    if started_as:  # a rank this command started: record the command line as typed (--nprocs kept)
        with contextlib.suppress(ValueError, TypeError):
            opts = dataclasses.replace(opts, argv=tuple(str(a) for a in json.loads(started_as)))
    if gp.is_round_job():  # one round of a gated run's latency figure (run/gate_processes.py)
        opts = gp.round_job_options(opts)
    backend, note = choose_backend(opts.backend, opts.nccl_lib)

    from ..launch.detect import check_nprocs, detect_launch

    launch = detect_launch()
    check_nprocs(opts.nprocs, launch)
    if launch.rank == 0 and LAUNCHER_PID_ENV not in os.environ:  # once per job: not again in the ranks we start
        for line in before_run_notes(opts):
            print(f"ncclbench: {line}", file=sys.stderr, flush=True)
    # (inline, not a function of its own: tests/test_run_path.py counts the frames down to the loop)
    with gp.rounds_for_checked_run(_gate_rounds_first(opts, program, args, launch.kind)):
        nprocs, one_per_gpu = local_ranks_to_start(opts, backend, launch)
        child_args = [program, *strip_nprocs(args)]
        if nprocs:
            return spawn(backend, nprocs, child_args, None if one_per_gpu else note, self_launched=one_per_gpu,
                         command_line=opts.argv)
        if backend is Backend.MPI and note is not None and launch.kind == "single" and opts.nprocs is None \
                and find_mpiexec() is not None:  # chosen by --backend auto: no GPU here, no launcher
            n = default_cpu_ranks(os.cpu_count())
            return spawn(backend, n, child_args, f"{note}; {default_cpu_ranks_note(n, os.cpu_count())}",
                         command_line=opts.argv)
        return run_here(opts, backend, launch, note)


def _gate_rounds_first(opts: BenchOptions, program: str, args: list[str], launch_kind: str) -> dict[str, Any] | None:
    """A gated run that starts its own processes measures its latency rounds first, each a job of
    its own (run/gate_processes.py); None where the run measures them itself.  A round job that
    fails leaves {"failed": why}: the run then measures its rounds itself and says why."""
    if not (opts.gate_rounds and gp.starts_its_processes(launch_kind) and gp.has_gate_sizes(opts)):
        return None
    if opts.baseline:  # a baseline that cannot judge fails the run at its start: not after the rounds
        from ..benchmark.observers import storing
        from ..store.reporter import baseline_problem

        if baseline_problem(opts.baseline, storing(opts)):
            return None
    say = (lambda line: print(f"\r\x1b[K{line}", end="", file=sys.stderr, flush=True)) if sys.stderr.isatty() else None
    record, why = gp.measure_in_round_jobs(program, args, opts.gate_rounds, say)
    if say is not None:
        print("\r\x1b[K", end="", file=sys.stderr, flush=True)
    return record if record is not None else {"failed": why}
