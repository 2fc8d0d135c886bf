"""`ncclbench <collective> [nccl-tests options]`: the benchmark command.

Not an argparse command: the command line is nccl-tests' (getopt quirks
included, `ncclbench.options`).  This module decides *where* the run happens:
started here by `--nprocs N` or one process per visible GPU (the children run
this same command line), or in this process (`ncclbench.bench.run_here`).
"""

from __future__ import annotations

import os

from ..backends.select import BACKEND_ENV, choose_backend, gpu_count
from ..bench import BACKEND_NOTE_ENV, SELF_LAUNCH_ENV, run_here
from ..config import Backend, BenchOptions
from ..launch.spawn import LocalSpawnLauncher, spawn_mpiexec, strip_nprocs
from ..options import HelpRequested, parse_bench_args

def self_launch_count(opts: BenchOptions) -> int:
    """Processes to start on this host when no launcher is present: one per
    visible GPU (divided by the GPUs each process drives), like `mpirun -np N`."""
    if os.environ.get("NCCL_TESTS_DEVICE") is not None:
        return 1
    per_process = max(1, opts.nthreads * opts.ngpus)
    n = gpu_count()
    return n // per_process if n >= 2 * per_process else 1


def run_benchmark(program: str, args: list[str]) -> int:
    """Parse an nccl-tests command line for `program` and run it (here or in
    started processes); return the exit status."""
    try:
        opts = parse_bench_args(program, args)
    except HelpRequested as h:
        print(h.text, end="", flush=True)
        return int(h.exit_code)
    backend, note = choose_backend(opts.backend, opts.nccl_lib)

    from ..launch.detect import detect_launch

    launch = detect_launch()
    child_args = [program, *strip_nprocs(args)]
    if opts.nprocs and launch.kind == "single":
        return spawn(backend, opts.nprocs, child_args, note)
    if backend is Backend.NCCL and launch.kind == "single" and opts.nprocs is None:
        n = self_launch_count(opts)
        if n > 1:
            return spawn(backend, n, child_args, None, self_launched=True)
    return run_here(opts, backend, launch, note)


def spawn(backend: Backend, nprocs: int, child_args: list[str], note: str | None,
          self_launched: bool = False) -> int:
    """Start `nprocs` ranks of this command line on this host and wait for them."""
    env = dict(os.environ)
    env[BACKEND_ENV] = backend.value  # `--backend auto` in the children: no second probe, same choice
    if note:
        env[BACKEND_NOTE_ENV] = note
    if self_launched:
        env[SELF_LAUNCH_ENV] = str(nprocs)
    if backend is Backend.MPI:
        return spawn_mpiexec(nprocs, child_args, env=env)
    return LocalSpawnLauncher(nprocs, child_args, env=env).run()
