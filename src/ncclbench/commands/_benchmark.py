"""`ncclbench <collective> [nccl-tests options]`: the benchmark command.

Not an argparse command: the command line is nccl-tests' (getopt quirks
included, `ncclbench.options`).  This module decides *where* the run happens:
started here by `--nprocs N`, one process per visible GPU, or (the CPU backend
chosen because there is no GPU) enough CPU ranks to move data (the children run
this same command line, `ncclbench.benchmark.spawn`), or in this process
(`ncclbench.benchmark.run_here`).
"""

from __future__ import annotations

import os

from ..backends.select import choose_backend, default_cpu_ranks, default_cpu_ranks_note
from ..benchmark import local_ranks_to_start, run_here, spawn
from ..config import Backend
from ..launch.spawn import find_mpiexec, strip_nprocs
from ..options import HelpRequested, parse_bench_args


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
    nprocs, one_per_gpu = local_ranks_to_start(opts, backend, launch)
    child_args = [program, *strip_nprocs(args)]
    if nprocs:
        return spawn(backend, nprocs, child_args, None if one_per_gpu else note, self_launched=one_per_gpu)
    if backend is Backend.MPI and note is not None and launch.kind == "single" and opts.nprocs is None \
            and find_mpiexec() is not None:  # chosen by --backend auto: no GPU here, no launcher
        n = default_cpu_ranks(os.cpu_count())
        return spawn(backend, n, child_args, f"{note}; {default_cpu_ranks_note(n, os.cpu_count())}")
    return run_here(opts, backend, launch, note)
