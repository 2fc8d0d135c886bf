"""Command-line entry point.

`ncclbench <collective> [nccl-tests options]` runs a benchmark exactly like
the nccl-tests binary of that name (`ncclbench all_reduce_perf -b 8 -e 128M
-f 2 -g 1`); `ncclbench <subcommand>` runs one of the tools on top (list,
preflight, history, show, import, compare, check, baseline, report).

Every anticipated failure is a `BenchError`: one line on stderr and
nccl-tests' exit code, never a traceback.
"""

from __future__ import annotations

import sys

from . import __version__
from .errors import BenchError, ExitCode

STORE_COMMANDS = ("history", "show", "import", "compare", "check", "baseline", "report")


def top_level_help() -> str:
    from .collectives import COLLECTIVES

    names = ", ".join(COLLECTIVES)
    return f"""ncclbench {__version__}: nccl-tests-compatible collective benchmarks, no build step.

usage:
  ncclbench <collective> [nccl-tests options]   run a benchmark, e.g.
      ncclbench all_reduce_perf -b 8 -e 8G -f 2      (one process per visible GPU)
      mpirun -np 16 ncclbench all_reduce -b 8 -e 8G -f 2 -g 1
      ncclbench all_reduce -b 8 -e 64M -f 2 --nprocs 4 --backend mpi   (CPU backend)
  ncclbench <collective> -h                     the nccl-tests option list (+ ncclbench's own)
  ncclbench list                                collectives, datatypes, ops and backends here
  ncclbench preflight [options]                 check the launch (ranks, GPUs, env) without collectives
  ncclbench history | show RUN | import FILE... | compare A B | check RUN --against NAME
  ncclbench baseline set NAME RUN | report RUN... -o report.html
  ncclbench --version

collectives: {names}
(each also answers to its nccl-tests binary name, e.g. all_reduce_perf)

exit codes: 0 ok, 1 internal, 2 CUDA, 3 NCCL, 4 timeout, 5 not supported,
            6 invalid usage, 7 wrong results / bandwidth gate, 255 bad arguments
"""


def cmd_list() -> int:
    from .backends.select import describe_backends
    from .collectives import COLLECTIVES
    from .datatypes import DATATYPES, REDOPS

    print("collectives:")
    for name, c in COLLECTIVES.items():
        traits = [t for t, on in (("reduces", c.reduces and name != "sendrecv"), ("rooted", c.rooted)) if on]
        print(f"  {name:<15} {c.program:<20} {' '.join(traits)}")
    print("datatypes:   " + " ".join(d.name for d in DATATYPES))
    print("ops:         " + " ".join(o.name for o in REDOPS))
    print("backends:")
    for line in describe_backends():
        print("  " + line)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if not argv or argv[0] in ("-h", "--help", "help"):
            print(top_level_help(), end="")
            return 0
        if argv[0] == "--version":
            print(f"ncclbench {__version__}")
            return 0
        cmd = argv[0]
        if cmd == "list":
            return cmd_list()
        if cmd == "preflight":
            from .launch.preflight import run_preflight

            return run_preflight(argv[1:], module="ncclbench", subcommand=["preflight"])
        if cmd in STORE_COMMANDS:
            from .store.cli import run_store_command as store_main

            return store_main(argv)
        from .bench import run_bench

        return run_bench(cmd, argv[1:])
    except BenchError as exc:
        print(f"ncclbench: {exc.message}", file=sys.stderr, flush=True)
        return int(exc.code)
    except KeyboardInterrupt:
        print("ncclbench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return int(ExitCode.OK)
